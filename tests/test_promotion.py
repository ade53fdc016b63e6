"""Promotion on evidence and review-ready diffs (Pulumi mocks)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.verification.promotion import differences, fingerprint
from tests.conftest import Deployment, run_program, unwrap

SOURCE = "organization/glm/a800-staging"


@pytest.fixture(scope="module")
def staging() -> Deployment:
    return run_program("a800-staging")


def promote(verified: Any, **overrides: Any) -> Deployment:
    return run_program(
        "a800",
        overrides={"glm:promoteFrom": SOURCE, **overrides},
        stack_outputs={SOURCE: {"verified": verified} if verified is not None else {}},
    )


def test_staging_publishes_what_promotion_needs(staging: Deployment) -> None:
    verified = staging.outputs["verified"]
    assert verified["fingerprint"] == staging.outputs["fingerprint"]
    assert verified["fingerprint"] == fingerprint(verified["servedModel"])
    assert verified["imageRef"].startswith("glm53-flash-sm80:")
    assert set(verified["servedModel"]) == {"image", "argv", "env", "modelPath", "revision"}


def test_promotion_accepted_when_only_per_environment_keys_differ(staging: Deployment) -> None:
    production = promote(staging.outputs["verified"])
    assert production.outputs["fingerprint"] == staging.outputs["fingerprint"]
    assert production.outputs["promotedFrom"] == {
        "stack": SOURCE,
        "imageRef": staging.outputs["verified"]["imageRef"],
    }


def test_promotion_refused_when_a_flag_differs(staging: Deployment) -> None:
    with pytest.raises(Exception) as err:
        promote(staging.outputs["verified"], **{"glm:serving": {"maxNumSeqs": 16}})
    message = str(err.value)
    assert f"glm:promoteFrom={SOURCE}" in message
    assert "argv has --max-num-seqs=16" in message
    assert "argv lacks --max-num-seqs=32" in message


def test_promotion_refused_when_an_env_var_differs(staging: Deployment) -> None:
    with pytest.raises(Exception, match=r"env TZ='UTC' \(source: None\)"):
        promote(staging.outputs["verified"], **{"glm:serving": {"extraEnv": {"TZ": "UTC"}}})


def test_promotion_refused_when_the_source_has_no_passing_gate() -> None:
    with pytest.raises(Exception, match="the source stack has no passing smoke gate"):
        promote(None)


def test_promotion_refused_when_the_source_output_is_tampered(staging: Deployment) -> None:
    verified = copy.deepcopy(staging.outputs["verified"])
    verified["servedModel"]["argv"].append("--enforce-eager")
    with pytest.raises(Exception, match="inconsistent"):
        promote(verified)


def test_promoted_pull_pins_the_verified_digest() -> None:
    source = run_program("rtx5090")
    verified = dict(source.outputs["verified"])
    assert "@sha256:" in verified["imageRef"]
    promoted = run_program(
        "rtx5090",
        overrides={"glm:promoteFrom": "organization/glm/rtx5090-staging"},
        stack_outputs={"organization/glm/rtx5090-staging": {"verified": verified}},
    )
    pulled = promoted.one("docker:index/remoteImage:RemoteImage", "-pull")
    assert pulled.inputs["name"] == verified["imageRef"]


def test_differences_name_each_setting() -> None:
    own = {"image": "a", "argv": ["/m", "--x=1"], "env": {"A": "1"}, "modelPath": "/m", "revision": "r1"}
    source = {
        "image": "b",
        "argv": ["/m", "--x=2"],
        "env": {"A": "1", "B": "2"},
        "modelPath": "/m",
        "revision": "r2",
    }
    assert differences(own, source) == [
        "argv has --x=1 (source: not set)",
        "argv lacks --x=2 (source has it)",
        "env B=None (source: '2')",
        "image 'a' (source: 'b')",
        "revision 'r1' (source: 'r2')",
    ]


def _inputs_by_name(deployment: Deployment) -> dict[str, dict[str, Any]]:
    return {r.name: r.inputs for r in deployment.resources}


def test_one_flag_change_touches_only_the_serving_container_and_the_gate() -> None:
    before = _inputs_by_name(run_program("a800"))
    after = _inputs_by_name(run_program("a800", overrides={"glm:serving": {"maxNumSeqs": 16}}))
    assert before.keys() == after.keys()
    changed = sorted(name for name in before if before[name] != after[name])
    # The probe skips a replica running at --max-num-seqs (issue 23): it is told the new value; the
    # front's config reloads for the usage meter's settings, which hold the engine's slots.
    assert changed == [
        "a800-front-config",
        "a800-replica-gate",
        "a800-semantic-probe-container",
        "a800-serving-vllm",
        "a800-smoke-gate",
    ]
    old_files, new_files = (unwrap(run["a800-front-config"]["secret_files"]) for run in (before, after))
    assert old_files == new_files
    old_conf, new_conf = (unwrap(run["a800-front-config"]["nginx_conf"]) for run in (before, after))
    assert [(a, b) for a, b in zip(old_conf.splitlines(), new_conf.splitlines(), strict=True) if a != b] == [
        (a, a.replace('"slots": 32', '"slots": 16')) for a in old_conf.splitlines() if '"slots": 32' in a
    ]
    assert '"slots": 16' in new_conf
    old_cmd, new_cmd = before["a800-serving-vllm"]["command"], after["a800-serving-vllm"]["command"]
    assert len(old_cmd) == len(new_cmd)
    assert [(a, b) for a, b in zip(old_cmd, new_cmd, strict=True) if a != b] == [
        ("--max-num-seqs=32", "--max-num-seqs=16")
    ]
    container_changes = {
        k
        for k in before["a800-serving-vllm"]
        if before["a800-serving-vllm"][k] != after["a800-serving-vllm"][k]
    }
    assert container_changes == {"command"}


def test_same_config_renders_identical_inputs() -> None:
    assert _inputs_by_name(run_program("a800")) == _inputs_by_name(run_program("a800"))
