"""Head-of-line blocking: a 2-token request's latency while a large prefill runs, against idle."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from capacity_probe import vllm_metrics
from capacity_probe.client import ProbeError, Reply
from capacity_probe.measure.session import TINY_PROMPT, Session, rounded

HOL_DEFAULT_MAX_TOKENS = 120_000
MIN_PREFILL_LEFT_S = 0.25
"""Below this much prefill left at the small request's send, the verdict is noise: inconclusive."""
"""The Ascend seed timed its 2-token request during a 120K-token prefill."""


def measure(session: Session, out: dict[str, Any]) -> None:
    """Latency of a 2-token request sent while a large prefill runs, against the idle latency."""
    s = session.settings
    base = session.ceiling() or min(x for x in (session.pool, session.max_model_len) if x)
    size = s.hol_prompt_tokens or min(int(0.9 * base), HOL_DEFAULT_MAX_TOKENS)
    idle = [session.tiny() for _ in range(2)]
    if not all(r.ok for r in idle):
        raise ProbeError(f"a 2-token request failed while idle: {idle[-1].error}")
    baseline = statistics.median(r.seconds for r in idle)
    text, est = session.unique(size)
    big_deadline = session.deadline(est)
    running = _running(session)
    with ThreadPoolExecutor(max_workers=1) as pool:
        big_future = pool.submit(session.client.chat, text, max_tokens=1, deadline=big_deadline)
        out["start_detected_by"] = _await_prefill(session, running, big_future)
        small = session.client.chat(TINY_PROMPT, max_tokens=2, deadline=big_deadline)
        big = big_future.result()
    out.update(
        large_prompt_tokens=big.prompt_tokens or est,
        large_outcome=big.outcome,
        large_ttft_s=rounded(big.ttft),
        idle_small_seconds=rounded(baseline),
        small_outcome=small.outcome,
        small_seconds=rounded(small.seconds),
    )
    session.progress(
        f"head-of-line: 2-token request {small.outcome} in {small.seconds:.2f} s during a "
        f"{out['large_prompt_tokens']:,}-token prefill (idle {baseline:.2f} s)"
    )
    _judge(session, out, small, big, baseline)


def _judge(session: Session, out: dict[str, Any], small: Reply, big: Reply, baseline: float) -> None:
    """Blocked, not blocked, or inconclusive (None, with the reason); a finding when blocked."""
    if not small.ok:
        out["blocked"] = True
    elif not big.ok or big.ttft is None:
        out["blocked"] = None
        out["reason"] = f"inconclusive: the large request {big.outcome} ({big.error})"
        return
    else:
        remaining = big.started + big.ttft - small.started
        out["prefill_remaining_at_send_s"] = rounded(remaining)
        if remaining < MIN_PREFILL_LEFT_S:
            # Shorter than the scheduling noise of a busy client: a 10 ms wait would read as blocking.
            out["blocked"] = None
            out["reason"] = (
                f"inconclusive: {max(remaining, 0.0):.3f} s of the prefill was left when the 2-token request "
                f"went out (under {MIN_PREFILL_LEFT_S} s); raise --hol-prompt-tokens"
            )
            return
        out["blocked_fraction"] = rounded(small.seconds / remaining)
        # Blocked: the small request waited out most of the prefill instead of slipping in between chunks.
        out["blocked"] = small.seconds >= 0.5 * remaining and small.seconds > 2 * baseline
    if out["blocked"]:
        session.findings.append(
            f"Head-of-line blocking: a 2-token request took {small.seconds:.2f} s ({small.outcome}) while a "
            f"{out['large_prompt_tokens']:,}-token prefill ran (idle: {baseline:.2f} s). Enable chunked "
            "prefill / lower --max-num-batched-tokens (the Ascend seed went from 90 s to 1.59 s)."
        )


def _running(session: Session) -> float | None:
    """Requests running now, from a live scrape (None: no metrics, or they lag)."""
    snap = session.snapshot() if session.settings.metrics_lag == 0 else None
    return snap.total(vllm_metrics.RUNNING) if snap else None


def _await_prefill(session: Session, running_before: float | None, big_future: Any) -> str:
    """Wait until the large request is in the engine: a metric when live, else a fixed delay."""
    if running_before is not None:
        end = time.monotonic() + min(10.0, session.settings.request_timeout)
        while time.monotonic() < end and not big_future.done():
            snap = session.snapshot()
            if snap and (snap.total(vllm_metrics.RUNNING) or 0) > running_before:
                return "vllm:num_requests_running"
            time.sleep(0.02)
    time.sleep(session.settings.hol_delay)
    return f"a fixed {session.settings.hol_delay:g} s delay"
