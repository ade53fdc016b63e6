"""Usage per API key name as PromQL over the usage meter's ``glm_key_*`` series (components/host/meter/):
one table for ``make status`` (ops/usage.py) and the status page's usage panel
(components/render/status_page.py), so the two never disagree.
"""

from __future__ import annotations

WINDOW = "1h"
"""The latency quantiles are over the last hour."""


def whole(counter: str, matchers: str = "") -> str:
    """Each key's ``glm_key_<counter>`` as it is now, with what front pods that left handed on
    (``glm_key_inherited_<counter>{from=<pod>}``, components/host/meter/meter_handoff.lua): the
    totals of a table, never a rate (the inherited series jump by a whole pod's history at once).
    What a pod handed on counts once its own series are gone (``unless on (from)`` the front pods
    that still have series, by their ``host`` label), so never twice: the leaving pod waits a scrape
    after the handoff, and its heir's series are read before its own go stale.

    >>> print(whole("prompt_tokens_total"))
    sum by (client) ({__name__=~"glm_key_prompt_tokens_total|glm_key_inherited_prompt_tokens_total"} unless on (from) label_replace(group by (host) ({__name__=~"glm_key_prompt_tokens_total|glm_key_inherited_prompt_tokens_total",host!=""}), "from", "$1", "host", "(.+)"))
    """
    names = f'__name__=~"glm_key_{counter}|glm_key_inherited_{counter}"'
    pods = f'label_replace(group by (host) ({{{names},host!=""}}), "from", "$1", "host", "(.+)")'
    return f"sum by (client) ({{{names}{matchers}}} unless on (from) {pods})"


QUERIES = {
    "requests": whole("requests_total"),
    "errors": whole("requests_total", ',status=~"[45]..|0"'),
    "tokens in": whole("prompt_tokens_total"),
    # Of the tokens in, those the engine found in its prefix cache (usage's cached_tokens).
    "cached in": whole("cached_prompt_tokens_total"),
    "tokens out": whole("completion_tokens_total"),
    **{
        f"{what} p{q}": f"histogram_quantile(0.{q}, sum by (client, le) (rate(glm_key_{series}_bucket[{WINDOW}])))"
        for what, series in (("ttft", "time_to_first_token_seconds"), ("total", "request_duration_seconds"))
        for q in (50, 99)
    },
    "last seen": "max by (client) (glm_key_last_seen_timestamp_seconds)",
    # The key's tightest token budget now (glm:front.usageMeter.limits): "-" for a key without one.
    "tokens left": 'min by (client) (glm_key_budget_limit{window=~"tokens_.*"} - glm_key_budget_used{window=~"tokens_.*"})',
}
"""Column -> PromQL, one series per key name (``client``)."""


def fleet_cache_hit_rate(window: str) -> str:
    """Of the prompt tokens of every key's answers over ``window``, the share the engines found in
    their prefix caches: the fleet's hit rate as the clients were told it (usage's cached_tokens)."""
    return f"sum(rate(glm_key_cached_prompt_tokens_total[{window}])) / sum(rate(glm_key_prompt_tokens_total[{window}]))"
