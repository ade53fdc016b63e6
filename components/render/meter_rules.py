"""The usage meter's alerts (components/render/nginx_meter.py): rendered into the stack's rules by
components/render/prometheus_rules.py when the meter runs."""

from __future__ import annotations

from typing import Any

from components.render.prometheus_config import METER_JOB, AlertLookAt, alert_rule


def usage_meter_rules(look_at: AlertLookAt) -> list[dict[str, Any]]:
    """The usage meter's alerts: a request it passed on unmetered (it failed on it: never the
    reason a request fails, but its tokens are not counted), and its counters unreadable (the
    front, where it runs, is down or unreachable)."""
    sel = f'job="{METER_JOB}"'
    return [
        alert_rule(
            "GlmUsageMeterUnmetered",
            f"increase(glm_key_unmetered_total{{{sel}}}[10m]) > 0",
            "warning",
            "The usage meter passed requests of {{ $labels.client }} on unmetered",
            "The usage meter failed on request(s) of key {{ $labels.client }} in the last 10 minutes and passed them on to the model unmetered: they were answered, but "
            "their tokens are missing from the key's usage (and from its fair share while they ran). "
            "The unmetered window is this alert's: from when it fired to when it resolves. Why, one line "
            f"a request: {look_at.front_log}.",
            None,
        ),
        alert_rule(
            "GlmUsageMeterDown",
            f"up{{{sel}}} == 0",
            "critical",
            "The usage meter's counters are unreadable: the front is down or unreachable",
            "Prometheus cannot read the usage meter's counters from {{ $labels.instance }}, the "
            "front's status port. The meter runs inside the front's nginx: while this fires the front "
            "itself is likely down, and no request is served or metered; the counters it kept survive "
            f"its restart (a file on the front's volume). Check {look_at.front_log.split(' 2>&1')[0]} "
            f"and {look_at.running}.",
            "2m",
        ),
        alert_rule(
            "GlmUsageMeterDayBudgetMostlyUsed",
            f'glm_key_budget_used{{{sel},window="tokens_per_day"}}\n'
            f'  / glm_key_budget_limit{{{sel},window="tokens_per_day"}} >= 0.8',
            "warning",
            "Key {{ $labels.client }} has used 80 % of its tokens for the day",
            "API key {{ $labels.client }} has used {{ $value | humanizePercentage }} of its "
            "glm:front.usageMeter tokensPerDay (UTC day). Past it, its requests get a 429 until midnight "
            "UTC. Raise its budget (glm:front.usageMeter.limits.<name>.tokensPerDay, a reload of the "
            "front) or tell its owner.",
            None,
        ),
    ]
