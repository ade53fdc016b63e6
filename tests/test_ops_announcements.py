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
from tests.conftest import TEST_HOST_KEY


def hosts(*names: str) -> dict[str, Any]:
    """`glm:target` as `pulumi config --json` shows it, with these GPU hosts."""
    listed = [{"name": n, "dockerHost": f"ssh://deploy@{n}", "hostKey": TEST_HOST_KEY} for n in names]
    return {"value": "…", "objectValue": {"hosts": listed}, "secret": False}


# `pulumi config --json` of a stack after `config set --path glm:serving.extraEnv.F wrong-answer`.
CURRENT = {
    "glm:hardware": {"value": "a800", "secret": False},
    "glm:serving": {
        "value": '{"extraEnv":{"F":"x"}}',
        "objectValue": {"extraEnv": {"F": "x"}},
        "secret": False,
    },
    "glm:target": hosts("gpu01"),
    "glm:front": {"value": "…", "objectValue": {"allowPlainHttp": True}, "secret": False},
}
TWO_HOSTS = hosts("gpu01", "gpu02")
A800_SERVES_IN = "~6.2 min"  # seed a800-sm80-production: weights ~36 s, engine init ~5.5 min
LOCAL_SERVES_IN = "a few seconds"  # the simulator


def record_rollback(
    current: dict[str, Any],
    hardware: str,
    monkeypatch: pytest.MonkeyPatch,
    verified: dict[str, Any] | None = None,
    planned: list[dict[str, str]] | None = None,
    exit_code: int = 0,
) -> list[str]:
    """What the rollback did, in order: what it said ('said: …' on stderr, 'out: …' on stdout),
    each config write, the preview (whose steps are ``planned``), the up."""
    events: list[str] = []

    def pulumi(*args: str, stack: str) -> str:
        if args[:2] == ("stack", "output"):
            return json.dumps({"config": verified or {"hardware": hardware}})
        if args == ("config", "--json"):
            return json.dumps(current)
        events.append(f"pulumi {' '.join(args[:2])}")
        return ""

    class Done:
        returncode = 0
        stdout = json.dumps({"steps": planned or []})
        stderr = ""

    def fake_run(argv: list[str], **_: Any) -> Done:
        events.append(" ".join(argv[:2]))
        return Done()

    monkeypatch.setattr("ops.rollback.subprocess.run", fake_run)
    monkeypatch.setattr("sys.stderr.write", lambda text: events.append(f"said: {text}"))
    monkeypatch.setattr("sys.stdout.write", lambda text: events.append(f"out: {text}"))
    assert rollback("a800", pulumi, ["pulumi"]) == exit_code
    return events


def test_rollback_of_one_box_says_503_for_the_profiles_time_before_it_writes_or_runs_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = record_rollback(CURRENT, "a800", monkeypatch)
    first_act = next(i for i, e in enumerate(events) if not e.startswith(("said: ", "out: ")))
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


# The verified version is the one the file already has (CURRENT's serving): a rollback with nothing to do.
SAME = {"hardware": "a800", "serving": {"extraEnv": {"F": "x"}}}
CONTAINER_URN = "urn:pulumi:a800::glm53-flash::docker:index/container:Container::a800-vllm"


def test_a_rollback_with_nothing_to_do_does_nothing_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47 item 8: it announced a 503 window, ran `up` ("31 unchanged") and ended "passed its
    gates in 3 s": no gate ran and no request got a 503."""
    planned = [{"op": "same", "urn": CONTAINER_URN}]
    events = record_rollback(CURRENT, "a800", monkeypatch, verified=SAME, planned=planned)
    said = "".join(e for e in events if e.startswith(("said: ", "out: ")))
    assert [e for e in events if not e.startswith(("said: ", "out: "))] == [
        "pulumi preview"
    ]  # no write, no up
    assert "503" not in said and "passed its gates" not in said, said
    assert "nothing to roll back" in said and "no gate ran" in said, said


def test_a_rollback_whose_file_is_already_verified_announces_503_only_where_a_container_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The file was put back by hand after a failed gate: the failed container still runs, `up`
    replaces it, and the one-box 503 window is announced before it does."""
    replaced = [{"op": "replace", "urn": CONTAINER_URN}]
    events = record_rollback(CURRENT, "a800", monkeypatch, verified=SAME, planned=replaced)
    acts = [e for e in events if not e.startswith(("said: ", "out: "))]
    assert acts == ["pulumi preview", "pulumi up"], events
    before_up = "".join(e for e in events[: events.index("pulumi up")] if e.startswith("said: "))
    assert "the API answers 503" in before_up, events
    # A change that makes no new container (a rule file updated in place) has no 503 window.
    in_place = [{"op": "update", "urn": CONTAINER_URN.replace("a800-vllm", "a800-prometheus")}]
    events = record_rollback(CURRENT, "a800", monkeypatch, verified=SAME, planned=in_place)
    assert "pulumi up" in events and not any("503" in e for e in events), events


def test_a_rollback_that_cannot_mend_the_file_changes_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 47 item 3: a bad glm:front.* value is no replica key: it said "already the verified
    one", ran `up`, and ended "rollback of local failed (exit 1)"."""
    bad_front = {
        **CURRENT,
        "glm:front": {"value": "…", "objectValue": {"allowPlainHttp": True, "maxBodySize": "20x"}},
    }
    with pytest.raises(SystemExit) as refused:
        record_rollback(bad_front, "a800", monkeypatch, verified=SAME)
    said = str(refused.value.code)
    assert (
        "glm:front.maxBodySize='20x'" in said
        and "would still be refused" in said
        and "Nothing was changed" in said
    )
    assert "`scripts/pulumi.sh config rm --path 'glm:front.maxBodySize' -s a800`" in said
