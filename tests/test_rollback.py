"""ops rollback (ops/rollback.py): what it writes back, from a stack's real `pulumi config --json`
shape (the local stack's: tests/test_local_config.py). The whole way back on the real engine, after a failed roll, is in tests/test_multihost_engine.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ops.rollback import changes, rollback

# `pulumi config --json` of a stack after `config set --path glm:serving.extraEnv.F wrong-answer`
# (the shape the CLI prints: objects as JSON text in "value" and parsed in "objectValue").
CURRENT = {
    "glm:hardware": {"value": "local", "secret": False},
    "glm:serving": {
        "value": '{"extraEnv":{"F":"wrong-answer"}}',
        "objectValue": {"extraEnv": {"F": "wrong-answer"}},
        "secret": False,
    },
    "glm:apiKeys": {"secret": True},
    "glm:front": {"value": '{"port":18480}', "objectValue": {"port": 18480}, "secret": False},
}


def test_only_the_replica_keys_that_differ_go_back() -> None:
    verified = {"hardware": "local", "serving": {"maxNumSeqs": 6}}
    assert changes(CURRENT, verified) == {"glm:serving": {"maxNumSeqs": 6}}
    # A key the verified version did not set is removed; the front and the secrets are not touched.
    assert changes(CURRENT, {"hardware": "local"}) == {"glm:serving": None}
    assert changes(CURRENT, {"hardware": "local", "serving": {"extraEnv": {"F": "wrong-answer"}}}) == {}


def test_the_rollback_writes_the_keys_back_then_runs_up(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def pulumi(*args: str, stack: str) -> str:
        calls.append(args)
        if args[:2] == ("stack", "output"):
            return json.dumps(
                {"fingerprint": "x", "config": {"hardware": "local", "serving": {"maxNumSeqs": 6}}}
            )
        if args == ("config", "--json"):
            return json.dumps(CURRENT)
        return ""

    ran: list[list[str]] = []

    class Done:
        returncode = 0

    def fake_run(argv: list[str], **_: Any) -> Done:
        ran.append(argv)
        return Done()

    monkeypatch.setattr("ops.rollback.subprocess.run", fake_run)
    assert rollback("a800", pulumi, ["pulumi"]) == 0
    set_all = next(c for c in calls if c[:2] == ("config", "set-all"))
    assert json.loads(set_all[3]) == {
        "glm:serving": {"value": '{"maxNumSeqs": 6}', "objectValue": {"maxNumSeqs": 6}, "secret": False}
    }
    assert ran == [["pulumi", "up", "--yes", "--skip-preview", "-s", "a800"]]


def test_a_stack_without_a_verified_config_is_told_what_to_do() -> None:
    def pulumi(*args: str, stack: str) -> str:
        return "null" if args[:2] == ("stack", "output") else "{}"

    with pytest.raises(SystemExit, match="no verified config to go back to"):
        rollback("a800", pulumi, ["pulumi"])
