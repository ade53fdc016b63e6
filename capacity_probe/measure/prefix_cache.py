"""Prefix cache: cold against warm time to first token of one long shared prefix, and the hit rate."""

from __future__ import annotations

import statistics
from typing import Any

from capacity_probe import vllm_metrics
from capacity_probe.client import ProbeError
from capacity_probe.measure.session import Session, rounded


def measure(session: Session, out: dict[str, Any]) -> None:
    """Cold vs warm TTFT of one long unique prefix sent three times with different questions."""
    base = min(x for x in (session.ceiling(), session.pool, session.max_model_len) if x)
    size = session.settings.prefix_tokens or min(8192, base // 2)
    prefix, est = session.unique(size)
    before = session.snapshot()
    ttfts = []
    for i, label in enumerate(("cold", "warm", "warm")):
        reply = session.client.chat(
            f"{prefix}\n{session.text.prompt(0)}", max_tokens=2, deadline=session.deadline(est, 2)
        )
        if not reply.ok or reply.ttft is None:
            raise ProbeError(f"prefix-cache request {i + 1} ({label}) {reply.outcome}: {reply.error}")
        ttfts.append(reply.ttft)
        session.progress(f"prefix cache: {label} TTFT {reply.ttft:.3f} s ({est:,}-token prefix)")
    cold, warm = ttfts[0], statistics.median(ttfts[1:])
    out.update(
        prefix_tokens=est,
        cold_ttft_s=rounded(cold),
        warm_ttft_s=rounded(warm),
        speedup=rounded(cold / warm if warm > 0 else None, 2),
        effective=bool(warm > 0 and cold / warm >= 1.5),
    )
    after = session.settled_snapshot()
    if before is None or after is None:
        out["metrics"] = {"skipped": session.metrics_reason()}
        return
    hits = vllm_metrics.delta(before, after, vllm_metrics.PREFIX_HITS)
    queries = vllm_metrics.delta(before, after, vllm_metrics.PREFIX_QUERIES)
    out["metrics"] = {
        "hit_tokens": hits,
        "query_tokens": queries,
        "hit_rate": rounded(hits / queries if hits is not None and queries else None),
    }
