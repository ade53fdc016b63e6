"""Context search: the largest prompt of unique text the server really answers, against max_model_len."""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from capacity_probe.client import Reply
from capacity_probe.measure.session import Session, rounded


def measure(session: Session, out: dict[str, Any]) -> None:
    """Coarse ascending steps of unique text up to max_model_len, then bisection at the cliff."""
    assert session.tokens is not None
    s = session.settings
    slack = math.ceil(session.tokens.per_chunk) + 2
    top = session.max_model_len - slack  # the largest prompt the server must take with max_tokens 1
    resolution = max(s.context_resolution or max(256, session.max_model_len // 64), 2 * slack)
    steps = sorted({round(top * i / s.context_steps) for i in range(1, s.context_steps + 1)})
    out.update(resolution_tokens=resolution, top_tokens=top, attempts=[])
    lo = max(t for _, t in session.result["calibration"]["points"])
    hi = None
    for size in steps:
        if (tokens := _attempt(session, size, out)) is None:
            hi = session.tokens.tokens_for(session.tokens.chunks_for(size))
            break
        lo = max(lo, tokens)
    while hi is not None and hi - lo > resolution and out.get("server_recovered", True):
        size = (lo + hi) // 2
        if (tokens := _attempt(session, size, out)) is None:
            new_hi = session.tokens.tokens_for(session.tokens.chunks_for(size))
            if new_hi >= hi:
                break  # a tokenizer off the calibration line: no smaller step is possible
            hi = new_hi
        elif tokens <= lo:
            break
        else:
            lo = tokens
    out["ceiling_tokens"] = lo
    out["cliff_tokens"] = hi
    out["bracket_tokens"] = None if hi is None else hi - lo
    out["no_cliff_up_to_max_model_len"] = hi is None
    if session.pool:
        out["ceiling_over_kv_pool"] = round(lo / session.pool, 3)
    if hi is None:
        session.progress(
            f"context: no cliff, {lo:,} tokens of unique text pass (max_model_len {session.max_model_len:,})"
        )
        return
    kinds = sorted({a["outcome"] for a in out["attempts"] if a["outcome"] != "ok"})
    session.progress(f"context: ceiling {lo:,} tokens, cliff at ≤ {hi:,} ({', '.join(kinds)})")
    session.findings.append(
        f"Context cliff: unique-text prompts pass up to {lo:,} tokens and fail ({', '.join(kinds)}) from "
        f"{hi:,}, below max_model_len {session.max_model_len:,}. Prompts in between are accepted and "
        "never answered; lower --max-model-len to the ceiling or grow the KV pool."
    )


def _attempt(session: Session, target: int, out: dict[str, Any]) -> int | None:
    """One unique prompt of about ``target`` tokens; its measured size if it passed, else None."""
    text, est = session.unique(target)
    deadline = session.deadline(est)
    reply, during = _watch(
        session, lambda: session.client.chat(text, max_tokens=1, deadline=deadline), deadline
    )
    tokens = reply.prompt_tokens or est
    attempt: dict[str, Any] = {
        "target_tokens": target,
        "tokens": tokens,
        "measured": reply.prompt_tokens is not None,
        "outcome": reply.outcome,
        "seconds": rounded(reply.seconds),
        "deadline_s": rounded(reply.deadline, 1),
        "http_status": reply.status,
    }
    if during:
        attempt["scheduler_during"] = during
    if not reply.ok:
        attempt["error"] = reply.error
    out["attempts"].append(attempt)
    session.progress(
        f"context {tokens:,} tokens: {reply.outcome} in {reply.seconds:.2f} s"
        + (f" (deadline {reply.deadline:.1f} s)" if not reply.ok else "")
    )
    if reply.ok:
        return tokens
    attempt.update(session.recovery(out))
    return None


def _watch(session: Session, send: Callable[[], Reply], deadline: float) -> tuple[Reply, dict | None]:
    """Send in a thread; if it is still out after a moment, record the scheduler (hang diagnosis)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(send)
        try:
            return future.result(timeout=min(1.0, deadline / 2)), None
        except TimeoutError:
            snap = session.snapshot()
            return future.result(), (snap.scheduler() if snap else None)
