"""Day-2 commands with a stack file the program refuses, and Ctrl-C: one line, never a traceback
(ops/__main__.py); the program on `make destroy` with such a file (components/docker/rotation.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ops import __main__ as ops
from tests.conftest import run_program
from tests.engine import PROJECT

# `pulumi config --json` of the local stack after `config set --path glm:serving.maxModelLen 0`.
REFUSED = {
    "glm:hardware": {"value": "local", "secret": False},
    "glm:serving": {"value": '{"maxModelLen":0}', "objectValue": {"maxModelLen": 0}, "secret": False},
    "glm:front": {"value": '{"port":18480}', "objectValue": {"port": 18480}, "secret": False},
    "glm:apiKeys": {"secret": True},
}
# ... and after `config set --path glm:front.maxBodySize 20x` instead (issue 47 item 3).
BAD_FRONT = {
    **REFUSED,
    "glm:serving": {"value": "{}", "objectValue": {}, "secret": False},
    "glm:front": {
        "value": '{"port":18480,"maxBodySize":"20x"}',
        "objectValue": {"port": 18480, "maxBodySize": "20x"},
        "secret": False,
    },
}
VERIFIED = {"config": {"hardware": "local", "container": {"name": "glm53-mine"}}}
# `pulumi stack history --json`: a failed update after one that succeeded with its config then.
HISTORY = [
    {"kind": "update", "result": "failed", "config": BAD_FRONT},
    {
        "kind": "update",
        "result": "succeeded",
        "config": {
            "glm:hardware": {"value": "local", "secret": False},
            "glm:front": {
                "value": "…",
                "objectValue": {"port": 18480, "maxBodySize": "12m"},
                "secret": False,
            },
            "glm:container": {"value": "…", "objectValue": {"name": "glm53-mine"}, "secret": False},
            "glm:apiKeys": {"secret": True},
        },
    },
]


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The fake CLI's answers: the stack's config, its history and its `verified` output."""
    answers: dict[str, Any] = {"config": REFUSED, "verified": VERIFIED, "history": HISTORY}

    def pulumi(*args: str, stack: str) -> str:
        return json.dumps(answers["history"] if args[:2] == ("stack", "history") else answers["config"])

    monkeypatch.setattr(ops, "pulumi", pulumi)
    monkeypatch.setattr(ops, "stack_output", lambda name, stack: answers.get(name))
    return answers


