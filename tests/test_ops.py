"""Day-2 operations (ops/__main__.py): what each command renders, and on the real engine what it does."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from components.config import ConfigError, build_stack_config, parse_overrides
from components.serving.spec import render_argv, render_env
from ops.__main__ import debug_run, mark
from tests.conftest import TEST_HOST_KEY
from tests.engine import PROJECT, PulumiProject, engine_missing

HOST = {"hosts": [{"name": "gpu01", "dockerHost": "ssh://deploy@gpu01", "hostKey": TEST_HOST_KEY}]}


def test_debug_run_is_the_serving_container_in_the_foreground_on_another_port() -> None:
    config = build_stack_config({"hardware": "ascend", "target": HOST, "front": {"allowPlainHttp": True}})
    args = shlex.split(debug_run(config, "quay.io/ascend/vllm-ascend:glm-5.3-flash", render_argv(config)))
    assert args[:4] == ["docker", "run", "--rm", "-it"]
    assert args[args.index("-p") + 1] == "127.0.0.1:8007:8007"
    serve = args.index("serve")
    assert args[serve - 1] == "quay.io/ascend/vllm-ascend:glm-5.3-flash"
    want = [a if not a.startswith("--port=") else "--port=8007" for a in render_argv(config)]
    assert args[serve + 1 :] == want
    envs = [args[i + 1] for i, a in enumerate(args) if a == "-e"]
    assert envs == [f"{k}={v}" for k, v in sorted(render_env(config).items())]
    devices = [args[i + 1] for i, a in enumerate(args) if a == "--device"]
    assert "/dev/davinci7" in devices and "/dev/davinci_manager" in devices
    volumes = [args[i + 1] for i, a in enumerate(args) if a == "-v"]
    assert f"{config.model.host_dir}:{config.model.mount_path}:ro" in volumes
    assert "/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro" in volumes
    assert args[args.index("--shm-size") + 1] == "500g"


def test_debug_run_on_nvidia_asks_for_the_gpus() -> None:
    config = build_stack_config({"hardware": "rtx5090", "target": HOST, "front": {"allowPlainHttp": True}})
    args = shlex.split(debug_run(config, "vllm/vllm-openai:nightly-385dce36b", render_argv(config)))
    assert args[args.index("--gpus") + 1] == "all"
    assert "VLLM_ENGINE_READY_TIMEOUT_S=3600" in args


def test_debug_run_of_a_rehearsal_is_the_rehearsed_container() -> None:
    """No accelerator on a rehearsal's host: neither --gpus nor the driver mounts, as deployed."""
    for hardware in ("rtx5090", "ascend"):
        config = build_stack_config(
            {"hardware": hardware, "rehearsal": True, "target": HOST, "front": {"allowPlainHttp": True}}
        )
        args = shlex.split(debug_run(config, "glm53-vllm-sim:x", render_argv(config)))
        assert "--gpus" not in args and "--device" not in args
        volumes = [args[i + 1] for i, a in enumerate(args) if a == "-v"]
        assert not [v for v in volumes if v.startswith("/usr/local/Ascend")]
        assert f"VLLM_SIM_VERSION={config.image.vllm_version}" in args


def test_the_seeds_start_up_milestones_are_marked() -> None:
    lines = [
        "INFO 05-12 12:58:36 Loading weights took 632.80 seconds",
        "INFO Model loading took 39.8 GiB and 36.1 seconds",
        "INFO init engine (profile, create kv cache, warmup model) took 331.2 seconds",
        "INFO Graph capturing finished in 66 secs, took 2.71 GiB",
        "INFO:     Application startup complete.",
    ]
    assert all(mark(line) == f"==> {line}" for line in lines)
    request = 'INFO:     127.0.0.1:46508 - "GET /health HTTP/1.1" 200 OK'
    assert mark(request) == request
    error = "vllm serve: error: unrecognized arguments: --enable-prefix-cacheing"
    assert mark(error) == f"==> {error}"


def test_overrides_for_one_run_go_through_the_models() -> None:
    config = build_stack_config(
        {"hardware": "local", **parse_overrides("serving.maxModelLen=16384 serving.enforceEager=true")}
    )
    assert "--max-model-len=16384" in render_argv(config) and "--enforce-eager" in render_argv(config)
    with pytest.raises(ConfigError, match=r"GLM_SET: 'maxModelLen' is not path=value"):
        parse_overrides("maxModelLen")
    with pytest.raises(ConfigError, match=r"glm:serving.maxModelLen"):
        build_stack_config({"hardware": "local", **parse_overrides("serving.maxModelLen=-5")})


