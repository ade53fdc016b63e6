"""``python -m components.gate``: the same checks from a command line, without Pulumi."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import PROJECT
from tests.gate.cli_rig import gate_cli
from tests.gate.support import needs_nginx


def test_the_checks_import_no_pulumi() -> None:
    code = "import sys, components.gate.__main__; print(sorted(m for m in sys.modules if 'pulumi' in m))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


@needs_nginx
def test_a_passing_gate_prints_each_step_and_exits_0(sims, front) -> None:
    sim = sims()
    done = gate_cli(
        "--endpoint", front(sim), "--metrics-url", f"{sim.url}/metrics", "--served-name", "glm-5.3-flash",
        "--max-model-len", "32768",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for step in ("readiness", "models", "arithmetic", "tool_call", "kv_pool", "front_auth", "streaming"):
        assert f"[smoke-gate] {step}: ok in" in done.stderr
    results = json.loads(done.stdout)
    assert results["kv_pool_tokens"] == 4 * 32768
    assert results["vllm_version"] == "0.33.0"


def test_without_served_name_and_length_it_takes_what_is_listed(sims) -> None:
    sim = sims()
    done = gate_cli("--endpoint", f"{sim.url}/v1", "--steps", "models,arithmetic,kv_pool",
                    "--metrics-url", f"{sim.url}/metrics")  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert (results["served_name"], results["max_model_len"]) == ("glm-5.3-flash", 32768)


def test_a_failing_step_exits_1_naming_it(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="wrong-answer")
    done = gate_cli("--endpoint", f"{sim.url}/v1", "--steps", "models,arithmetic")
    assert done.returncode == 1
    assert "smoke gate failed at step 'arithmetic'" in done.stderr
    assert "got '222'" in done.stderr
    assert done.stdout == ""


def test_a_wrong_served_name_fails_models(sims) -> None:
    sim = sims()
    done = gate_cli("--endpoint", f"{sim.url}/v1", "--steps", "models", "--served-name", "other")
    assert done.returncode == 1
    assert "not the served name 'other'" in done.stderr


def test_usage_errors_exit_2() -> None:
    unset = gate_cli("--endpoint", "http://127.0.0.1:9/v1", key=None)
    assert unset.returncode == 2 and "$GATE_TEST_KEY is empty or unset" in unset.stderr
    bad_step = gate_cli("--endpoint", "http://127.0.0.1:9/v1", "--steps", "models,vibes")
    assert bad_step.returncode == 2 and "unknown steps ['vibes']" in bad_step.stderr
    # A failure naming one target's log and another's list would send the user astray.
    half = gate_cli("--endpoint", "http://127.0.0.1:9/v1", "--look-at-logs", "kubectl logs deploy/x")
    assert half.returncode == 2
    assert "give all of --look-at-logs, --look-at-running, --look-at-inspect, or none" in half.stderr
