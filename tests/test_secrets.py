"""Secret config never lands in plain text: the vLLM container gets it as a secret, nothing else sees
its value (Pulumi mocks, the program as ``pulumi up`` runs it)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Deployment, is_secret, run_program, unwrap

CONTAINER = "docker:index/container:Container"
HF_TOKEN = "hf_DeLiBeRaTeLySeCrEt0123456789"


def plain_parts(value: Any) -> Any:
    """A registered input with every secret replaced by a marker: what the state holds in clear."""
    if is_secret(value):
        return "[secret]"
    if isinstance(value, dict):
        return {k: plain_parts(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_parts(v) for v in value]
    return value


@pytest.fixture(scope="module")
def with_secret_env() -> Deployment:
    return run_program("rtx5090", secrets={"glm:servingSecretEnv": {"HF_TOKEN": HF_TOKEN}})


def test_secret_env_reaches_the_vllm_container_as_a_secret(with_secret_env: Deployment) -> None:
    envs = with_secret_env.one(CONTAINER, "-vllm").inputs["envs"]
    # The SDK marks the whole property secret when one element is: the state holds it encrypted.
    assert is_secret(envs)
    assert f"HF_TOKEN={HF_TOKEN}" in unwrap(envs)
    assert "NCCL_P2P_LEVEL=PXB" in unwrap(envs)


def test_secret_env_value_is_in_no_plain_input_and_no_output(with_secret_env: Deployment) -> None:
    for resource in with_secret_env.resources:
        assert HF_TOKEN not in json.dumps(plain_parts(resource.inputs), default=str), resource.name
    assert HF_TOKEN not in json.dumps(with_secret_env.outputs, default=str)


def test_secret_env_names_only_in_the_fingerprint(with_secret_env: Deployment) -> None:
    served = with_secret_env.outputs["verified"]["servedModel"]
    assert served["secretEnvNames"] == ["HF_TOKEN"]
    assert with_secret_env.outputs["fingerprint"] != run_program("rtx5090").outputs["fingerprint"]


def test_secret_env_value_is_not_a_gate_input(with_secret_env: Deployment) -> None:
    [gate] = [r for r in with_secret_env.resources if r.name.endswith("-smoke-gate")]
    assert HF_TOKEN not in json.dumps(unwrap(gate.inputs), default=str)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("glm:serving", {"extraEnv": {"HF_TOKEN": HF_TOKEN}}),
        ("glm:serving", {"extraArgs": ["--api-key", HF_TOKEN]}),
        ("glm:container", {"name": "glm53-flash"}),
    ],
)
def test_a_secret_under_a_plain_key_is_refused_naming_the_fix(key: str, value: Any) -> None:
    with pytest.raises(Exception) as raised:
        run_program("rtx5090", secrets={key: value})
    message = str(raised.value)
    assert f"{key} holds a secret" in message
    assert "glm:servingSecretEnv" in message
    assert HF_TOKEN not in message


def test_bad_secret_env_names_are_refused_without_the_value() -> None:
    with pytest.raises(Exception) as raised:
        run_program(
            "rtx5090",
            secrets={"glm:servingSecretEnv": {"HF TOKEN": HF_TOKEN, "NCCL_P2P_LEVEL": HF_TOKEN}},
        )
    message = str(raised.value)
    assert "glm:servingSecretEnv.HF TOKEN" in message
    assert "glm:servingSecretEnv.NCCL_P2P_LEVEL" in message and "glm:serving.env" in message
    assert HF_TOKEN not in message


@pytest.mark.parametrize(
    ("key", "value", "fix"),
    [
        ("glm:apiKeys", {"ops": "sk-plain-8c1f0e2b7a9d4c3e5f6a"}, "--path 'glm:apiKeys.ops'"),
        ("glm:metricsKeys", {"prom": "sk-plain-1b2e7f9c0d4a8e6f3c5b"}, "--path 'glm:metricsKeys.prometheus'"),
        ("glm:servingSecretEnv", {"HF_TOKEN": HF_TOKEN}, "--path 'glm:servingSecretEnv.HF_TOKEN'"),
        (
            "glm:tlsKey",
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIDeliberate\n",
            "glm:tlsKey -s rtx5090 --",
        ),
    ],
)
def test_a_secret_key_in_plain_text_is_refused_naming_the_secret_command(
    key: str, value: Any, fix: str
) -> None:
    """The mirror of the rule above: Pulumi.<stack>.yaml is tracked, so a key set without --secret
    is in clear in the repository."""
    with pytest.raises(Exception) as raised:
        run_program("rtx5090", overrides={key: value})
    message = str(raised.value)
    assert f"{key} is set in plain text" in message
    assert f"`scripts/pulumi.sh config set --secret {fix}" in message
    for secret in value.values() if isinstance(value, dict) else [value]:
        assert secret not in message
