"""What `make up` says when it ends: true to what this run saw.

"Answers" only after asking: one chat through the front, the gate's own question (13x17), in this
same run. A stack whose container stopped after the update would otherwise be reported answering
while every request gets a 503.

A `pulumi up` that changed nothing the gate checks does not re-run it; saying "the smoke gate
passed" after it would claim a check that did not happen. The gate's resource in the state is
modified only by an update whose gate passed (a failed gate keeps the old state), so its
``modified`` time against the update's start says whether this update ran it, and when it last
passed.

    python3 scripts/gate_note.py HISTORY.json STATE.json   # pulumi stack history/export --json
    GLM_API_KEY=… python3 scripts/gate_note.py HISTORY.json STATE.json OUTPUTS.json STACK
        # pulumi stack output --json too: asks the endpoint, prints make up's last lines; exit 1
        # (saying what came back, and what to run) when it does not answer
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from components.gate.settings import SmokeConfig  # the gate's question and answer

ASK_SECONDS = 30

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


def ask(endpoint: str, model: str, api_key: str, timeout: float = ASK_SECONDS) -> tuple[bool, str]:
    """One chat through the front with the gate's question: (answered right, what came back).

    >>> ask("http://127.0.0.1:9/v1", "m", "sk-x")
    (False, 'no answer (URLError: [Errno 111] Connection refused)')
    """
    smoke = SmokeConfig()
    body = {"model": model, "messages": [{"role": "user", "content": smoke.prompt}], "max_tokens": 64}
    request = urllib.request.Request(
        f"{endpoint}/chat/completions",
        json.dumps(body).encode(),
        {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as got:
            reply = json.loads(got.read())
    except urllib.error.HTTPError as err:
        error = (json.loads(err.read() or b"{}") if _is_json(err) else {}).get("error") or {}
        why = ": ".join(str(e) for e in (error.get("code"), error.get("message")) if e)
        return False, f"HTTP {err.code}" + (f" ({why})" if why else "")
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return False, f"no answer ({type(err).__name__}: {reason})"
    took = time.monotonic() - started
    content = str(((reply.get("choices") or [{}])[0].get("message") or {}).get("content") or "").strip()
    if content != smoke.expected_answer:
        return (
            False,
            f"HTTP 200, but {smoke.prompt!r} came back {content[:80]!r}, not {smoke.expected_answer!r}",
        )
    return True, f"asked just now: 13×17 came back {content} in {took:.1f} s"


def _is_json(err: urllib.error.HTTPError) -> bool:
    return "json" in (err.headers.get("Content-Type") or "")


def ending(stack: str, outputs: dict[str, Any], note: str, asked: tuple[bool, str]) -> tuple[int, str]:
    """``make up``'s last lines and exit status: the endpoint answers (asked just now), or it does not,
    what came back and the commands that look and bring it back.

    >>> print(ending("local", {"endpoint": "http://h/v1"}, "the smoke gate passed", (False, "HTTP 503"))[1])
    The local stack does not answer at http://h/v1: asked just now, it got HTTP 503; the smoke gate passed.
      Look:        make status   (the containers, the last gate)   make logs   (the serving log)
      Bring back:  make up       (re-creates what is not serving, through its gate)
    """
    endpoint = outputs.get("endpoint", "?")
    if not asked[0]:
        return 1, (
            f"The {stack} stack does not answer at {endpoint}: asked just now, it got {asked[1]}; {note}.\n"
            "  Look:        make status   (the containers, the last gate)   make logs   (the serving log)\n"
            "  Bring back:  make up       (re-creates what is not serving, through its gate)"
        )
    root = Path(__file__).resolve().parent.parent
    return 0, (
        f"The {stack} stack answers at {endpoint} ({asked[1]}; {note}).\n"
        f'  export GLM_API_KEY="$({root}/scripts/pulumi.sh config get --path glm:apiKeys.local -s {stack})"\n'
        f"  {outputs.get('curl', '')}"
    )


if __name__ == "__main__":
    with open(sys.argv[1]) as history, open(sys.argv[2]) as state:
        note = gate_note(json.load(history), json.load(state))
    if len(sys.argv) < 4:
        print(note)
        sys.exit(0)
    with open(sys.argv[3]) as f:
        outputs = json.load(f)
    asked = ask(
        outputs.get("endpoint", ""), outputs.get("servedModelName", ""), os.environ.get("GLM_API_KEY", "")
    )
    status, text = ending(sys.argv[4], outputs, note, asked)
    print(f"\n{text}")
    sys.exit(status)
