"""SmokeTest under Pulumi mocks: what it registers, and that the API key stays secret.

The dynamic provider is pickled (dill) when the resource is constructed, so a provider that cannot
be pickled fails here too, without an engine.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import dill
import pulumi
import pytest
from pulumi.runtime import rpc

from components.config import StackConfig, build_stack_config
from components.serving.spec import render_env, render_serving
from components.verification.smoke_gate import VERSION, SmokeTest, SmokeTestArgs, SmokeTestProvider
from tests.conftest import redacted, stack_config

DYNAMIC = "pulumi-python:dynamic:Resource"
KEY = "sk-mock-a800-key-b741bd2407ff543c"
FRONT_URL = "http://a800-01.example.internal:8008/v1"
IMAGE_REF = "glm53-flash-sm80:0123456789ab"
FAKE_RESULTS = {"served_name": "zai-org/GLM-5.3-Flash", "kv_pool_tokens": 2004983, "pass_seconds": 412.5}


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.registered: list[tuple[str, str, dict[str, Any]]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.registered.append((args.typ, args.name, dict(args.inputs)))
        outputs = dict(args.inputs)
        if args.typ == DYNAMIC:
            outputs["results"] = FAKE_RESULTS  # what the provider's create would return
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


def a800_config() -> StackConfig:
    raw = {key.removeprefix("glm:"): value for key, value in stack_config("a800").items()}
    return build_stack_config(raw)


def build(
    api_key: pulumi.Output[str], metrics_url: str | None = None
) -> tuple[RecordingMocks, dict[str, Any]]:
    """Construct the a800 SmokeTest under mocks; return the mocks and the resolved results output."""
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project="glm", stack="a800", preview=False)
    seen: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[None]:
        smoke = SmokeTest(
            "a800-smoke",
            SmokeTestArgs(
                serving=render_serving(a800_config()),
                smoke=a800_config().smoke,
                front_url=pulumi.Output.from_input(FRONT_URL),
                api_key=api_key,
                image_ref=pulumi.Output.from_input(IMAGE_REF),
                metrics_url=metrics_url,
            ),
        )
        secret = pulumi.Output.from_input(smoke.results.is_secret())
        return pulumi.Output.all(smoke.results, secret).apply(
            lambda done: seen.update(results=done[0], secret=done[1])
        )

    program()
    return mocks, seen


def gate_inputs(mocks: RecordingMocks) -> dict[str, Any]:
    found = [inputs for typ, name, inputs in mocks.registered if typ == DYNAMIC]
    assert len(found) == 1
    return found[0]


@pytest.fixture(scope="module")
def secret_key_run() -> tuple[RecordingMocks, dict[str, Any]]:
    return build(pulumi.Output.secret(KEY))


def test_registers_a_component_and_one_dynamic_resource(secret_key_run) -> None:
    mocks, _ = secret_key_run
    registered = {(typ, name) for typ, name, _ in mocks.registered}
    assert ("glm:smoke:SmokeTest", "a800-smoke") in registered
    assert (DYNAMIC, "a800-smoke-gate") in registered


def test_inputs_carry_what_the_gate_verifies(secret_key_run) -> None:
    mocks, _ = secret_key_run
    inputs = gate_inputs(mocks)
    config = a800_config()
    assert inputs["flags"] == render_serving(config).shown_flags
    assert inputs["flags"]["--speculative-config"] == '{"method":"mtp","num_speculative_tokens":5}'
    assert inputs["flags"]["--enable-expert-parallel"] is True
    assert inputs["env"] == render_env(config)
    assert inputs["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert inputs["image_ref"] == IMAGE_REF
    assert inputs["endpoint"] == FRONT_URL
    assert inputs["served_name"] == "zai-org/GLM-5.3-Flash"
    assert inputs["max_model_len"] == 1048576
    assert inputs["model_path"] == "/models/GLM-5.3-Flash"
    assert inputs["container_name"] == "glm53-flash-a800-8008"
    assert inputs["version"] == VERSION
    smoke = inputs["smoke"]
    assert smoke["chat_template_kwargs"] == {"reasoning_effort": "low"}
    assert smoke["expected_answer"] == "221"
    assert smoke["deadline_seconds"] == 1800
    assert smoke["steps"] == ["models", "arithmetic", "tool_call", "kv_pool", "front_auth", "streaming"]
    assert "metrics_url" not in inputs


def test_api_key_is_a_secret_input_and_appears_nowhere_in_plain_text(secret_key_run) -> None:
    mocks, _ = secret_key_run
    inputs = gate_inputs(mocks)
    assert rpc.is_rpc_secret(inputs["api_key"])
    assert rpc.unwrap_rpc_secret(inputs["api_key"]) == KEY
    for _, _, registered in mocks.registered:
        assert KEY not in json.dumps(redacted(registered), default=str)


def test_a_plain_key_is_made_secret_too() -> None:
    mocks, _ = build(pulumi.Output.from_input(KEY))
    assert rpc.is_rpc_secret(gate_inputs(mocks)["api_key"])


def test_the_pickled_provider_is_secret_loads_back_and_holds_no_key(secret_key_run) -> None:
    mocks, _ = secret_key_run
    provider = gate_inputs(mocks)["__provider"]
    assert rpc.is_rpc_secret(provider)
    pickled = base64.b64decode(rpc.unwrap_rpc_secret(provider))
    assert KEY.encode() not in pickled
    assert isinstance(dill.loads(pickled), SmokeTestProvider)


def test_results_are_a_readable_non_secret_output(secret_key_run) -> None:
    _, seen = secret_key_run
    assert seen["results"] == FAKE_RESULTS
    assert seen["secret"] is False


def test_metrics_url_is_passed_when_given() -> None:
    mocks, _ = build(pulumi.Output.secret(KEY), metrics_url="http://127.0.0.1:9090/federate")
    assert gate_inputs(mocks)["metrics_url"] == "http://127.0.0.1:9090/federate"


def test_inputs_are_identical_across_runs(secret_key_run) -> None:
    """No timestamps or random values: a preview after an up shows no change."""
    first = redacted(gate_inputs(secret_key_run[0]))
    second = redacted(gate_inputs(build(pulumi.Output.secret(KEY))[0]))
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
