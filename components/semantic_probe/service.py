"""The probe loop: the gate's steps (``components.gate.checks.check_steps``) on a schedule, with
Prometheus metrics. Plain Python, no Pulumi: it runs in the probe container.

The probe has several targets (issue 23): the whole path through the front (``host="front"``,
``path="front"``: what a client gets, whichever replica answers) and every replica directly
(``host=<its glm:target.hosts name>``, ``path="replica"``): the front's own replica on the private
network, the others through their guard: the steps with the stack's replica key, ``/metrics`` with
the guards' scrape key (:class:`ReplicaKeys`). Each target has a loop of its own. One run = readiness, arithmetic, tool_call, kv_pool, one request at a time, each bounded by the
request timeout. Runs start every ``interval_seconds`` (fixed rate; a run that overruns is followed
at once, never by a burst). Each step's metrics are published the moment it ends, so an alert does
not wait for the rest of the run.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from components.gate.checks import StepOutcome, check_steps
from components.semantic_probe import METRIC_PREFIX, PROBE_STEPS
from components.semantic_probe.saturation import SkipBudget, saturation
from components.semantic_probe.settings import REPLICA_PATH, ProbeSettings, ProbeTarget, ReplicaKeys

log = logging.getLogger("semantic-probe")


class ProbeMetrics:
    """The probe's Prometheus metrics, in a registry of their own (no process metrics); every
    series of a target carries its ``host`` and ``path``."""

    def __init__(self, settings: ProbeSettings) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry()
        self.progress = {}
        p, r = METRIC_PREFIX, self.registry
        where = ["host", "path"]
        self.success = Gauge(
            f"{p}_step_success",
            "1 when the step passed in its last run, else 0.",
            [*where, "step"],
            registry=r,
        )
        self.consecutive = Gauge(
            f"{p}_step_consecutive_failures",
            "Runs in a row in which the step failed (0 after a pass).",
            [*where, "step"],
            registry=r,
        )
        self.latency = Gauge(
            f"{p}_step_latency_seconds", "Duration of the step in its last run.", [*where, "step"], registry=r
        )
        self.step_runs = Counter(
            f"{p}_step_runs", "Step runs by result (ok, failed).", [*where, "step", "result"], registry=r
        )
        self.last_failure = Gauge(
            f"{p}_last_failure_step",
            "1 for the step of the most recent failure, 0 for the others.",
            [*where, "step"],
            registry=r,
        )
        self.last_failure_time = Gauge(
            f"{p}_last_failure_timestamp_seconds", "When a step last failed.", where, registry=r
        )
        self.last_success_time = Gauge(
            f"{p}_last_success_timestamp_seconds",
            "End of the last run in which every step passed.",
            where,
            registry=r,
        )
        self.last_run_time = Gauge(
            f"{p}_last_run_timestamp_seconds",
            "End of the last finished run (the probe's start before the first).",
            where,
            registry=r,
        )
        self.runs = Counter(
            f"{p}_runs",
            "Runs by result: ok, failed, or skipped (the replica was saturated: not asked).",
            [*where, "result"],
            registry=r,
        )
        self.ejected = Gauge(
            f"{p}_replica_ejected",
            "1 once the probe asked the front to take the replica out of rotation, 0 once it asked "
            "to re-admit it (the front applies neither to a replica a gate keeps out).",
            ["host"],
            registry=r,
        )
        Gauge(f"{p}_interval_seconds", "Configured seconds between runs.", registry=r).set(
            settings.interval_seconds
        )
        Gauge(f"{p}_failures_before_alert", "Configured K.", registry=r).set(settings.failures_before_alert)
        for target in settings.targets:
            at = (target.host, target.path)
            for step in PROBE_STEPS:
                self.consecutive.labels(*at, step).set(0)
                self.last_failure.labels(*at, step).set(0)
                for result in ("ok", "failed"):
                    self.step_runs.labels(*at, step, result)
            for result in ("ok", "failed", "skipped"):
                self.runs.labels(*at, result)
            self.last_run_time.labels(*at).set(time.time())
            if target.path == REPLICA_PATH:
                self.ejected.labels(target.host).set(0)

    def record(self, target: ProbeTarget, outcome: StepOutcome) -> None:
        at, step = (target.host, target.path), outcome.step
        self.latency.labels(*at, step).set(outcome.seconds)
        self.success.labels(*at, step).set(1 if outcome.ok else 0)
        self.step_runs.labels(*at, step, "ok" if outcome.ok else "failed").inc()
        if outcome.ok:
            self.consecutive.labels(*at, step).set(0)
            return
        self.consecutive.labels(*at, step).inc()
        for other in PROBE_STEPS:
            self.last_failure.labels(*at, other).set(1 if other == step else 0)
        self.last_failure_time.labels(*at).set(time.time())

    def finish_run(self, target: ProbeTarget, ok: bool) -> None:
        at, now = (target.host, target.path), time.time()
        self.last_run_time.labels(*at).set(now)
        self.runs.labels(*at, "ok" if ok else "failed").inc()
        if ok:
            self.last_success_time.labels(*at).set(now)

    progress: dict[tuple[str, str], float]
    """Each target's ``vllm:generation_tokens_total`` at its last saturation reading
    (:func:`saturation`; one loop per target writes its own entry)."""

    def skip(self, target: ProbeTarget) -> None:
        """A run not made: neither a pass nor a failure, and not a finished run (so a replica
        skipped for too long shows as unprobed)."""
        self.runs.labels(target.host, target.path, "skipped").inc()


def run_once(
    settings: ProbeSettings,
    api_key: str,
    metrics: ProbeMetrics,
    target: ProbeTarget | None = None,
    replica_keys: ReplicaKeys | None = None,
    may_skip: bool = True,
) -> list[StepOutcome]:
    """One run against ``target`` (default: the front path): every step, each recorded as it ends;
    failures logged with the gate's message. ``replica_keys``: for a guarded replica. Skipped (no
    outcome, counted as ``skipped``) while the target's vLLM is saturated (:func:`saturation`),
    unless ``may_skip`` is false (:class:`SkipBudget`): then asked all the same."""
    target = target or settings.targets[0]
    if (target.replica_key or target.scrape_key) and not replica_keys:
        raise ValueError(f"{target.path} {target.host!r} is guarded but the probe has no replica keys")
    key = replica_keys.inference if target.replica_key and replica_keys else api_key
    metrics_key = replica_keys.scrape if (target.replica_key or target.scrape_key) and replica_keys else None
    busy = saturation(settings, target, metrics_key, metrics.progress)
    if busy is not None and may_skip:
        metrics.skip(target)
        log.info(
            "%s %s run skipped: %s (the probe does not compete with users at peak)",
            target.path,
            target.host,
            busy,
        )
        return []
    if busy is not None:
        log.info("%s %s asked although %s (see SkipBudget)", target.path, target.host, busy)
    outcomes = list(
        check_steps(
            settings.gate_params(target),
            key,
            PROBE_STEPS,
            progress=lambda _line: None,
            metrics_key=metrics_key,
        )
    )
    failed = [o for o in outcomes if not o.ok]
    if failed and all(o.timed_out for o in failed):
        # Timed out in a queue: no evidence either way, as for a skip. Saturated before the run
        # (asked past the skip budget), or in a queue that filled during it.
        busy = busy or saturation(settings, target, metrics_key, metrics.progress)
        if busy is not None:
            metrics.skip(target)
            log.info(
                "%s %s run counted as skipped: %s timed out while %s", target.path, target.host,
                ", ".join(o.step for o in failed), busy,
            )  # fmt: skip
            return []
    for outcome in outcomes:
        metrics.record(target, outcome)
        if not outcome.ok:
            log.warning(
                json.dumps(
                    {
                        "host": target.host,
                        "path": target.path,
                        "step": outcome.step,
                        "seconds": outcome.seconds,
                        "failure": outcome.failure,
                    }
                )
            )
    ok = all(o.ok for o in outcomes)
    metrics.finish_run(target, ok)
    log.info(
        "%s %s run %s: %s",
        target.path,
        target.host,
        "ok" if ok else "FAILED",
        ", ".join(f"{o.step} {'ok' if o.ok else 'FAILED'} {o.seconds:.2f}s" for o in outcomes),
    )
    return outcomes


RunObserver = Callable[[ProbeTarget, list[StepOutcome]], None]
"""Told of every finished run (the ejection requests of ``rotation_requests.py``)."""


def run_forever(
    settings: ProbeSettings,
    api_key: str,
    metrics: ProbeMetrics,
    stop: threading.Event,
    clock: Callable[[], float] = time.monotonic,
    replica_keys: ReplicaKeys | None = None,
    observe: RunObserver | None = None,
) -> None:
    """Every target in a loop of its own, each at a fixed rate until ``stop`` is set (a late run
    starts at once, no catch-up burst): a slow replica does not delay the others' verdicts."""
    loops = [
        threading.Thread(
            target=_loop,
            args=(settings, api_key, metrics, stop, clock, target, replica_keys, observe),
            name=f"probe-{target.path}-{target.host}",
            daemon=True,
        )
        for target in settings.targets
    ]
    for loop in loops:
        loop.start()
    for loop in loops:
        loop.join()


def _loop(
    settings: ProbeSettings,
    api_key: str,
    metrics: ProbeMetrics,
    stop: threading.Event,
    clock: Callable[[], float],
    target: ProbeTarget,
    replica_keys: ReplicaKeys | None,
    observe: RunObserver | None,
) -> None:
    next_start = clock()
    budget = SkipBudget()
    while not stop.is_set():
        outcomes = run_once(settings, api_key, metrics, target, replica_keys, budget.may_skip())
        budget.ran(outcomes)
        if observe is not None and outcomes:  # a skipped run is no evidence either way
            try:
                observe(target, outcomes)
            except Exception:  # an observer's bug must not stop the probe
                log.exception("observing the %s run of %s failed", target.path, target.host)
        next_start += settings.interval_seconds
        now = clock()
        if next_start < now:
            next_start = now
        stop.wait(next_start - now)


def serve_metrics(metrics: ProbeMetrics, port: int) -> None:
    """``/metrics`` on every interface of the container (Prometheus scrapes it on the private network)."""
    from prometheus_client import start_http_server

    start_http_server(port, addr="0.0.0.0", registry=metrics.registry)
