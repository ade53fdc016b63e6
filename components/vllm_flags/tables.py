"""The real ``vllm serve`` parser's flags per vLLM version: ``<version>.json`` in this folder, made
by ``scripts/vllm_flags.py`` from the vLLM package on PyPI.

Which table: the version's own; for a build between two releases (the rtx5090 nightly
``0.28.1rc1.dev580+g385dce36b``) the union of the release before and the release after, so that a
flag added on the way is not refused; a flag in neither is refused. vllm-ascend runs vLLM's own
parser (the plugin adds a platform, not flags), so ascend's ``0.23.0`` is vLLM 0.23.0's table.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

FLAG_TABLES = Path(__file__).parent
"""Where the tables are, one ``<version>.json`` each (``scripts/vllm_flags.py`` writes them here)."""
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def _release(name: str) -> tuple[int, int, int] | None:
    m = _RELEASE.match(name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


@cache
def _load(stem: str) -> dict[str, Any]:
    flags: dict[str, Any] = json.loads((FLAG_TABLES / f"{stem}.json").read_text())["flags"]
    return flags


def flag_table(version: str) -> tuple[dict[str, Any], str] | None:
    """``(flags, what was used)`` for ``version``, or None when no table is near enough."""
    stems = sorted((p.stem for p in FLAG_TABLES.glob("*.json")), key=lambda s: _release(s) or (0, 0, 0))
    if version in stems:
        return _load(version), f"vLLM {version}'s parser"
    wanted = _release(version)
    if wanted is None:
        return None
    before = [s for s in stems if (_release(s) or (0, 0, 0)) <= wanted]
    after = [s for s in stems if (_release(s) or (0, 0, 0)) > wanted]
    # A pre-release or dev build of X.Y.Z (0.28.1rc1.dev580) sits between the last release before it
    # and the next one; with one side missing there is no safe table.
    if not before or not after:
        return None
    return {**_load(after[0]), **_load(before[-1])}, f"vLLM {before[-1]} and {after[0]} (between them)"
