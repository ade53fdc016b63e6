"""Alerts on what users feel: time to first token and inter-token latency, as SLOs with burn rates.

Each objective says: ``OBJECTIVE`` (99 %) of first tokens come within the profile's
``ttft_slo_seconds`` (a800, rtx5090, local: 0.5 s; ascend: 2.5 s) and 99 % of the gaps between two
tokens stay within its ``itl_slo_seconds`` (0.05 s = 20 tokens/s; ascend 0.075 s), both bounds of
vLLM's own histograms (``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``),
so the good events are one bucket's count, exactly. The figures are the seeds' (components/hardware.py
and components/profiles.py say which).

The alerts are the multiwindow, multi-burn-rate alerts of Google's SRE workbook ("Alerting on
SLOs"): the error ratio over a long window says the budget really burns, the same over a short
window (1/12 of it) says it still does, so the alert ends soon after the cause. Fast: 14.4x the
budget over 1 h and 5 min (2 % of a 30-day budget in an hour: page). Slow: 6x over 6 h and 30 min
(5 % in six hours: a ticket). A p99 over a threshold (VllmTtftP99High) fires on a single slow
minute; these fire only on what eats the month's budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from components.hardware import HardwareFacts

OBJECTIVE = 0.99
"""The fraction of events within the bound; 1 % is the error budget."""


@dataclass(frozen=True)
class BurnRate:
    name: str
    long: str
    short: str
    factor: float
    severity: str


BURN_RATES = (BurnRate("Fast", "1h", "5m", 14.4, "critical"), BurnRate("Slow", "6h", "30m", 6.0, "warning"))


@dataclass(frozen=True)
class LatencySlo:
    alert: str
    """The alert's name stem (``VllmTtftSlo`` -> ``VllmTtftSloFastBurn``)."""
    metric: str
    what: str
    bound_seconds: float


def latency_slos(facts: HardwareFacts) -> tuple[LatencySlo, ...]:
    return (
        LatencySlo("VllmTtftSlo", "vllm:time_to_first_token_seconds", "first tokens", facts.ttft_slo_seconds),
        LatencySlo(
            "VllmItlSlo", "vllm:inter_token_latency_seconds", "gaps between tokens", facts.itl_slo_seconds
        ),
    )


def _le(bound: float) -> str:
    """The ``le`` label as vLLM's prometheus_client writes it (``0.5``, ``2.5``, ``0.075``)."""
    return repr(float(bound))


def error_ratio(slo: LatencySlo, window: str, job: str, by: str) -> str:
    """The fraction of ``slo``'s events over its bound during ``window`` (empty while idle)."""
    good = f'sum by ({by}) (rate({slo.metric}_bucket{{job="{job}",le="{_le(slo.bound_seconds)}"}}[{window}]))'
    total = f'sum by ({by}) (rate({slo.metric}_count{{job="{job}"}}[{window}]))'
    return f"(1 - {good} / {total})"


def slo_rules(
    facts: HardwareFacts, hardware: str, job: str, *, by_host: bool = False
) -> list[dict[str, Any]]:
    """Two alerts per objective (fast and slow burn), each over two windows."""
    by = "model_name, host" if by_host else "model_name"
    on_host = "On host {{ $labels.host }}: " if by_host else ""
    budget = 1 - OBJECTIVE
    rules = []
    for slo in latency_slos(facts):
        for rate in BURN_RATES:
            threshold = round(rate.factor * budget, 6)
            expr = (
                f"{error_ratio(slo, rate.long, job, by)} > {threshold:g}\n"
                f"and\n{error_ratio(slo, rate.short, job, by)} > {threshold:g}"
            )
            rules.append(
                {
                    "alert": f"{slo.alert}{rate.name}Burn",
                    "expr": expr,
                    "labels": {"severity": rate.severity},
                    "annotations": {
                        "summary": f"{on_host}{slo.what} slower than {slo.bound_seconds:g} s burn the error budget "
                        f"{rate.factor:g}x too fast",
                        "description": f"{on_host}over the last {rate.long} (and still over {rate.short}), "
                        f"{{{{ $value | humanizePercentage }}}} of {slo.what} of {{{{ $labels.model_name }}}} took "
                        f"longer than {slo.bound_seconds:g} s; the objective ({hardware}'s figure from the seeds) "
                        f"allows {budget:.0%}. At this rate the month's budget lasts "
                        f"{30 / rate.factor:.1f} days. Look at vllm:num_requests_waiting (a queue: one key's "
                        "flood, see make status) and long prompts in prefill.",
                    },
                }
            )
    return rules
