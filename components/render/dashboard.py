"""The stack's Grafana dashboard (issue 23), rendered as JSON: ``python -m components.render.dashboard``.

Grafana does not run here; ``dashboards/glm53-fleet.json`` is this module's output (a test keeps it
so) and ``dashboards/provisioning.yaml`` loads it from a directory. Every panel reads the stack's
own Prometheus, with the metric names every profile's vLLM exports (``kv_cache_usage_perc``, not
the removed ``gpu_cache_usage_perc``; SPEC §6-7), by ``host`` where the stack has several.
``tests/test_dashboard.py`` runs every panel's PromQL against a real Prometheus scraping the
simulator and the probe's real metrics, and requires data from each.
"""

from __future__ import annotations

import json
from typing import Any

from components import semantic_probe
from components.render.prometheus_config import DEFAULT_JOB, ROTATION_JOB

UID = "glm53-fleet"
RATE = "$__rate_interval"
"""Grafana's rate window (the tests put a fixed window in its place)."""
_P = semantic_probe.METRIC_PREFIX
_PROBE = f'job="{semantic_probe.SCRAPE_JOB}"'
_VLLM = f'job="{DEFAULT_JOB}"'
_ROTATION = f'job="{ROTATION_JOB}"'

ENGINE_UP = (
    f'max by (host) (up{{{_VLLM},host!=""}}) or on (host) '
    f"(0 * max by (host) (glm_rotation_in{{{_ROTATION}}}) "
    f'+ on () group_left () max (up{{{_VLLM},host=""}}))'
)
"""1 while Prometheus reaches a host's vLLM (``up``), per host: several replicas' targets carry
``host``; a single replica's target has none, and its ``up`` goes to the one host of the rotation."""
IN_ROTATION = f"max by (host) (glm_rotation_in{{{_ROTATION}}}) * on (host) ({ENGINE_UP})"
"""1 while a host is in the front's rotation and its engine answers: the rotation alone says 1
for a stopped container until something drains it (a `docker stop` changes no rotation state)."""

PANELS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    (
        "In rotation, per host (1 = in the front's rotation and its engine answers Prometheus)",
        "none",
        ((IN_ROTATION, "{{host}}"),),
    ),
    (
        "Engine up, per host (1 = Prometheus reaches its vLLM)",
        "none",
        ((ENGINE_UP, "{{host}}"),),
    ),
    (
        "Gate history: gates passed and failed, drains, probe ejections and returns (count, per host)",
        "short",
        ((f"sum by (host, event) (glm_rotation_events_total{{{_ROTATION}}})", "{{host}} {{event}}"),),
    ),
    (
        "Ejected by the probe, per host (1 = out of rotation)",
        "none",
        ((f"max by (host) ({_P}_replica_ejected{{{_PROBE}}})", "{{host}}"),),
    ),
    (
        "Probe steps passing (1) or failing (0)",
        "none",
        ((f"min by (host, path, step) ({_P}_step_success{{{_PROBE}}})", "{{host}} {{path}} {{step}}"),),
    ),
    (
        "Probe runs by result (ok, failed, skipped at saturation)",
        "short",
        (
            (
                f"sum by (host, result) (increase({_P}_runs_total{{{_PROBE}}}[{RATE}]))",
                "{{host}} {{result}}",
            ),
        ),
    ),
    (
        "Probe failures in a row, per step (ejection and alerts at K)",
        "short",
        (
            (
                f"max by (host, step) ({_P}_step_consecutive_failures{{{_PROBE}}})",
                "{{host}} {{step}}",
            ),
        ),
    ),
    (
        "KV cache usage",
        "percentunit",
        ((f"max by (host) (vllm:kv_cache_usage_perc{{{_VLLM}}})", "{{host}}"),),
    ),
    (
        "Requests running / waiting",
        "short",
        (
            (f"sum by (host) (vllm:num_requests_running{{{_VLLM}}})", "{{host}} running"),
            (f"sum by (host) (vllm:num_requests_waiting{{{_VLLM}}})", "{{host}} waiting"),
        ),
    ),
    (
        "Time to first token p50 / p99",
        "s",
        tuple(
            (
                f"histogram_quantile({q}, sum by (le, host) "
                f"(rate(vllm:time_to_first_token_seconds_bucket{{{_VLLM}}}[{RATE}])))",
                f"{{{{host}}}} p{int(q * 100)}",
            )
            for q in (0.5, 0.99)
        ),
    ),
    (
        "Generation tokens/s",
        "short",
        ((f"sum by (host) (rate(vllm:generation_tokens_total{{{_VLLM}}}[{RATE}]))", "{{host}}"),),
    ),
    (
        "Prefix cache hit rate per host (the engine's cached / prompt tokens; the fleet's, from the keys' "
        "answers, is on the status page)",
        "percentunit",
        (
            (
                f"sum by (host) (rate(vllm:prefix_cache_hits_total{{{_VLLM}}}[{RATE}])) / sum by (host) "
                f"(rate(vllm:prefix_cache_queries_total{{{_VLLM}}}[{RATE}]))",
                "{{host}}",
            ),
        ),
    ),
)
"""(title, unit, ((PromQL, legend), ...)) per panel, in the dashboard's order."""


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel."""
    return [(title, expr) for title, _unit, targets in PANELS for expr, _legend in targets]


def render_dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model: two panels a row, a Prometheus datasource picker."""
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    panels = []
    for index, (title, unit, targets) in enumerate(PANELS):
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": title,
                "datasource": datasource,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {
                        "refId": chr(ord("A") + n),
                        "expr": expr,
                        "legendFormat": legend,
                        "datasource": datasource,
                    }
                    for n, (expr, legend) in enumerate(targets)
                ],
            }
        )
    return {
        "uid": UID,
        "title": "GLM-5.3-Flash fleet",
        "tags": ["glm53", "vllm"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "panels": panels,
    }


def render_json() -> str:
    """``dashboards/glm53-fleet.json``'s bytes."""
    return json.dumps(render_dashboard(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render_json(), end="")
