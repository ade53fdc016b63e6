"""Speculative decoding: the share of MTP's draft tokens accepted over the whole run."""

from __future__ import annotations

from typing import Any

from capacity_probe import vllm_metrics
from capacity_probe.measure.session import Session, rounded


def measure(session: Session, out: dict[str, Any], before: vllm_metrics.Snapshot | None) -> None:
    """Draft acceptance over the whole run, from the spec-decode counters (MTP on)."""
    if before is None:
        out.update(status="skipped", reason=session.metrics_reason())
        return
    if not before.has(vllm_metrics.SPEC_DRAFT_TOKENS):
        out.update(
            status="skipped", reason="no vllm:spec_decode_* metrics: speculative decoding (MTP) is off"
        )
        return
    after = session.settled_snapshot()
    if after is None:
        out.update(status="skipped", reason=session.metrics_reason())
        return
    drafts = vllm_metrics.delta(before, after, vllm_metrics.SPEC_DRAFTS)
    draft_tokens = vllm_metrics.delta(before, after, vllm_metrics.SPEC_DRAFT_TOKENS)
    accepted = vllm_metrics.delta(before, after, vllm_metrics.SPEC_ACCEPTED)
    out.update(drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted)
    if not draft_tokens:
        out.update(status="incomplete", reason="no drafts during the run (metrics lag? --metrics-lag)")
        return
    out["acceptance"] = rounded((accepted or 0) / draft_tokens)
    if drafts:
        out["mean_acceptance_length"] = rounded(1 + (accepted or 0) / drafts, 2)
    session.progress(f"MTP: {out['acceptance']:.1%} of draft tokens accepted")
