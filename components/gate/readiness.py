"""The gate's first step: wait until ``/models`` answers 200 through the front, following the
serving container's log meanwhile and failing as soon as it stops."""

from __future__ import annotations

import time
from functools import partial

from components.gate.container import ContainerWatch, start_watch
from components.gate.messages import GateFailure, describe, excerpt
from components.gate.run import GateRun
from components.gate.transport import Overrun, within

PROGRESS_EVERY_SECONDS = 10.0
PROBE_READ_TIMEOUT_SECONDS = 10.0
"""Upper bound of one readiness request, body included (and never past the gate's deadline)."""
FIRST_POLL_SECONDS = 0.05
POLL_BACKOFF = 1.5
RETRY_STATUSES = frozenset({429, 502, 503, 504})
"""Readiness keeps polling on these: 502/503/504 while vLLM loads, 429 if the front rate-limits the poll."""


def wait_ready(run: GateRun) -> None:
    """Poll ``/models`` through the front until it answers 200; loading signals keep waiting.

    Every poll, body included, ends by the gate's deadline (:func:`within`): a front that
    trickles bytes cannot hold the gate past ``deadlineSeconds``.
    """
    url = f"{run.endpoint}/models"
    deadline = run.start + run.deadline
    run.progress(f"readiness: waiting up to {run.deadline:g} s for {url} (polling every {run.poll:g} s)")
    watch = start_watch(run.watch_spec, run.progress, set(run.flags))
    try:
        _poll_ready(run, url, deadline, watch)
    finally:
        if watch is not None:
            watch.close()
    run.results["ready_seconds"] = round(time.monotonic() - run.start, 3)


def _poll_ready(run: GateRun, url: str, deadline: float, watch: ContainerWatch | None) -> None:
    import httpx

    last_report = run.start
    last = "no answer yet"
    # The last HTTP answer, kept apart: a final poll cut short by the deadline must not hide it.
    answered: str | None = None
    interval = min(FIRST_POLL_SECONDS, run.poll)
    while True:
        if watch is not None and watch.stopped is not None:
            raise GateFailure("readiness", watch.stopped.message(watch.name))
        limit = max(0.01, min(PROBE_READ_TIMEOUT_SECONDS, deadline - time.monotonic()))
        try:
            stopped = None if watch is None else (lambda: watch.stopped is not None)
            status, raw = within(
                limit, partial(run.transport.exchange, "GET", url, run.api_key, None, limit), until=stopped
            )
            if status == 200:
                break
            last = answered = f"HTTP {status}: {excerpt(raw.decode(errors='replace'), 120)}"
            _refuse_unexpected(url, status, last)
        except (Overrun, httpx.TimeoutException) as err:
            last = f"no complete answer within {limit:.3g} s ({type(err).__name__})"
        except httpx.HTTPError as err:
            if (tls_failure := run.transport.tls_failure("readiness", url, err)) is not None:
                raise tls_failure from None
            last = describe(err)
        now = time.monotonic()
        if now >= deadline:
            raise GateFailure(
                "readiness",
                f"not ready after {now - run.start:.0f} s (glm:smoke.deadlineSeconds="
                f"{run.deadline:g}); last answer from {url}: "
                + (f"{answered} (the last poll: {last})" if answered and answered != last else last)
                + ". vLLM refuses connections "
                "while the weights load and the engine starts (normal: 632 s load on rtx5090, "
                f"5.5 min init on a800). Look at: {run.look_at.logs} (still loading, or "
                "crashed?), VLLM_ENGINE_READY_TIMEOUT_S, and raise glm:smoke.deadlineSeconds if "
                "the load is simply slow."
                + (f" The container's log was at: {watch.status()}." if watch and watch.status() else ""),
            )
        if now - last_report >= PROGRESS_EVERY_SECONDS:
            last_report = now
            startup = watch.status() if watch is not None else None
            run.progress(
                f"readiness: {now - run.start:.0f} s elapsed of {run.deadline:g} s"
                + (f"; {startup}" if startup else f", waiting for {url} to answer 200; last: {last}")
            )
        time.sleep(max(0.0, min(interval, deadline - now)))
        interval = min(run.poll, interval * POLL_BACKOFF)


def _refuse_unexpected(url: str, status: int, last: str) -> None:
    """A refused key or an answer that no loading vLLM gives fails at once: waiting would not help."""
    if status in (401, 403):
        raise GateFailure(
            "readiness",
            f"the front refused the gate's API key ({last}). Look at: glm:apiKeys (the gate "
            "uses the first key by name) and the key map rendered into the front's nginx.conf.",
        )
    if status not in RETRY_STATUSES:
        raise GateFailure(
            "readiness",
            f"{url} answered {last}; only 200, or 502/503/504 while loading (429 when rate-limited), are expected. "
            "Look at: the endpoint (front URL) and the front's log.",
        )
