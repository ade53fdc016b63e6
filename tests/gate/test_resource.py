"""The dynamic provider and the component's inputs (``components/gate/resource.py``): create and
update run the gate and return full outputs without the key; diff, check and delete; the inputs are
deterministic; the version covers the whole package; the local stack reads vLLM's own metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from components.config import build_stack_config
from components.gate.checks import GateFailure, plain
from components.gate.resource import (
    SmokeTestProvider,
    changed_inputs,
    gate_params,
    key_fingerprint,
    metrics_url_for,
    package_hash,
)
from components.vllm_server import render_argv
from tests.conftest import PROJECT
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
        assert outs["argv"] == render_argv(local_config())
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
        (lambda n: n["argv"].append("--max-num-batched-tokens=8192"), "argv"),
        (lambda n: n["env"].update(VLLM_USE_BREAKABLE_CUDAGRAPH="1"), "env"),
        (lambda n: n.update(image_ref="glm53-vllm-sim:other"), "image_ref"),
        (lambda n: n.update(max_model_len=65536.0), "max_model_len"),
        (lambda n: n["smoke"].update(expected_answer="222"), "smoke"),
        (lambda n: n.update(version="2+abc"), "version"),
        (lambda n: n.update(api_key="sk-rotated-key-0123456789abcdef"), "api_key"),
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


def test_check_coerces_floats_and_refuses_bad_settings() -> None:
    provider = SmokeTestProvider()
    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY}
    ok = provider.check({}, news)
    assert ok.failures == []
    assert ok.inputs["max_model_len"] == 32768 and isinstance(ok.inputs["max_model_len"], int)

    bad = {**news, "endpoint": "127.0.0.1:8080", "smoke": {**news["smoke"], "steps": ["models", "vibes"]}}
    failures = {f.property: f.reason for f in provider.check({}, bad).failures}
    assert "not an http(s) URL" in failures["endpoint"]
    assert "vibes" in failures["smoke"]


def test_delete_is_a_tolerant_no_op() -> None:
    SmokeTestProvider().delete("smoke-x", {})


def test_gate_params_are_deterministic() -> None:
    config = local_config()
    first = gate_params(config, "http://h:8080/v1", "img")
    second = gate_params(config, "http://h:8080/v1", "img")
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


# ---- where kv_pool reads vLLM's metrics ------------------------------------------------------------


def test_the_local_stack_reads_vllms_own_metrics_not_a_prometheus_scrape() -> None:
    config = build_stack_config({"hardware": "local"})
    url = metrics_url_for(config)
    assert url == f"http://{config.container.vllm_address}:{config.serving.port}/metrics"
    assert "federate" not in url


def test_a_configured_metrics_url_wins_and_remote_targets_have_none_by_default() -> None:
    configured = build_stack_config({"hardware": "local", "smoke": {"metricsUrl": "http://m:1/metrics"}})
    assert metrics_url_for(configured) == "http://m:1/metrics"
    from tests.conftest import stack_config

    raw = {key.removeprefix("glm:"): value for key, value in stack_config("a800").items()}
    assert metrics_url_for(build_stack_config(raw)) is None