def test_smoke_reads_the_gate_metrics_key_alone_not_the_decrypted_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26: `ops smoke` ran `stack export --show-secrets` (every key, the TLS key) for one key."""
    import ops.__main__ as ops

    calls = tmp_path / "calls"
    fake = tmp_path / "pulumi"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\necho sk-gate-metrics-5f0c2a9e7b1d4c8a\n')
    fake.chmod(0o755)
    monkeypatch.setattr(ops, "PULUMI", [str(fake)])
    assert ops.secret_output("a800", "gateMetricsKey") == "sk-gate-metrics-5f0c2a9e7b1d4c8a"
    assert calls.read_text().splitlines() == ["stack output gateMetricsKey --show-secrets -s a800"]


def test_smoke_on_a_tls_stack_verifies_the_certificates_name_against_the_stacks_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ops smoke` runs the gate as `pulumi up` does: the name from the certificate (the one public
    value it reads), the CA from glm:front.tlsCaCertificate."""
    import ops.__main__ as ops
    from tests.tls_certs import TestCa

    ca = TestCa.create(tmp_path / "ca", "GLM ops CA")
    cert, _ = ca.issue(["DNS:*.glm.test", "DNS:glm-front.test"])
    (tmp_path / "cert.pem").write_text(cert)
    calls = tmp_path / "calls"
    fake = tmp_path / "pulumi"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\ncat {tmp_path / "cert.pem"}\n')
    fake.chmod(0o755)
    monkeypatch.setattr(ops, "PULUMI", [str(fake)])
    config = build_stack_config(
        {"hardware": "local", "front": {"tls": True, "tlsCaCertificate": ca.certificate}}
    )
    args = ops._gate_tls(config, "local", tmp_path)
    assert args == ["--tls-name", "glm-front.test", "--tls-ca-file", str(tmp_path / "ca.crt")]
    assert (tmp_path / "ca.crt").read_text() == ca.certificate
    assert calls.read_text().splitlines() == ["config get glm:tlsCertificate -s local"]
    named = build_stack_config({"hardware": "local", "front": {"tls": True, "tlsName": "api.glm.test"}})
    assert ops._gate_tls(named, "local", tmp_path) == ["--tls-name", "api.glm.test"]  # the system's CAs
    assert len(calls.read_text().splitlines()) == 1  # a set name needs no certificate
    assert ops._gate_tls(build_stack_config({"hardware": "local"}), "local", tmp_path) == []


def test_the_gate_metrics_key_is_a_secret_stack_output() -> None:
    from tests.conftest import GATE_METRICS_TEST_KEY, is_secret, run_program

    outputs = run_program("a800").outputs
    assert outputs["gateMetricsKey"] == GATE_METRICS_TEST_KEY or is_secret(outputs["gateMetricsKey"])


def test_the_gate_sends_its_own_api_key_never_a_users_and_the_front_knows_it_by_name() -> None:
    """Issue 46: the gate (and `make smoke`) used the first user key by name, so a user was charged
    the gate's requests. Now every gate sends the stack's own key, which the front's key map holds
    under the name smoke-gate, and `make smoke` reads it from the gateApiKey output."""
    from tests.conftest import GATE_API_TEST_KEY, TEST_API_KEYS, is_secret, run_program, unwrap

    program = run_program("a800")
    gates = [r for r in program.resources if "api_key" in r.inputs]
    assert gates, "no gate registered"
    for gate in gates:
        assert unwrap(gate.inputs["api_key"]) == GATE_API_TEST_KEY, gate.name
        assert unwrap(gate.inputs["api_key"]) not in TEST_API_KEYS.values()
    assert program.outputs["gateApiKey"] == GATE_API_TEST_KEY or is_secret(program.outputs["gateApiKey"])


@pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))
def test_ops_on_a_deployed_local_stack(tmp_path: Path) -> None:
    """status, smoke, debug and restart against a real local stack (its own backend and ports)."""
    project = PulumiProject.copy_of_repo(tmp_path / "glm")
    name = project.init_local_stack(
        "glm53-ops", secrets={"glm:apiKeys.ops": "sk-ops-82761387e35bded68634"}
    ).container
    env = {**project.env, "GLM_PULUMI": "pulumi --non-interactive", "PYTHONPATH": str(PROJECT)}

    def ops(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ops", *args, "-s", "local"],
            cwd=project.root, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    try:
        project.run("up", "--yes", "--skip-preview", "-s", "local")
        status = ops("status")
        assert status.returncode == 0, status.stderr
        assert f"{name} on unix://" in status.stdout and "running since" in status.stdout
        assert "last gate    passed" in status.stdout

        smoke = ops("smoke")
        assert smoke.returncode == 0, smoke.stderr
        assert json.loads(smoke.stdout)["kv_pool_tokens"] > 0
        assert "sk-ops-82761387e35bded68634" not in smoke.stdout + smoke.stderr

        debug = ops("debug")
        assert (
            debug.stdout.startswith("docker run --rm -it")
            and project.outputs("local")["imageRef"] in debug.stdout
        )

        before = subprocess.run(
            ["docker", "inspect", "-f", "{{.Id}}", name], capture_output=True, text=True
        ).stdout
        restart = ops("restart")
        assert restart.returncode == 0, restart.stdout[-2000:] + restart.stderr[-2000:]
        after = subprocess.run(
            ["docker", "inspect", "-f", "{{.Id}}", name], capture_output=True, text=True
        ).stdout
        assert before != after, "restart did not re-create the serving container"
        assert "local-smoke-gate" in restart.stdout and "passed in" in restart.stdout + restart.stderr
        assert (
            subprocess.run(
                ["docker", "volume", "inspect", f"{name}-jit-cache"], capture_output=True
            ).returncode
            == 0
        )

        subprocess.run(["docker", "stop", name], capture_output=True)
        assert ops("status").returncode == 1, "status of a stopped container must fail"
        failed = ops("smoke")
        assert failed.returncode != 0, "the gate passed against a stopped model"
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", "local", check=False)
        subprocess.run(["docker", "volume", "rm", f"{name}-jit-cache"], capture_output=True)
        os.environ.pop("GLM_PULUMI", None)
