"""What `make up` says about the smoke gate when it ends: true to what this update ran.

A `pulumi up` that changed nothing the gate checks does not re-run it; saying "the smoke gate
passed" after it would claim a check that did not happen. The gate's resource in the state is
modified only by an update whose gate passed (a failed gate keeps the old state), so its
``modified`` time against the update's start says whether this update ran it, and when it last
passed.

    python3 scripts/gate_note.py HISTORY.json STATE.json   # pulumi stack history/export --json
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

GATE_TYPE = "glm:smoke:SmokeTest$pulumi-python:dynamic:Resource"


def gate_note(history: list[dict[str, Any]], state: dict[str, Any]) -> str:
    """
    >>> state = {"deployment": {"resources": [{"urn": f"urn:pulumi:local::glm::{GATE_TYPE}::local-smoke-gate",
    ...     "modified": "2026-12-03T07:11:54.723454445Z"}]}}
    >>> gate_note([{"startTime": "2026-12-03T07:11:29.000Z", "resourceChanges": {"create": 28}}], state)
    'the smoke gate passed'
    >>> gate_note([{"startTime": "2026-12-03T08:02:10.000Z", "resourceChanges": {"same": 28}}], state)
    'nothing changed, so no gate ran: the smoke gate last passed at 2026-12-03 07:11:54 UTC'
    >>> gate_note([{"startTime": "2026-12-03T08:02:10.000Z", "resourceChanges": {"same": 27, "update": 1}}], state)
    'nothing the gate checks changed, so it did not run: it last passed at 2026-12-03 07:11:54 UTC'
    """
    resources = (state.get("deployment") or {}).get("resources") or []
    gate = next((r for r in resources if f"::{GATE_TYPE}::" in r.get("urn", "")), None)
    started = _time(history[0]["startTime"]) if history else None
    passed = _time(gate["modified"]) if gate and gate.get("modified") else None
    if passed is None or started is None or passed >= started:
        return "the smoke gate passed"
    when = passed.strftime("%Y-%m-%d %H:%M:%S UTC")
    if set(history[0].get("resourceChanges") or {}) <= {"same"}:
        return f"nothing changed, so no gate ran: the smoke gate last passed at {when}"
    return f"nothing the gate checks changed, so it did not run: it last passed at {when}"


def _time(text: str) -> datetime:
    """RFC 3339 with up to nanoseconds (the state's) or milliseconds (the history's)."""
    head, _, fraction = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(fraction + '000000')[:6]}+00:00")


if __name__ == "__main__":
    with open(sys.argv[1]) as history, open(sys.argv[2]) as state:
        print(gate_note(json.load(history), json.load(state)))
