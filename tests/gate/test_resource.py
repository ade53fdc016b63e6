"""The dynamic provider and the component's inputs (``components/verification/smoke_gate.py``): create and
update run the gate and return full outputs without the key; diff, check and delete; the inputs are
deterministic; the version covers the whole package; the local stack reads vLLM's own metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from components.config import GATE_METRICS_CLIENT, ConfigError, SecretInputs, build_stack_config
from components.gate.checks import GateFailure, plain
from components.gate.settings import SmokeConfig
from components.serving.spec import render_serving
from components.verification.smoke_gate import (
    SmokeTestProvider,
    changed_inputs,
    gate_outputs,
    gate_params,
    key_fingerprint,
    package_hash,
)
from tests.conftest import (
    GATE_METRICS_TEST_KEY,
    PROJECT,
    TEST_API_KEYS,
    is_secret,
    profile_stacks,
    run_program,
    unwrap,
)
from tests.gate.support import KEY, local_config, params

# ---- the dynamic provider ------------------------------------------------------------------------


def test_create_and_update_return_full_outputs_without_the_key(sims, capsys) -> None:
    sim = sims()
    provider = SmokeTestProvider()
    props = {**params(f"{sim.url}/v1", sim, steps=["models", "arithmetic", "kv_pool"]), "api_key": KEY}

    created = provider.create(props)
    updated = provider.update(created.id, created.outs or {}, props)

    for outs in (created.outs, updated.outs):
        assert outs is not None
        serialized = json.dumps(outs)
        assert KEY not in serialized
        assert KEY[3:20] not in serialized
        assert outs["api_key"] == key_fingerprint(KEY)
        assert outs["results"]["kv_pool_tokens"] == 4 * 32768
        assert outs["flags"] == render_serving(local_config()).shown_flags
        assert outs["max_model_len"] == 32768  # coerced back from 32768.0
        for name in ("endpoint", "env", "image_ref", "model_path", "served_name", "smoke", "version"):
            assert name in outs
    assert created.id.startswith("smoke-")
    # Both ran the gate (progress goes to stderr: pulumi.log is only a stderr pass-through here).
    stderr = capsys.readouterr().err
    assert stderr.count("[smoke-gate] passed in") == 2
    assert KEY not in stderr


def test_create_fails_with_the_gate_failure(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="wrong-answer")
    props = {**params(f"{sim.url}/v1", sim), "api_key": KEY}
    with pytest.raises(GateFailure, match="step 'arithmetic'"):
        SmokeTestProvider().create(props)


def _stored_outputs() -> dict[str, Any]:
    """What the state holds after a create: the inputs (coerced), the fingerprint, the results."""
    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY}
    outs = {k: plain(v) for k, v in news.items() if k != "api_key"}
    return {**outs, "api_key": key_fingerprint(KEY), "results": {"pass_seconds": 1.0}}


def test_diff_identical_inputs_no_changes() -> None:
    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY, "__provider": "pickled-b"}
    olds = {**_stored_outputs(), "__provider": "pickled-a"}
    result = SmokeTestProvider().diff("smoke-x", olds, news)
    assert result.changes is False
    assert changed_inputs(olds, news) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda n: n["flags"].update({"--max-num-batched-tokens": "8192"}), "flags"),
        (lambda n: n["env"].update(VLLM_USE_BREAKABLE_CUDAGRAPH="1"), "env"),
        (lambda n: n.update(image_ref="glm53-vllm-sim:other"), "image_ref"),
        (lambda n: n.update(max_model_len=65536.0), "max_model_len"),
        (lambda n: n["smoke"].update(expected_answer="222"), "smoke"),
        (lambda n: n.update(version="2+abc"), "version"),
        (lambda n: n.update(api_key="sk-rotated-key-35bbacf89dadf998"), "api_key"),
        (lambda n: n.update(endpoint="http://127.0.0.1:9090/v1"), "endpoint"),
    ],
)
def test_diff_reruns_the_gate_for_what_affects_the_served_model(change, expected) -> None:
    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY}
    change(news)
    result = SmokeTestProvider().diff("smoke-x", _stored_outputs(), news)
    assert result.changes is True
    assert result.replaces == []  # an update, which re-runs the gate
    assert changed_inputs(_stored_outputs(), news) == [expected]


def test_diff_treats_unknown_inputs_as_changes() -> None:
    from pulumi.runtime import rpc

    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY, "image_ref": rpc.UNKNOWN}
    assert SmokeTestProvider().diff("smoke-x", _stored_outputs(), news).changes is True


def test_check_coerces_floats_and_refuses_bad_inputs() -> None:
    provider = SmokeTestProvider()
    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY}
    ok = provider.check({}, news)
    assert ok.failures == []
    assert ok.inputs["max_model_len"] == 32768 and isinstance(ok.inputs["max_model_len"], int)

    bad = {**news, "endpoint": "127.0.0.1:8080", "metrics_url": "m:1/metrics"}
    del bad["api_key"]
    failures = {f.property: f.reason for f in provider.check({}, bad).failures}
    assert "not an http(s) URL" in failures["endpoint"]
    assert "not an http(s) URL" in failures["metrics_url"]
    assert "glm:apiKeys" in failures["api_key"]


@pytest.mark.parametrize(
    ("settings", "refused"), [({"steps": ["models", "vibes"]}, "vibes"), ({"pollSeconds": 2}, "poll")]
)
def test_the_gate_settings_are_refused_by_their_model_before_any_provider(settings, refused) -> None:
    """The provider does not check ``smoke`` again: its input is always rendered from a SmokeConfig."""
    with pytest.raises(ValueError, match=refused):
        SmokeConfig.model_validate(settings)


def test_delete_is_a_tolerant_no_op() -> None:
    SmokeTestProvider().delete("smoke-x", {})


def test_gate_params_are_deterministic() -> None:
    config = local_config()
    first = gate_params(render_serving(config), config.smoke, "http://h:8080/v1", "img")
    second = gate_params(render_serving(config), config.smoke, "http://h:8080/v1", "img")
    assert json.dumps(first) == json.dumps(second)
    assert list(first) == sorted(first)
    assert list(first["smoke"]) == sorted(first["smoke"])
    assert "api_key" not in first


# ---- the provider version ------------------------------------------------------------------------


def _copy_package(tmp_path: Path) -> Path:
    source = PROJECT / "components" / "gate"
    copy = tmp_path / "gate"
    copy.mkdir()
    for path in source.glob("*.py"):
        (copy / path.name).write_text(path.read_text())
    return copy


def test_the_version_covers_every_file_of_the_package(tmp_path: Path) -> None:
    package = _copy_package(tmp_path)
    before = package_hash(package)
    assert package_hash(package) == before  # deterministic
    sse = package / "sse.py"
    sse.write_text(sse.read_text().replace('"[DONE]"', '"[END]"'))
    assert package_hash(package) != before, "a code change in sse.py re-runs the gate"
    changed = package_hash(package)
    (package / "new_step.py").write_text("X = 1\n")
    assert package_hash(package) != changed, "a new file re-runs the gate"


def test_a_comment_or_format_change_keeps_the_version(tmp_path: Path) -> None:
    package = _copy_package(tmp_path)
    before = package_hash(package)
    checks = package / "checks.py"
    checks.write_text("# a comment\n" + checks.read_text().replace("\n\n\n", "\n\n\n\n"))
    assert package_hash(package) == before


# ---- where kv_pool reads vLLM's metrics, and when the gate re-runs --------------------------------


@pytest.mark.parametrize("stack", profile_stacks())
def test_every_stack_reads_the_kv_pool_through_the_fronts_metrics_route(stack: str) -> None:
    """The gate's KV check runs by default on every stack, hardware ones included: the front's
    /metrics route with a metrics key the stack generates, which the front's metrics map holds."""
    deployment = run_program(stack)
    gate = deployment.one("pulumi-python:dynamic:Resource", "-smoke-gate").inputs
    front = unwrap(deployment.one("pulumi-python:dynamic:Resource", "-front-config").inputs)
    assert gate["metrics_url"] == gate["endpoint"].removesuffix("/v1") + "/metrics"
    assert is_secret(gate["metrics_key"]) and unwrap(gate["metrics_key"]) == GATE_METRICS_TEST_KEY
    assert GATE_METRICS_CLIENT in front["metrics_key_names"]
    assert f'"{GATE_METRICS_CLIENT}"' in front["secret_files"]["metrics-keys.map"]
    assert GATE_METRICS_TEST_KEY in front["secret_files"]["metrics-keys.map"]
    assert GATE_METRICS_TEST_KEY not in front["secret_files"]["api-keys.map"]


