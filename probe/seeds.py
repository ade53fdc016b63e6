"""The seed articles' measured figures per hardware profile, and measured/seed ratios.

Numbers from /work/shared/SPEC.md §2 (which cites the seeds). A ratio above 1 is better for a
"higher is better" figure (tok/s, tokens) and worse for a latency.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SeedFigure:
    key: str
    """Where the measured value lives in probe-result.json: ``<section>.<field>``."""
    label: str
    value: float
    unit: str
    higher_is_better: bool
    note: str = ""


SEEDS: dict[str, tuple[str, tuple[SeedFigure, ...]]] = {
    "a800": (
        "a800-sm80-production.txt (8×A800 80 GB, TP 8 + EP, MTP 5, GMU 0.95)",
        (
            SeedFigure("single_stream.decode_tok_s", "single-stream decode", 79.0, "tok/s", True),
            SeedFigure("kv_pool.tokens", "KV pool", 2_004_983, "tokens", True, "at GMU 0.95"),
        ),
    ),
    "ascend": (
        "ascend-910b3-six-rounds.txt (8×Ascend 910B3, round 6 final config)",
        (
            SeedFigure(
                "context.ceiling_tokens",
                "cold unique-text context passing",
                126_893,
                "tokens",
                True,
                "the article's largest cold pass (no cliff up to 131,072), not a ceiling",
            ),
            SeedFigure(
                "kv_pool.tokens",
                "KV pool",
                8_956,
                "tokens",
                True,
                "the article's figure is below its own 126,893-token pass, so its unit differs: indicative only",
            ),
            SeedFigure("over_limit.seconds", "over-limit 400", 0.8, "s", False),
            SeedFigure(
                "hol.small_seconds",
                "2-token request during a large prefill",
                1.59,
                "s",
                False,
                "during a 120K-token prefill",
            ),
            SeedFigure("single_stream.decode_tok_s", "single-stream decode", 20.9, "tok/s", True),
            SeedFigure(
                "spec_decode.acceptance",
                "MTP draft acceptance",
                0.122,
                "",
                True,
                "round 5 (234 of 1,911 drafts); the final config has MTP off",
            ),
        ),
    ),
    "rtx5090": (
        "rtx5090-nvfp4-nightly.txt (8×RTX 5090, NVFP4, fp8 KV, GMU 0.82)",
        (SeedFigure("kv_pool.tokens", "KV pool", 149_796, "tokens", True),),
    ),
}


def lookup(result: dict[str, Any], key: str) -> float | None:
    section, field = key.split(".", 1)
    value = (result.get(section) or {}).get(field)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def compare(profile: str | None, result: dict[str, Any]) -> dict[str, Any]:
    """measured/seed for every seed figure of ``profile`` that the probe measured."""
    if not profile:
        return {"profile": None, "reason": "no hardware profile (--profile, or glm:hardware of --stack)"}
    if profile not in SEEDS:
        return {"profile": profile, "reason": f"no seed figures for profile {profile!r}"}
    source, figures = SEEDS[profile]
    rows = []
    for fig in figures:
        measured = lookup(result, fig.key)
        rows.append(
            {
                "key": fig.key,
                "label": fig.label,
                "unit": fig.unit,
                "seed": fig.value,
                "measured": measured,
                "ratio": round(measured / fig.value, 3) if measured is not None else None,
                "higher_is_better": fig.higher_is_better,
                "note": fig.note,
            }
        )
    return {"profile": profile, "source": source, "figures": rows}
