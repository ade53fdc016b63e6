"""What an update ends with (ops/ending.py), from the engine's event log: the outputs a user acts on,
or the failure's cause and the next command. The events are shaped as `pulumi up --event-log` writes
them; the walkthrough (tests/test_first_hour_walkthrough.py) reads real ones."""

from __future__ import annotations

import json
from pathlib import Path

from ops.ending import STACK_TYPE, events, failed, main, passed, stack_outputs

REFUSED = (
    "stack config is refused:\n  glm:serving.maxModelLen is 0; it must be at least 1 (the profile's "
    "default is 32768). Fix: scripts/pulumi.sh config set --path glm:serving.maxModelLen 32768 -s local."
)
GATE_FAILED = (
    "the replica on host 'local' failed its gate at step 'arithmetic': asked 'What is 13×17?', got '42'.\n"
    "It is out of the front's rotation, and it was the stack's only replica: the API answers 503.\n"
    "To go back to the last version that passed: make rollback STACK=local."
)


def diagnostic(message: str, severity: str = "error") -> str:
    return json.dumps({"sequence": 1, "diagnosticEvent": {"message": message, "severity": severity}})


def outputs_event(outputs: dict[str, object]) -> str:
    meta = {"type": STACK_TYPE, "new": {"outputs": outputs}}
    return json.dumps({"sequence": 2, "resOutputsEvent": {"metadata": meta}})


def test_a_refused_config_ends_with_its_key_and_the_fix() -> None:
    log = events([diagnostic(REFUSED), diagnostic("update failed"), diagnostic("a warning", "warning")])
    said = failed("local", log, 255).splitlines()
    assert said == [
        "up of local failed: stack config is refused: glm:serving.maxModelLen is 0; it must be at least 1 "
        "(the profile's default is 32768).",
        "Next: Fix: scripts/pulumi.sh config set --path glm:serving.maxModelLen 32768 -s local.",
    ]


def test_a_failed_gate_ends_with_its_step_and_the_rollback_not_with_the_engines_afterword() -> None:
    log = events(
        [diagnostic("Resource monitor has terminated, shutting down"), diagnostic(GATE_FAILED), "{cut sh"]
    )
    cause, then = failed("local", log, 255).splitlines()
    assert cause.startswith(
        "up of local failed: the replica on host 'local' failed its gate at step 'arithmetic'"
    )
    assert then == "Next: To go back to the last version that passed: make rollback STACK=local."


def test_a_failure_that_said_nothing_points_at_status_and_logs() -> None:
    said = failed("a800", [], 1)
    assert "(exit 1) before it said why" in said and "make status STACK=a800, make logs STACK=a800" in said


def test_a_passed_update_shows_four_lines_and_where_the_rest_is() -> None:
    log = events(
        [
            outputs_event({"endpoint": "old"}),
            outputs_event(
                {
                    "endpoint": "https://gpu01:8443/v1",
                    "servedModelName": "glm-5.3-flash",
                    "vllmArgs": [f"--flag-{i}" for i in range(40)],
                    "drain": {"front": {}, "graceSeconds": 30},
                }
            ),
        ]
    )
    said = passed("a800", stack_outputs(log)).splitlines()
    assert said == [
        "Outputs (all of them: scripts/pulumi.sh stack output -s a800):",
        "    endpoint  https://gpu01:8443/v1",
        "    model     glm-5.3-flash",
        "    page      https://gpu01:8443/status/ (opened with a glm:metricsKeys key)",
        "    status    make status STACK=a800",
    ]


def test_main_keeps_the_updates_exit_status(tmp_path: Path, capsys: object) -> None:
    log = tmp_path / "events"
    log.write_text(diagnostic(GATE_FAILED) + "\n")
    assert main(["local", "255", str(log)]) == 255
    assert main(["local", "0", str(tmp_path / "missing")]) == 0
