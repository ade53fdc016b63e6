"""Messages true to what clients get (components/docker/replica_gate.py, ops/__main__.py): a failed gate on
one box says the API answers 503 until a passing version is back, every printed command carries
the real stack name, and `make status` never contradicts itself."""

from __future__ import annotations

import pytest

from components.docker.replica_gate import run_replica_gate
from components.provider_errors import OperatorError
from ops.__main__ import _gate_summary
from tests.engine import free_port


def _failed_gate(monkeypatch: pytest.MonkeyPatch, **props: object) -> str:
    monkeypatch.setattr("components.docker.rotation.keep_out", lambda front, host, reason: "kept out")
    closed = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(OperatorError) as failed:
        run_replica_gate({
            "endpoint": f"{closed}/v1", "metrics_url": f"{closed}/metrics", "served_name": "glm-5.3-flash",
            "max_model_len": 32768, "smoke": {"deadline_seconds": 1, "poll_seconds": 0.2, "steps": ["models"]},
            "api_key": "sk-test-ci-0a6e93030124c2b3", "front": {"container": "x"}, **props,
        })  # fmt: skip
    return str(failed.value)


def test_a_failed_gate_on_one_box_says_the_api_answers_503(monkeypatch: pytest.MonkeyPatch) -> None:
    said = _failed_gate(monkeypatch, host="local", stack="local", one_box=True)
    assert "the API answers 503" in said and "until a version that passes is back" in said
    assert "served by the replicas that passed" not in said and "no other host" not in said
    assert said.endswith("make rollback STACK=local.")


def test_a_failed_gate_on_several_hosts_names_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    said = _failed_gate(monkeypatch, host="gpu02", stack="a800", one_box=False)
    assert "served by the other hosts' replicas" in said and "The roll stopped here" in said
    assert said.endswith("make rollback STACK=a800.") and "<stack>" not in said


def test_status_after_a_failed_update_does_not_say_the_gate_passed_with_it() -> None:
    history = [
        {"kind": "update", "result": "failed", "version": 4, "endTime": "T4"},
        {"kind": "update", "result": "succeeded", "version": 3, "endTime": "T3"},
    ]
    summary = _gate_summary({"kv_pool_tokens": 9}, history)
    assert "with the last update" not in summary.split("(")[0]
    assert summary.startswith("passed with the update that ended T3 (not with the last update, which failed)")
    assert _gate_summary({"kv_pool_tokens": 9}, history[1:]).startswith("passed with the last update")
