"""Concurrency sweep: aggregate throughput and latency at 1, 2, 4 ... up to max_num_seqs streams."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from capacity_probe.client import BudgetExhausted, Reply
from capacity_probe.measure.session import SHORT_CHUNKS, Session, percentile, rounded


def measure(session: Session, out: dict[str, Any]) -> None:
    """Powers of two up to max_num_seqs (at most ``max_concurrency``); stops at the first level with failures."""
    s = session.settings
    cap = s.max_num_seqs
    out["max_num_seqs"], out["max_num_seqs_source"] = cap, s.max_num_seqs_source or None
    if cap is None:
        cap = 8
        out["max_num_seqs_source"] = "nowhere (no --max-num-seqs, stack command line or metric): swept to 8"
    cap = max(1, min(cap, s.max_concurrency))
    levels = sorted({2**i for i in range(cap.bit_length()) if 2**i <= cap} | {cap})
    out.update(levels_planned=levels, max_tokens=s.sweep_tokens, rounds=s.sweep_rounds, levels=[])
    for c in levels:
        level, stopped = _sweep_level(session, c)
        out["levels"].append(level)
        session.progress(
            f"concurrency {c}: {level['aggregate_tok_s']} tok/s, latency p50 {level['latency_p50_s']} s "
            f"p99 {level['latency_p99_s']} s, {level['failed']} failed"
        )
        if stopped:
            raise BudgetExhausted(stopped)
        if level["failed"]:
            session.findings.append(
                f"{level['failed']} of {level['requests']} requests failed at concurrency {c} "
                f"(first: {level['first_error']}); the sweep stopped there."
            )
            out["stopped_at"] = c
            break


def _sweep_level(session: Session, c: int) -> tuple[dict[str, Any], str | None]:
    """``c`` streams, each sending ``sweep_rounds`` requests back to back; the level's figures, and
    why the budget stopped it (None: it did not)."""
    s = session.settings
    stopped: list[str] = []

    def stream() -> list[Reply]:
        replies = []
        for _ in range(s.sweep_rounds):
            try:
                replies.append(
                    session.client.chat(
                        session.text.prompt(SHORT_CHUNKS),
                        max_tokens=s.sweep_tokens,
                        deadline=session.deadline(200, s.sweep_tokens),
                    )
                )
            except BudgetExhausted as exc:
                stopped.append(str(exc))
                break
        return replies

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=c) as pool:
        replies = [r for f in [pool.submit(stream) for _ in range(c)] for r in f.result()]
    wall = time.monotonic() - start
    ok = [r for r in replies if r.ok]
    failed = [r for r in replies if not r.ok]
    lat = [r.seconds for r in ok]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    per_stream = [t for r in ok if (t := r.decode_tok_s)]
    level = {
        "concurrency": c,
        "requests": len(replies),
        "failed": len(failed),
        "first_error": failed[0].error if failed else None,
        "wall_s": rounded(wall),
        "aggregate_tok_s": rounded(sum(r.tokens_out for r in ok) / wall if wall > 0 else None, 1),
        "latency_p50_s": rounded(percentile(lat, 50)),
        "latency_p99_s": rounded(percentile(lat, 99)),
        "ttft_p50_s": rounded(percentile(ttft, 50)),
        "ttft_p99_s": rounded(percentile(ttft, 99)),
        "per_stream_tok_s_p50": rounded(percentile(per_stream, 50), 2),
    }
    return level, (stopped[0] if stopped else None)
