"""Over-limit request: a prompt above max_model_len must come back as a fast 400, not hang."""

from __future__ import annotations

import math
from typing import Any

from capacity_probe.measure.session import Session, rounded

FAST_400_SECONDS = 5.0
"""An over-limit request must be refused within this (the Ascend seed saw 0.8 s)."""


def measure(session: Session, out: dict[str, Any]) -> None:
    """A prompt above max_model_len must come back as a fast 400, not hang."""
    assert session.tokens is not None
    text, est = session.unique(session.max_model_len + max(64, math.ceil(3 * session.tokens.per_chunk)))
    reply = session.client.chat(text, max_tokens=1, deadline=session.deadline(est))
    mentions = any(m in reply.error.lower() for m in ("maximum context length", "maximum model length"))
    fast = reply.status == 400 and reply.seconds <= FAST_400_SECONDS
    out.update(
        prompt_tokens_estimated=est,
        outcome=reply.outcome,
        http_status=reply.status,
        seconds=rounded(reply.seconds),
        message=reply.error or None,
        mentions_max_context=mentions,
        fast_400=fast,
    )
    session.progress(
        f"over-limit ({est:,} tokens): {reply.outcome} HTTP {reply.status} in {reply.seconds:.2f} s"
    )
    if not fast:
        session.findings.append(
            f"A {est:,}-token prompt (over max_model_len {session.max_model_len:,}) got {reply.outcome} "
            f"(HTTP {reply.status}) after {reply.seconds:.1f} s instead of a 400 within "
            f"{FAST_400_SECONDS:g} s. A 413 means the front's body limit (glm:front.maxBodySize)."
        )
    if reply.status != 400:
        session.recovery(out)
