"""What a change will cost, said at preview, next to the resource that pays it.

A reviewer reading ``pulumi preview --diff`` sees ``+-`` on the serving container but not what it
means on a one-box stack: the API is down until the new vLLM has loaded its weights. These notices
put the profile's seed-measured start time (``HardwareFacts.time_to_serve``) beside that line. Their
text depends only on config, so they never make a preview differ from an up.

Front-only changes (keys, TLS, limits, timeouts) are delivered by ``NginxReload`` as a reload; its
``effect`` input, shown in every diff of it, says that they drop nothing. Prometheus' files
(``PrometheusRelease``) reload in place too, and its diff line says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
from pulumi.output import contains_unknowns

from components.profiles import HardwareFacts


def serving_replacement_notice(
    hardware: str, facts: HardwareFacts, hosts: Sequence[str], host: str, grace_seconds: int
) -> str:
    """The warning for a created or replaced vLLM container: what the roll does, in order.

    >>> from components.profiles import PROFILES
    >>> notice = serving_replacement_notice("a800", PROFILES["a800"].facts, ["gpu01", "gpu02"], "gpu02", 30)
    >>> "on host gpu02, step 2 of the roll gpu01 -> gpu02: it leaves the front's rotation first" in notice
    True
    >>> notice.endswith("Expected requests dropped: 0. A failed gate stops the roll here and keeps this replica out.")
    True
    >>> "11-12 min" in serving_replacement_notice("rtx5090", PROFILES["rtx5090"].facts, ["box"], "box", 30)
    True
    """
    drain = f"it leaves the front's rotation first (requests in flight finish, up to {grace_seconds} s)"
    if len(hosts) == 1:
        return (
            f"the serving container is created or replaced: {drain}; on this one-box stack the API then "
            f"answers a JSON 503 until the new vLLM serves and passes its gate, {facts.time_to_serve} on "
            f"{hardware}. Front-only changes (API keys, TLS, limits, timeouts) reload nginx instead and "
            "drop nothing."
        )
    return (
        f"the serving container is created or replaced on host {host}, step {hosts.index(host) + 1} of "
        f"the roll {' -> '.join(hosts)}: {drain}, is replaced and gated directly ({facts.time_to_serve}), "
        "and only then rejoins; the other replicas serve meanwhile. Expected requests dropped: 0. A "
        "failed gate stops the roll here and keeps this replica out."
    )


def one_box_outage_notice(verb: str, hardware: str, facts: HardwareFacts) -> str:
    """What ``make restart`` and ``make rollback`` say before they act on a one-box stack: they run
    no preview, so the preview's warning above is never seen there.

    >>> from components.profiles import PROFILES
    >>> print(one_box_outage_notice("restart", "a800", PROFILES["a800"].facts)[:155])
    restart of a one-box stack: the API answers 503 from when the serving container leaves the front's rotation until the new one passes its gate, for ~6.2 min
    """
    return (
        f"{verb} of a one-box stack: the API answers 503 from when the serving container leaves the "
        f"front's rotation until the new one passes its gate, for {facts.time_to_serve} on "
        f"{hardware}; no other replica serves meanwhile."
    )


def front_replacement_notice(stop_grace_seconds: int) -> str:
    """The warning for a created or replaced Nginx container (its image, port or network changed)."""
    return (
        "the front container is created or replaced: the API port is closed for a few seconds and "
        f"requests still open after {stop_grace_seconds} s are cut. Key, TLS, limit and timeout "
        "changes alone never do this: they reload nginx in place."
    )


def monitoring_replacement_notice() -> str:
    """The warning for a created or replaced Prometheus container: its image, port or network
    changed (its files never replace it: they reload in place, components/docker/prometheus_release.py),
    and its series live in the container's own volume."""
    return (
        "Prometheus is created or replaced: its image, port or network changed (its prometheus.yml, "
        "alert rules and status page reload in place, without this). Its series start again: the "
        "status page's charts begin empty and each alert's `for` timer from zero. The API is not affected."
    )


def warn_when_replaced(resource: pulumi.CustomResource, message: str) -> None:
    """At preview, warn on ``resource`` when it will be created or replaced.

    A resource about to be (re)created has no id yet during a preview; one that stays or is updated
    in place keeps its id. ``run_with_unknowns`` lets the check see the unknown instead of skipping.
    """

    def check(resource_id: Any) -> None:
        if pulumi.runtime.is_dry_run() and contains_unknowns(resource_id):
            pulumi.log.warn(message, resource=resource)

    resource.id.apply(check, run_with_unknowns=True)
