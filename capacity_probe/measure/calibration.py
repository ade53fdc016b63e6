"""Token calibration: how many tokens a chunk of unique text costs on this server's tokenizer."""

from __future__ import annotations

from typing import Any

from capacity_probe.client import ProbeError
from capacity_probe.measure.session import Session
from capacity_probe.prompts import TokenModel

CALIBRATION_CHUNKS = (7, 42)
"""Chunk counts of the two calibration prompts: 35 apart, whole cycles of the seven sentences."""


def measure(session: Session, out: dict[str, Any]) -> None:
    """Two unique prompts of different length: prompt tokens = base + per_chunk * chunks."""
    points = []
    for n in CALIBRATION_CHUNKS:
        reply = session.client.chat(
            session.text.prompt(n), max_tokens=16, deadline=session.deadline(4000, 16)
        )
        if not reply.ok or not reply.prompt_tokens:
            raise ProbeError(
                f"calibration request ({n} chunks) {reply.outcome} (HTTP {reply.status}): {reply.error}"
                " - the server must answer a short prompt with usage.prompt_tokens"
            )
        points.append((n, reply.prompt_tokens))
    session.tokens = TokenModel.fit(points)
    out.update(
        points=points, base_tokens=round(session.tokens.base, 1), tokens_per_chunk=session.tokens.per_chunk
    )
    session.progress(f"calibration: {session.tokens.per_chunk:.1f} tokens per unique chunk")