def test_a_refused_stack_file_is_read_through_the_running_version(
    stack: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    config = ops.stack_config("local", "status")
    assert config.container.name == "glm53-mine"  # the running version's replica keys
    assert config.front.port == 18480  # the other keys as the last update that succeeded had them
    said = capsys.readouterr().err.strip()
    assert said.count("\n") == 0 and "glm:serving.maxModelLen" in said
    assert "status reads the version that runs" in said
    # The problem's own fix, to paste; and the rollback, which puts a verified serving back.
    assert "`scripts/pulumi.sh config rm --path 'glm:serving.maxModelLen' -s local`" in said
    assert "`make rollback STACK=local`" in said


@pytest.mark.parametrize("command", ["status", "logs", "smoke", "debug"])
def test_a_bad_front_value_is_read_through_the_running_version_and_no_rollback_is_offered(
    command: str, stack: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`make rollback` puts back the replica keys only: the file it leaves is refused the same way."""
    stack["config"] = BAD_FRONT
    config = ops.stack_config("local", command)
    assert config.front.max_body_size == "12m" and config.front.port == 18480  # what runs
    assert config.container.name == "glm53-mine"
    said = capsys.readouterr().err.strip()
    assert said.count("\n") == 0 and "glm:front.maxBodySize='20x'" in said
    assert "`scripts/pulumi.sh config rm --path 'glm:front.maxBodySize' -s local`" in said
    assert "rollback" not in said and f"{command} reads the version that runs" in said


def test_a_bad_front_value_without_any_update_history_refuses_in_one_line(stack: dict[str, Any]) -> None:
    stack["config"], stack["history"] = BAD_FRONT, []
    with pytest.raises(SystemExit) as refused:
        ops.stack_config("local", "status")
    said = str(refused.value.code)
    assert "\n" not in said and "glm:front.maxBodySize" in said and "rollback" not in said


def test_restart_refuses_in_one_line_naming_the_problem_and_the_fix(stack: dict[str, Any]) -> None:
    with pytest.raises(SystemExit) as refused:
        ops.stack_config("local", "restart")
    said = str(refused.value.code)
    assert "\n" not in said and "glm:serving.maxModelLen" in said and "Fix:" in said
    assert "`make rollback STACK=local`" in said
    stack["config"] = BAD_FRONT
    with pytest.raises(SystemExit) as refused:
        ops.stack_config("local", "restart")
    assert "glm:front.maxBodySize" in str(refused.value.code) and "rollback" not in str(refused.value.code)


def test_without_a_verified_output_it_reads_the_last_update_that_succeeded(
    stack: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    stack["verified"] = None
    config = ops.stack_config("local", "logs")
    assert config.container.name == "glm53-mine"
    said = capsys.readouterr().err
    assert "rollback" not in said  # nothing verified to go back to
    stack["history"] = []
    with pytest.raises(SystemExit) as refused:
        ops.stack_config("local", "logs")
    assert "\n" not in str(refused.value.code) and "glm:serving.maxModelLen" in str(refused.value.code)


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole foreground process group: ops and the CLI it waits on."""
    started = tmp_path / "started"
    fake = tmp_path / "pulumi"
    fake.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 60\n")
    fake.chmod(0o755)
    env = {**os.environ, "GLM_PULUMI": str(fake)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ops", "logs", "-s", "local"], cwd=PROJECT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not started.exists():
        assert proc.poll() is None and time.monotonic() < deadline, (
            f"ops never called the CLI: {proc.communicate()}"
        )
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip() == "ops: interrupted"


def test_ctrl_c_is_one_line_where_only_the_docker_cli_saw_it(
    stack: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shell's background job ignores SIGINT, and Python then keeps ignoring it: Ctrl-C stops only
    the docker CLI, which exits 130 (a run of the suite in the background met it: exit 130, nothing
    said). The CLI's 130 is the interrupt."""
    stack["config"] = {"glm:hardware": {"value": "local", "secret": False}}
    monkeypatch.setattr(ops, "docker", lambda config: ["sh", "-c", "echo 'INFO a log line'; exit 130", "sh"])
    assert ops.run(["logs", "-s", "local"]) == 130
    out, err = capsys.readouterr()
    assert "a log line" in out
    assert err.strip().splitlines()[-1] == "ops: interrupted", err


def test_an_unforeseen_error_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(argv: list[str] | None = None) -> int:
        raise json.JSONDecodeError("Expecting value", "", 0)

    monkeypatch.setattr(ops, "main", broken)
    monkeypatch.delenv("GLM_DEBUG", raising=False)
    assert ops.run(["status"]) == 1
    assert capsys.readouterr().err.strip().startswith("ops: JSONDecodeError: Expecting value")


def test_the_program_refuses_the_file_but_lets_make_destroy_destroy(monkeypatch: pytest.MonkeyPatch) -> None:
    overrides = {"glm:serving": {"maxModelLen": 0}}
    with pytest.raises(Exception, match=r"glm:serving\.maxModelLen"):
        run_program("local", overrides=overrides)
    front = {"docker_host": "unix:///var/run/docker.sock", "ssh": None, "container": "glm53-nginx"}
    monkeypatch.setenv("GLM_DESTROY_DRAIN", json.dumps({"front": front, "graceSeconds": 30}))
    deployment = run_program("local", overrides=overrides)
    assert deployment.resources == [] and deployment.outputs == {}