def test_a_configured_metrics_url_wins_and_gets_no_generated_key() -> None:
    deployment = run_program("local", overrides={"glm:smoke": {"metricsUrl": "http://m:1/metrics"}})
    gate = deployment.one("pulumi-python:dynamic:Resource", "-smoke-gate").inputs
    assert gate["metrics_url"] == "http://m:1/metrics" and "metrics_key" not in gate
    assert not [r for r in deployment.resources if r.name.endswith("-smoke-metrics-key")]


def test_a_user_metrics_key_may_not_take_the_gates_name() -> None:
    secrets = SecretInputs(
        api_keys=TEST_API_KEYS, metrics_keys={GATE_METRICS_CLIENT: "sk-prom-c8ffb91bc8576f622b46"}
    )
    with pytest.raises(ConfigError, match=f"glm:metricsKeys.{GATE_METRICS_CLIENT} is the smoke gate's own"):
        build_stack_config({"hardware": "local"}, secrets)


def _gate_inputs(deployment: Any) -> dict[str, Any]:
    return unwrap(deployment.one("pulumi-python:dynamic:Resource", "-smoke-gate").inputs)


def test_the_gate_reruns_when_the_front_changes_and_only_key_names_show() -> None:
    """Anything between a client and the model (nginx.conf, image, key names, TLS) re-runs it."""
    stored = gate_outputs(_gate_inputs(run_program("local")), results={})
    more = {**TEST_API_KEYS, "zed": "sk-test-zed-9f8e7d6c5b4a3210fedc"}
    added_key = _gate_inputs(run_program("local", secrets={"glm:apiKeys": more}))
    assert changed_inputs(stored, added_key) == ["front_fingerprint"]
    assert "sk-test-zed" not in json.dumps(added_key["front_fingerprint"])
    timeout = _gate_inputs(run_program("local", overrides={"glm:front": {"readTimeoutSeconds": 30}}))
    assert changed_inputs(stored, timeout) == ["front_fingerprint"]
    assert changed_inputs(stored, _gate_inputs(run_program("local"))) == []


@pytest.mark.parametrize("old_module", ["components.gate.resource", "components.smoke_test"])
def test_a_provider_stored_under_its_old_module_still_loads(old_module: str) -> None:
    """Pulumi keeps the provider pickled by reference (dill.loads of the state's ``__provider``); the
    provider lived in ``components.gate.resource``, then in ``components.smoke_test``, so destroying
    or refreshing a stack deployed then must still find it there."""
    import pickle

    import dill

    from components.verification.smoke_gate import SmokeTestProvider

    stored = pickle.dumps(SmokeTestProvider(), protocol=0)
    assert b"components.verification.smoke_gate" in stored
    old = stored.replace(b"components.verification.smoke_gate", old_module.encode())
    assert isinstance(dill.loads(old), SmokeTestProvider)
