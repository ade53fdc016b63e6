"""What an update ends with: the outputs a user acts on, or why it failed and what to run next.

``pulumi up`` ends with every stack output (argv, flags, drain settings, gate figures: 130-207
lines), and a failed update with every output again as ``-``, under "1 errored". The project's
``up`` (``scripts/pulumi.sh up``, ``make up``, ``make restart``, ``make rollback``) runs the engine
with ``--suppress-outputs --event-log FILE`` and ends with this instead, read from that event log:

- passed: the endpoint, the served model, the status page and the command that shows the status;
  the rest stays one ``scripts/pulumi.sh stack output -s STACK`` away;
- failed: the failure's cause (the first error the program or a resource reported, not the
  engine's "update failed") and the next command: the error's own fix where it names one, else
  ``make status`` and ``make logs``.

    python -m ops.ending STACK EXIT_STATUS EVENTS.jsonl
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

STACK_TYPE = "pulumi:pulumi:Stack"
ENGINE_NOISE = (
    "update failed",
    "preview failed",
    "Resource monitor has terminated",
    "an unhandled error occurred",
)
"""Errors the engine adds after the one that says why: never the cause."""
CAUSE_CHARS = 400


def events(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The engine's events, one JSON object a line; a line cut short (the engine killed) is skipped."""
    found = []
    for line in lines:
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def stack_outputs(log: list[dict[str, Any]]) -> dict[str, Any]:
    """The stack's outputs as the update left them (the stack's last ``resOutputsEvent``).

    >>> stack_outputs([{"resOutputsEvent": {"metadata": {"type": STACK_TYPE,
    ...     "new": {"outputs": {"endpoint": "http://h:8080/v1"}}}}}])
    {'endpoint': 'http://h:8080/v1'}
    """
    found: dict[str, Any] = {}
    for event in log:
        meta = (event.get("resOutputsEvent") or {}).get("metadata") or {}
        if meta.get("type") == STACK_TYPE:
            found = (meta.get("new") or {}).get("outputs") or found
    return found


def errors(log: list[dict[str, Any]]) -> list[str]:
    """The error diagnostics, in order, the engine's own afterwords left out.

    >>> errors([{"diagnosticEvent": {"severity": "error", "message": "glm:x is refused\\n"}},
    ...         {"diagnosticEvent": {"severity": "error", "message": "update failed"}},
    ...         {"diagnosticEvent": {"severity": "warning", "message": "w"}}])
    ['glm:x is refused']
    """
    found = []
    for event in log:
        diagnostic = event.get("diagnosticEvent") or {}
        message = str(diagnostic.get("message") or "").strip()
        if diagnostic.get("severity") == "error" and message and not message.startswith(ENGINE_NOISE):
            found.append(message)
    return found


def next_command(message: str, stack: str) -> str:
    """What to run next: the error's own way out where it names one (a ``Fix:``, a ``make``
    command), else where to look.

    >>> next_command("gate failed.\\nTo go back to the last version that passed: make rollback STACK=a800.", "a800")
    'To go back to the last version that passed: make rollback STACK=a800.'
    >>> next_command("glm:serving.maxModelLen is 0. Fix: set it to 32768.", "a800")
    'Fix: set it to 32768.'
    >>> next_command("something broke", "a800")
    'Look: make status STACK=a800, make logs STACK=a800; then make up STACK=a800 again.'
    """
    for line in reversed(message.splitlines()):
        if "Fix:" in line:
            return line[line.index("Fix:") :].strip()
        if "make " in line or "scripts/pulumi.sh " in line:
            return line.strip()
    return f"Look: make status STACK={stack}, make logs STACK={stack}; then make up STACK={stack} again."


def failed(stack: str, log: list[dict[str, Any]], status: int) -> str:
    """A failed update's last lines: its cause and the next command.

    >>> print(failed("local", [{"diagnosticEvent": {"severity": "error",
    ...     "message": "the replica failed its gate at step 'arithmetic': got '42'\\n"
    ...                "To go back: make rollback STACK=local."}}], 255))
    up of local failed: the replica failed its gate at step 'arithmetic': got '42'
    Next: To go back: make rollback STACK=local.
    """
    found = errors(log)
    if not found:
        return (
            f"up of {stack} failed (exit {status}) before it said why: the lines above are all there is.\n"
            f"Next: {next_command('', stack)}"
        )
    lines = [line.strip() for line in found[0].splitlines() if line.strip()]
    cause = lines[0]
    if cause.endswith(":") and len(lines) > 1:  # a heading: "stack config is refused:" then the problem
        cause = f"{cause} {lines[1]}"
    cause = cause.split(" Fix:")[0]  # said on the next line
    if len(cause) > CAUSE_CHARS:
        cause = cause[: CAUSE_CHARS - 1] + "…"
    return f"up of {stack} failed: {cause}\nNext: {next_command(found[0], stack)}"


def passed(stack: str, outputs: dict[str, Any]) -> str:
    """A passed update's outputs a user acts on; the rest is one ``stack output`` away.

    >>> print(passed("a800", {"endpoint": "http://10.0.0.5:8080/v1", "servedModelName": "glm-5.3-flash",
    ...                       "vllmArgs": ["--port=8000"]}))
    Outputs (all of them: scripts/pulumi.sh stack output -s a800):
        endpoint  http://10.0.0.5:8080/v1
        model     glm-5.3-flash
        page      http://10.0.0.5:8080/status/ (opened with a glm:metricsKeys key)
        status    make status STACK=a800
    """
    endpoint = str(outputs.get("endpoint") or "")
    rows = [("endpoint", endpoint or "(none: nothing deployed)")]
    if outputs.get("servedModelName"):
        rows.append(("model", str(outputs["servedModelName"])))
    if endpoint.endswith("/v1") and outputs.get("target") != "kubernetes":  # no status page on the cluster
        rows.append(("page", f"{endpoint.removesuffix('v1')}status/ (opened with a glm:metricsKeys key)"))
    rows.append(("status", f"make status STACK={stack}"))
    lines = [f"Outputs (all of them: scripts/pulumi.sh stack output -s {stack}):"]
    lines += [f"    {label:9s} {value}" for label, value in rows]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    stack, status, path = argv[0], int(argv[1]), argv[2]
    try:
        with open(path) as f:
            log = events(f)
    except OSError:
        log = []
    if status == 0:
        print(passed(stack, stack_outputs(log)))
    else:
        print(failed(stack, log, status))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
