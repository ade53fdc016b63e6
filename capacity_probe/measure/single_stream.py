"""Single stream: decode speed and time to first token of one request at a time."""

from __future__ import annotations

import statistics
from typing import Any

from capacity_probe.client import ProbeError
from capacity_probe.measure.session import SHORT_CHUNKS, Session, rounded


def measure(session: Session, out: dict[str, Any]) -> None:
    """``single_runs`` requests of ``decode_tokens`` one after another; the medians of the good ones."""
    s = session.settings
    out.update(max_tokens=s.decode_tokens, runs=[])
    for i in range(s.single_runs):
        reply = session.client.chat(
            session.text.prompt(SHORT_CHUNKS),
            max_tokens=s.decode_tokens,
            deadline=session.deadline(200, s.decode_tokens),
        )
        run = {
            "outcome": reply.outcome,
            "seconds": rounded(reply.seconds),
            "ttft_s": rounded(reply.ttft),
            "completion_tokens": reply.tokens_out,
            "decode_tok_s": rounded(reply.decode_tok_s, 2),
            "error": reply.error or None,
        }
        out["runs"].append(run)
        session.progress(
            f"single stream {i + 1}/{s.single_runs}: {reply.outcome}, TTFT {run['ttft_s']} s, "
            f"{run['decode_tok_s']} tok/s"
        )
    good = [r for r in out["runs"] if r["outcome"] == "ok" and r["decode_tok_s"]]
    if not good:
        raise ProbeError(f"no single-stream request finished: {out['runs'][-1]['error']}")
    out["decode_tok_s"] = rounded(statistics.median(r["decode_tok_s"] for r in good), 2)
    out["ttft_s"] = rounded(statistics.median(r["ttft_s"] for r in good))
