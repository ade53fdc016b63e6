"""`make restart` and `make rollback` run no preview: on a one-box stack they say, before acting,
that the API answers 503 for about the profile's time to serve (ops/__main__.py, ops/rollback.py).
The clients' 503 windows on the real local stack are measured in test_first_hour_walkthrough.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.config import build_stack_config
from ops import __main__ as ops
from ops.rollback import rollback

# `pulumi config --json` of a stack after `config set --path glm:serving.extraEnv.F wrong-answer`.
CURRENT = {
    "glm:hardware": {"value": "a800", "secret": False},
    "glm:serving": {
        "value": '{"extraEnv":{"F":"x"}}',
        "objectValue": {"extraEnv": {"F": "x"}},
        "secret": False,
    },
}
TWO_HOSTS = {"value": "…", "objectValue": {"hosts": [{"name": "gpu01"}, {"name": "gpu02"}]}, "secret": False}
A800_SERVES_IN = "~6.2 min"  # seed a800-sm80-production: weights ~36 s, engine init ~5.5 min
LOCAL_SERVES_IN = "a few seconds"  # the simulator


def record_rollback(current: dict[str, Any], hardware: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the rollback did, in order: what it said ('said: …'), each config write, the up."""
    events: list[str] = []

    def pulumi(*args: str, stack: str) -> str:
        if args[:2] == ("stack", "output"):
            return json.dumps({"config": {"hardware": hardware}})
        if args == ("config", "--json"):
            return json.dumps(current)
        events.append(f"pulumi {' '.join(args[:2])}")
        return ""

    class Done:
        returncode = 0

    def fake_run(argv: list[str], **_: Any) -> Done:
        events.append(" ".join(argv[:2]))
        return Done()

    monkeypatch.setattr("ops.rollback.subprocess.run", fake_run)
    monkeypatch.setattr("sys.stderr.write", lambda text: events.append(f"said: {text}"))
    assert rollback("a800", pulumi, ["pulumi"]) == 0
    return events


def test_rollback_of_one_box_says_503_for_the_profiles_time_before_it_writes_or_runs_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = record_rollback(CURRENT, "a800", monkeypatch)
    first_act = next(i for i, e in enumerate(events) if not e.startswith("said: "))
    said = "".join(e for e in events[:first_act] if e.startswith("said: "))
    assert "the API answers 503" in said and A800_SERVES_IN in said and "on a800" in said, events
    assert events[first_act] == "pulumi config rm"


def test_rollback_of_several_hosts_announces_no_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    events = record_rollback({**CURRENT, "glm:target": TWO_HOSTS}, "a800", monkeypatch)
    assert not any("503" in e for e in events), events


def test_restart_of_one_box_says_503_for_the_profiles_time_before_it_runs_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = build_stack_config({"hardware": "local"})
    state = {"deployment": {"resources": [
        {"urn": "urn:vllm", "type": "docker:index/container:Container", "outputs": {"name": config.container.name}}
    ]}}  # fmt: skip
    events: list[str] = []
    monkeypatch.setattr(ops, "pulumi", lambda *args, stack: json.dumps(state))

    class Done:
        returncode = 0

    def fake_run(argv: list[str], **_: Any) -> Done:
        events.append(" ".join(argv[-4:]))
        return Done()

    monkeypatch.setattr(ops.subprocess, "run", fake_run)
    monkeypatch.setattr("sys.stderr.write", lambda text: events.append(f"said: {text}"))
    assert ops.restart(config, "local") == 0
    up = events.index("--replace urn:vllm -s local")
    said = "".join(e for e in events[:up] if e.startswith("said: "))
    assert "the API answers 503" in said and LOCAL_SERVES_IN in said and "on local" in said, events
