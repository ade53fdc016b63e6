"""The probe's measured figures against the seed articles' (``components.profiles``): measured/seed.

The figures live with each hardware profile (``Profile.seed``); a ratio above 1 is better for a
"higher is better" figure (tok/s, tokens) and worse for a latency.
"""

from __future__ import annotations

from typing import Any

from components.profiles import PROFILES


def with_figures() -> list[str]:
    """The profiles the probe can compare with, in registry order."""
    return [name for name, profile in PROFILES.items() if profile.seed and profile.seed.figures]


def lookup(result: dict[str, Any], key: str) -> float | None:
    section, field = key.split(".", 1)
    value = (result.get(section) or {}).get(field)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def compare(profile: str | None, result: dict[str, Any]) -> dict[str, Any]:
    """measured/seed for every seed figure of ``profile`` that the probe measured."""
    if not profile:
        return {"profile": None, "reason": "no hardware profile (--profile, or glm:hardware of --stack)"}
    seed = PROFILES[profile].seed if profile in PROFILES else None
    if seed is None:
        return {"profile": profile, "reason": f"no seed figures for profile {profile!r}"}
    rows = []
    for fig in seed.figures:
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
    return {"profile": profile, "source": seed.source, "figures": rows}
