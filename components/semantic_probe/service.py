"""The probe loop: the gate's steps (``components.gate.checks.check_steps``) on a schedule, with
Prometheus metrics. Plain Python, no Pulumi: it runs in the probe container.

One run = readiness, arithmetic, tool_call, kv_pool, one request at a time, each bounded by the
request timeout. Runs start every ``interval_seconds`` (fixed rate; a run that overruns is followed
at once, never by a burst). Each step's metrics are published the moment it ends, so an alert does
not wait for the rest of the run.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from components.gate.checks import StepOutcome, check_steps
from components.semantic_probe import METRIC_PREFIX, PROBE_STEPS

log = logging.getLogger("semantic-probe")


@dataclass(frozen=True)
class ProbeSettings:
    """What the probe container is told (``params.json``, rendered by the program)."""

    endpoint: str
    """The front's OpenAI base URL as the probe reaches it on the private network (``…/v1``)."""
    metrics_url: str
    """vLLM's own ``/metrics`` on the private network (the kv_pool step)."""
    served_name: str
    max_model_len: int
    smoke: Mapping[str, Any]
    """The gate's ``smoke`` parameters: prompts, expected answer, chat_template_kwargs, and the
    probe's ``max_tokens``, ``request_timeout_seconds`` and ``deadline_seconds``."""
    interval_seconds: float
    failures_before_alert: int
    port: int = 9101

    @classmethod
    def from_json(cls, text: str) -> ProbeSettings:
        data = json.loads(text)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    @property
    def gate_params(self) -> dict[str, Any]:
        """The inputs of the gate's checks (``run_gate``'s ``params``)."""
        return {
            "endpoint": self.endpoint,
            "metrics_url": self.metrics_url,
            "served_name": self.served_name,
            "max_model_len": self.max_model_len,
            "container_name": "the serving container",
            "smoke": dict(self.smoke),
        }


class ProbeMetrics:
    """The probe's Prometheus metrics, in a registry of their own (no process metrics)."""

    def __init__(self, settings: ProbeSettings) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry()
        p, r = METRIC_PREFIX, self.registry
        self.success = Gauge(
            f"{p}_step_success", "1 when the step passed in its last run, else 0.", ["step"], registry=r
        )
        self.consecutive = Gauge(
            f"{p}_step_consecutive_failures",
            "Runs in a row in which the step failed (0 after a pass).",
            ["step"],
            registry=r,
        )
        self.latency = Gauge(
            f"{p}_step_latency_seconds", "Duration of the step in its last run.", ["step"], registry=r
        )
        self.step_runs = Counter(
            f"{p}_step_runs", "Step runs by result (ok, failed).", ["step", "result"], registry=r
        )
        self.last_failure = Gauge(
            f"{p}_last_failure_step",
            "1 for the step of the most recent failure, 0 for the others.",
            ["step"],
            registry=r,
        )
        self.last_failure_time = Gauge(
            f"{p}_last_failure_timestamp_seconds", "When a step last failed.", registry=r
        )
        self.last_success_time = Gauge(
            f"{p}_last_success_timestamp_seconds",
            "End of the last run in which every step passed.",
            registry=r,
        )
        self.last_run_time = Gauge(
            f"{p}_last_run_timestamp_seconds",
            "End of the last finished run (the probe's start before the first).",
            registry=r,
        )
        self.runs = Counter(f"{p}_runs", "Finished runs by result (ok, failed).", ["result"], registry=r)
        Gauge(f"{p}_interval_seconds", "Configured seconds between runs.", registry=r).set(
            settings.interval_seconds
        )
        Gauge(f"{p}_failures_before_alert", "Configured K.", registry=r).set(settings.failures_before_alert)
        for step in PROBE_STEPS:
            self.consecutive.labels(step).set(0)
            self.last_failure.labels(step).set(0)
            for result in ("ok", "failed"):
                self.step_runs.labels(step, result)
        for result in ("ok", "failed"):
            self.runs.labels(result)
        self.last_run_time.set(time.time())

    def record(self, outcome: StepOutcome) -> None:
        step = outcome.step
        self.latency.labels(step).set(outcome.seconds)
        self.success.labels(step).set(1 if outcome.ok else 0)
        self.step_runs.labels(step, "ok" if outcome.ok else "failed").inc()
        if outcome.ok:
            self.consecutive.labels(step).set(0)
            return
        self.consecutive.labels(step).inc()
        for other in PROBE_STEPS:
            self.last_failure.labels(other).set(1 if other == step else 0)
        self.last_failure_time.set(time.time())

    def finish_run(self, ok: bool) -> None:
        now = time.time()
        self.last_run_time.set(now)
        self.runs.labels("ok" if ok else "failed").inc()
        if ok:
            self.last_success_time.set(now)


def run_once(settings: ProbeSettings, api_key: str, metrics: ProbeMetrics) -> list[StepOutcome]:
    """One run: every step, each recorded as it ends; failures logged with the gate's message."""
    outcomes = []
    for outcome in check_steps(settings.gate_params, api_key, PROBE_STEPS, progress=lambda _line: None):
        metrics.record(outcome)
        outcomes.append(outcome)
        if not outcome.ok:
            log.warning(
                json.dumps({"step": outcome.step, "seconds": outcome.seconds, "failure": outcome.failure})
            )
    ok = all(o.ok for o in outcomes)
    metrics.finish_run(ok)
    log.info(
        "run %s: %s",
        "ok" if ok else "FAILED",
        ", ".join(f"{o.step} {'ok' if o.ok else 'FAILED'} {o.seconds:.2f}s" for o in outcomes),
    )
    return outcomes


def run_forever(
    settings: ProbeSettings,
    api_key: str,
    metrics: ProbeMetrics,
    stop: threading.Event,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Runs at a fixed rate until ``stop`` is set; a late run starts at once (no catch-up burst)."""
    next_start = clock()
    while not stop.is_set():
        run_once(settings, api_key, metrics)
        next_start += settings.interval_seconds
        now = clock()
        if next_start < now:
            next_start = now
        stop.wait(next_start - now)


def serve_metrics(metrics: ProbeMetrics, port: int) -> None:
    """``/metrics`` on every interface of the container (Prometheus scrapes it on the private network)."""
    from prometheus_client import start_http_server

    start_http_server(port, addr="0.0.0.0", registry=metrics.registry)
