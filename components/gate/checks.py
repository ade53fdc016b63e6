"""The gate's entry points, in plain Python (no Pulumi): does the model answer through the front door?

In order (SPEC §4): readiness (refused connections and 502/503/504 mean "still loading"),
``models``, ``arithmetic``, ``tool_call``, ``kv_pool``, ``front_auth`` and ``streaming``. Each step
fails on its own with a :class:`GateFailure` that says which step, what came back and what to look
at; a reply of the wrong shape is such a failure too, never a crash.

:func:`run_gate` is what the dynamic providers (``components/verification/smoke_gate.py``,
``components/docker/replica_gate.py``), the command line (``python -m components.gate``) and the tests
call; :func:`check_steps` is what the semantic probe runs. The seams: ``messages.py`` (what a
failure says), ``transport.py`` (the client and its bounds), ``run.py`` (one run's parameters and
results), ``readiness.py`` and ``steps.py`` (the steps, and their one table).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.gate.messages import NO_ANSWER, GateFailure, Progress, stderr_progress
from components.gate.run import GateRun, plain
from components.gate.settings import ALL_SMOKE_STEPS
from components.gate.steps import STEPS, note_vllm_version
from components.gate.transport import REQUEST_TIMEOUT_SECONDS, Overrun, within

__all__ = [
    "NO_ANSWER",
    "REQUEST_TIMEOUT_SECONDS",
    "GateFailure",
    "Overrun",
    "Progress",
    "StepOutcome",
    "check_steps",
    "plain",
    "run_gate",
    "stderr_progress",
    "within",
]


def run_gate(
    params: Mapping[str, Any],
    api_key: str,
    progress: Progress = stderr_progress,
    metrics_key: str | None = None,
) -> dict[str, Any]:
    """Run every configured step in order; return the results or raise :class:`GateFailure`.

    ``params`` are the resource inputs without the key: ``endpoint`` (front URL ending in ``/v1``),
    ``served_name``, ``max_model_len``, ``flags``, optional ``metrics_url`` and ``container_name``,
    optional ``look_at`` (the commands failures name: ``LookAt.params``; without it, Docker's for
    ``container_name``), and ``smoke`` (``SmokeConfig`` fields plus ``request_timeout_seconds``).
    Without ``served_name``/``max_model_len`` (the command line), the models step takes what is listed.
    """
    run = GateRun(params, api_key, progress, metrics_key)
    try:
        run.timed("readiness", STEPS["readiness"])
        for step in ALL_SMOKE_STEPS:
            if step not in run.steps:
                run.skipped[step] = "not in glm:smoke.steps"
                continue
            run.timed(step, STEPS[step])
        note_vllm_version(run)
    finally:
        run.transport.close()
    ran = [s for s in ALL_SMOKE_STEPS if s in run.latency_ms]
    pass_seconds = round(time.monotonic() - run.start, 3)
    progress(f"passed in {pass_seconds:g} s: {', '.join(['readiness', *ran])}")
    return {
        "served_name": run.served_name,
        "max_model_len": run.max_model_len,
        "kv_pool_tokens": None,
        **run.results,
        "latency_ms": dict(run.latency_ms),
        "steps_run": ran,
        "steps_skipped": dict(sorted(run.skipped.items())),
        "pass_seconds": pass_seconds,
    }


@dataclass(frozen=True)
class StepOutcome:
    """One step of :func:`check_steps`: passed or not, how long it took, and what failed."""

    step: str
    ok: bool
    seconds: float
    failure: str | None = None
    """The :class:`GateFailure` message when the step failed."""
    skipped: str | None = None
    """Why the step could not run here (e.g. kv_pool without metrics_url); ``ok`` is then True."""

    @property
    def timed_out(self) -> bool:
        """Failed only for want of an answer in time (no wrong answer, no error status)."""
        return not self.ok and NO_ANSWER in (self.failure or "")


def check_steps(
    params: Mapping[str, Any],
    api_key: str,
    steps: Sequence[str],
    progress: Progress = stderr_progress,
    metrics_key: str | None = None,
) -> Iterator[StepOutcome]:
    """The gate's steps one by one, each yielded as soon as it ends, a failure recorded instead of
    raised: what the semantic probe runs (``components/semantic_probe``). A wrong answer does not
    hide a broken tool call, and each step is bounded like the gate's (``request_timeout_seconds``;
    readiness by ``deadline_seconds``). ``params`` as for :func:`run_gate`; ``smoke.max_tokens``
    caps the chats. ``metrics_key``: sent to ``metrics_url`` (a replica's guard wants its key there).
    """
    run = GateRun(params, api_key, progress, metrics_key)
    try:
        for step in steps:
            started = time.monotonic()
            try:
                STEPS[step](run)
            except GateFailure as failure:
                yield StepOutcome(step, False, round(time.monotonic() - started, 3), failure.message)
                continue
            yield StepOutcome(step, True, round(time.monotonic() - started, 3), skipped=run.skipped.get(step))
    finally:
        run.transport.close()
