"""Each committed stack file under mocks, as a whole: what the stack exports, how it fails, and how
its components are wired (the components' own renders are in tests/test_<component>.py)."""

from __future__ import annotations

import json
import shlex

import pytest

from components.vllm_flags.owned import OWNED
from tests.conftest import TEST_API_KEYS, Deployment, profile_stacks, run_program, unwrap


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090"])
def test_docker_provider_talks_ssh_to_the_box(deployed: dict[str, Deployment], stack: str) -> None:
    provider = deployed[stack].one("pulumi:providers:docker")
    assert provider.inputs["host"].startswith("ssh://deploy@")


@pytest.mark.parametrize("stack", profile_stacks())
def test_outputs_for_reviewers_and_operators(deployed: dict[str, Deployment], stack: str) -> None:
    outputs = deployed[stack].outputs
    for key in ("endpoint", "servedModelName", "vllmCommandLine", "imageRef", "curl"):
        assert outputs.get(key), f"stack output {key} missing"
    assert outputs["vllmCommandLine"].startswith("vllm serve ")
    assert "$GLM_API_KEY" in outputs["curl"]
    # vllmFlags is the argv's flags by name: the same rendering, nothing parsed back.
    flags = outputs["vllmFlags"]
    # A flag of several words (--allowed-media-domains a b) is the flag, then one element per word.
    several = {row.flag for row in OWNED if row.kind == "values"}
    rendered = [
        [f] if v is True else [f, *v.split()] if f in several else [f"{f}={v}"] for f, v in flags.items()
    ]
    assert sorted(outputs["vllmArgs"][1:]) == sorted(arg for args in rendered for arg in args)
    assert shlex.split(outputs["vllmCommandLine"]) == ["vllm", "serve", *outputs["vllmArgs"]]


@pytest.mark.parametrize("stack", profile_stacks())
def test_no_api_key_in_any_plain_output(deployed: dict[str, Deployment], stack: str) -> None:
    rendered = json.dumps(deployed[stack].outputs, default=str)
    for key in TEST_API_KEYS.values():
        assert key not in rendered


def test_invalid_stack_fails_before_anything_is_created() -> None:
    with pytest.raises(Exception, match=r"glm:serving\.tensorParallelSize=4"):
        run_program(
            "a800",
            overrides={
                "glm:serving": {"tensorParallelSize": 4},
                "glm:container": {"accelerators": [0, 1, 2, 3]},
            },
        )


def test_gate_reruns_whenever_the_serving_container_is_replaced(deployed: dict[str, Deployment]) -> None:
    from components.verification.smoke_gate import changed_inputs

    gate = deployed["a800"].one("pulumi-python:dynamic:Resource", "-smoke-gate").inputs
    assert gate["container_id"] == "a800-serving-vllm-id"  # the mocks' id of the serving container
    olds = {k: unwrap(v) for k, v in gate.items()}
    assert "container_id" in changed_inputs(olds, {**olds, "container_id": "a-new-container"})


@pytest.mark.parametrize("stack", ["a800", "local"])
def test_gate_is_wired_after_the_replica_gate_and_the_front(
    deployed: dict[str, Deployment], stack: str
) -> None:
    """The gate through the front runs once the replica passed its own gate (and is in rotation)."""
    depends_on = deployed[stack].options[f"{stack}-smoke"].depends_on
    assert isinstance(depends_on, list)
    kinds = {type(d).__name__ for d in depends_on}
    assert {"ReplicaGate", "NginxFront", "PrometheusScrape"} <= kinds
    replica_after = deployed[stack].options[f"{stack}-replica"].depends_on
    # The replica gate admits into the front's rotation: after its container and the front's config.
    assert [type(d).__name__ for d in replica_after or []] == ["VllmServer", "NginxFront"]


def test_glm_docker_host_points_the_provider_and_the_host_at_another_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GLM_DOCKER_HOST", "unix:///var/run/docker.sock")
    deployment = run_program("a800")
    provider = deployment.one("pulumi:providers:docker")
    assert provider.inputs["host"] == "unix:///var/run/docker.sock"
    assert deployment.outputs["endpoint"] == "http://localhost:8008/v1"


def test_curl_output_is_shell_quoted_json() -> None:
    import shlex

    from components.serving.spec import curl_command

    argv = shlex.split(curl_command("http://localhost:8080/v1", "m'$(id)'"))
    body = json.loads(argv[argv.index("-d") + 1])
    assert body["model"] == "m'$(id)'"
    assert argv[2] == "http://localhost:8080/v1/chat/completions"


@pytest.mark.parametrize("name", ["m'$(id>/tmp/x)'", "a b", "", "-rf", "x" * 200, 'q"uote'])
def test_served_names_clients_cannot_send_plainly_are_refused(name: str) -> None:
    with pytest.raises(Exception, match=r"glm:model\.servedName"):
        run_program("local", overrides={"glm:model": {"servedName": name}})


def test_the_seeds_served_names_are_accepted(deployed: dict[str, Deployment]) -> None:
    names = {stack: deployed[stack].outputs["servedModelName"] for stack in ("a800", "ascend", "rtx5090")}
    assert names == {"a800": "zai-org/GLM-5.3-Flash", "ascend": "glm5.3-flash", "rtx5090": "glm-5.3-flash"}


@pytest.mark.parametrize("stack", profile_stacks())
def test_one_role_label_spelling(deployed: dict[str, Deployment], stack: str) -> None:
    """``glm53.role`` names what a container or volume is for (the policy pack finds the front by it)."""
    labels = [label for r in deployed[stack].resources for label in r.inputs.get("labels") or []]
    assert [
        lb["label"] for lb in labels if lb["label"].endswith(".role") and lb["label"] != "glm53.role"
    ] == []
    assert {lb["value"] for lb in labels if lb["label"] == "glm53.role"} == {
        "front",
        "monitoring",
        "jit-cache",
        "semantic-probe",
    }
