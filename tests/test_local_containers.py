"""The local stack's containers, as the program renders them, run on the real Docker engine.

The Pulumi Docker provider cannot be built on this workplace (docs/engine-build.md), so this test
takes what the program registers under mocks — images, network, volume, and each container's
entrypoint, argv, env, mounts, uploads, ports, hosts and options — and hands exactly that to the
`docker` CLI. Then the smoke gate runs against the result through the real Nginx front, with the
KV pool read from vLLM's own /metrics on the private network (the probe reads the real Prometheus).
What it proves: the rendered configuration works in the real images; what it does not: the
provider's own behaviour (diffs, replacement order).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from components.docker import prometheus_release, rotation
from components.docker.nginx_reload import apply_release
from components.gate import GateFailure, run_gate
from components.render.status_page import render_page
from tests.conftest import PROJECT, TEST_API_KEYS, Deployment, Registered, run_program, unwrap
from tests.engine import free_port, free_subnet

LOCAL_IMAGES = [
    "glm53-local/python:bookworm",
    "glm53-local/nginx:bookworm",
    "glm53-local/prometheus:bookworm",
]
WEIGHTS = Path("/var/lib/glm53-local/models/GLM-5.3-Flash-sim")


def _docker_missing() -> str | None:
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        return "no Docker engine answers (start dockerd)"
    for image in LOCAL_IMAGES:
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
            return f"local image {image} is missing (offline/images.sh makes it)"
    if not (WEIGHTS / "config.json").exists():
        return f"the local weights fixture {WEIGHTS} is missing (make test writes it)"
    return None


pytestmark = pytest.mark.skipif(_docker_missing() is not None, reason=str(_docker_missing()))


def docker(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, input=stdin, timeout=600)
    if result.returncode:
        raise AssertionError(f"docker {' '.join(args[:3])} … failed: {result.stderr[-2000:]}")
    return result.stdout.strip()


def run_args(container: dict[str, Any], network: str, image_ids: dict[str, str]) -> list[str]:
    """`docker create` arguments for a registered docker.Container's inputs."""
    args = ["create", "--name", container["name"]]
    entrypoint = container.get("entrypoints") or []
    if entrypoint:
        args += ["--entrypoint", entrypoint[0]]
    for env in container.get("envs") or []:
        args += ["-e", env]
    for mount in container.get("mounts") or []:
        spec = f"type={mount['type']},source={mount['source']},target={mount['target']}"
        args += ["--mount", spec + (",readonly" if mount.get("readOnly") else "")]
    for port in container.get("ports") or []:
        args += ["-p", f"{port['ip']}:{int(port['external'])}:{int(port['internal'])}"]
    for host in container.get("hosts") or []:
        args += ["--add-host", f"{host['host']}:{host['ip']}"]
    if container.get("shmSize"):
        args += ["--shm-size", f"{int(container['shmSize'])}m"]
    for net in container.get("networksAdvanced") or []:
        args += ["--network", network]
        for alias in net.get("aliases") or []:
            args += ["--network-alias", alias]
        if net.get("ipv4Address"):
            args += ["--ip", net["ipv4Address"]]
    for key, value in (container.get("logOpts") or {}).items():
        args += ["--log-opt", f"{key}={value}"]
    args += ["--log-driver", container.get("logDriver", "json-file"), "--restart", container["restart"]]
    health = container.get("healthcheck")
    if health:
        # The CLI takes a shell command; the provider passes the CMD form. Same probe.
        args += ["--health-cmd", " ".join(json.dumps(a) for a in health["tests"][1:])]
        args += ["--health-interval", "2s"]
    args.append(image_ids.get(container["image"], container["image"]))
    args += [*entrypoint[1:], *(container.get("command") or [])]
    return args


def start(container: Registered, network: str, image_ids: dict[str, str]) -> str:
    inputs = unwrap(container.inputs)
    docker(*run_args(inputs, network, image_ids))
    for upload in inputs.get("uploads") or []:
        # As the provider uploads: a tar holding the file under its whole path, unpacked at `/`
        # (Docker makes the folders it lacks, as for the status page's files).
        data = upload["content"].encode()
        info = tarfile.TarInfo(upload["file"].lstrip("/"))
        info.size, info.mode = len(data), int(upload.get("permissions", "0644"), 8)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.addfile(info, io.BytesIO(data))
        copied = subprocess.run(
            ["docker", "cp", "-", f"{inputs['name']}:/"],
            input=archive.getvalue(),
            capture_output=True,
            timeout=60,
        )
        assert copied.returncode == 0, copied.stderr.decode(errors="replace")
    docker("start", inputs["name"])
    return str(inputs["name"])


@pytest.fixture(scope="module")
def local_stack() -> Iterator[tuple[Deployment, dict[str, Any]]]:
    front_port, prometheus_port = free_port(), free_port()
    name = f"glm53-ct-{front_port}"
    deployment = run_program(
        "local",
        overrides={
            "glm:front": {
                "image": "glm53-local/nginx:bookworm",
                "port": front_port,
            },
            "glm:monitoring": {"image": "glm53-local/prometheus:bookworm", "port": prometheus_port},
            "glm:container": {"name": name, "networkSubnet": free_subnet()},
        },
    )
    for image in ("-image-build",):  # the simulator
        built = deployment.one("docker:index/image:Image", image).inputs
        build = built["build"]
        subprocess.run(
            ["docker", "build", "-q", "-t", built["imageName"], "-f", build["dockerfile"],
             *[a for k, v in build["args"].items() for a in ("--build-arg", f"{k}={v}")], build["context"]],
            cwd=PROJECT, check=True, capture_output=True, env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/bin:/bin:/usr/sbin"},
        )  # fmt: skip
    network = deployment.one("docker:index/network:Network").inputs
    volume = deployment.one("docker:index/volume:Volume", "-jit-cache").inputs
    containers = {c.name.rsplit("-", 1)[1]: c for c in deployment.of_type("docker:index/container:Container")}
    pulled = f"sha256:{'ab' * 32}"  # the mocks' RemoteImage id; here, the image each container names
    started: list[str] = []
    try:
        docker("network", "create", "--subnet", network["ipamConfigs"][0]["subnet"], network["name"])
        docker("volume", "create", volume["name"])
        started.append(start(containers["vllm"], network["name"], {}))
        started.append(start(containers["nginx"], network["name"], {pulled: "glm53-local/nginx:bookworm"}))
        # The front's config arrives as `pulumi up` delivers it: NginxReload's files, nginx -t, reload.
        apply_release(unwrap(deployment.one("pulumi-python:dynamic:Resource", "-front-config").inputs))
        # And the replica joins the front's rotation as its gate admits it once passed (here by
        # hand: this harness starts the containers without the engine), at the address it renders.
        replica = unwrap(deployment.one("pulumi-python:dynamic:Resource", "-replica-gate").inputs)
        rotation.admit(replica["front"], replica["host"], replica["address"])
        started.append(
            start(containers["prometheus"], network["name"], {pulled: "glm53-local/prometheus:bookworm"})
        )
        # Its files arrive as `pulumi up` delivers them: a release, promtool-checked, then loaded.
        prometheus_release.apply_release(
            unwrap(deployment.one("pulumi-python:dynamic:Resource", "-monitoring-files").inputs)
        )
        yield deployment, {"front_port": front_port, "prometheus_port": prometheus_port, "name": name}
    finally:
        for container in started:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)
        subprocess.run(["docker", "network", "rm", network["name"]], capture_output=True)
        subprocess.run(["docker", "volume", "rm", volume["name"]], capture_output=True)


def gate_params_of(deployment: Deployment) -> dict[str, Any]:
    gate = deployment.one("pulumi-python:dynamic:Resource", "-smoke-gate").inputs
    return {k: unwrap(v) for k, v in gate.items() if k not in ("api_key", "__provider")}


def test_the_gate_passes_through_the_real_front(local_stack: tuple[Deployment, dict[str, Any]]) -> None:
    deployment, _ = local_stack
    params = gate_params_of(deployment)
    progress: list[str] = []
    gate = deployment.one("pulumi-python:dynamic:Resource", "-smoke-gate").inputs
    results = run_gate(params, TEST_API_KEYS["ci"], progress.append, unwrap(gate["metrics_key"]))
    assert results["served_name"] == "glm-5.3-flash"
    assert results["kv_pool_tokens"] >= params["max_model_len"], "the KV pool came through the front"
    assert "kv_pool" not in results.get("steps_skipped", {})
    # The front's metrics route with the gate's own key, reached from this host: no Prometheus scrape.
    assert params["metrics_url"] == params["endpoint"].removesuffix("/v1") + "/metrics"
    assert results["latency_ms"]["kv_pool"] < 1000
    assert results["vllm_version"] == "0.33.0"


def test_the_front_refuses_a_wrong_key(local_stack: tuple[Deployment, dict[str, Any]]) -> None:
    deployment, _ = local_stack
    with pytest.raises(GateFailure, match="readiness"):
        run_gate({**gate_params_of(deployment), "smoke": {**gate_params_of(deployment)["smoke"], "deadline_seconds": 3}},
                 "sk-wrong-key-0000000000000000", lambda _: None)  # fmt: skip


def test_vllm_health_check_turns_healthy(local_stack: tuple[Deployment, dict[str, Any]]) -> None:
    _, ports = local_stack
    deadline = time.monotonic() + 60
    status = ""
    while time.monotonic() < deadline:
        status = docker("inspect", "-f", "{{.State.Health.Status}}", ports["name"])
        if status == "healthy":
            break
        time.sleep(1)
    assert status == "healthy"


def test_the_weights_are_mounted_read_only(local_stack: tuple[Deployment, dict[str, Any]]) -> None:
    _, ports = local_stack
    result = subprocess.run(
        ["docker", "exec", ports["name"], "python3", "-c", "open('/models/GLM-5.3-Flash-sim/x', 'w')"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "Read-only file system" in result.stderr


def test_the_probe_measures_through_the_real_front(
    local_stack: tuple[Deployment, dict[str, Any]], tmp_path: Path
) -> None:
    """The capacity probe, bounded, against the containers: front for requests, Prometheus for metrics."""
    _, ports = local_stack
    env = {**os.environ, "GLM_PROBE_KEY": TEST_API_KEYS["ci"]}
    metrics = f"http://127.0.0.1:{ports['prometheus_port']}/federate?match[]=vllm:cache_config_info"
    # Prometheus has vLLM's metrics only after its first scrape (interval 15 s): the gate no longer
    # waits for it (it reads vLLM itself), so wait here, bounded, before the probe reads them.
    deadline = time.monotonic() + 60
    while "vllm:cache_config_info{" not in httpx.get(metrics, timeout=5).text:
        assert time.monotonic() < deadline, "Prometheus never scraped vLLM"
        time.sleep(0.5)
    result = subprocess.run(
        [sys.executable, "-m", "capacity_probe", "--endpoint", f"http://127.0.0.1:{ports['front_port']}/v1",
         "--api-key-env", "GLM_PROBE_KEY", "--metrics-url", metrics, "--out", str(tmp_path),
         "--time-budget", "90", "--max-requests", "80", "--metrics-lag", "6", "--quiet"],
        cwd=PROJECT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr[-2000:]
    report = json.loads((tmp_path / "probe-result.json").read_text())
    # The simulator's default pool (4 x max_model_len), read through the real Prometheus.
    assert report["kv_pool"]["tokens"] == 4 * 32768
    assert (tmp_path / "probe-report.md").exists()
    assert TEST_API_KEYS["ci"] not in (tmp_path / "probe-report.md").read_text() + result.stderr


def test_a_rule_change_reloads_prometheus_in_place_and_a_refused_one_changes_nothing(
    local_stack: tuple[Deployment, dict[str, Any]],
) -> None:
    """Issue 47, 4: Prometheus' files are a release (components/docker/prometheus_release.py). A rule
    change is loaded by the running Prometheus (its rules API says the new threshold) without a new
    container; a release promtool refuses is never current, and the loaded rules stay."""
    deployment, ports = local_stack
    release = unwrap(deployment.one("pulumi-python:dynamic:Resource", "-monitoring-files").inputs)
    container = f"{ports['name']}-prometheus"
    started = docker("inspect", "-f", "{{.Id}} {{.State.StartedAt}}", container)

    def kv_rule() -> dict[str, Any]:
        rules = httpx.get(f"http://127.0.0.1:{ports['prometheus_port']}/api/v1/rules", timeout=10).json()
        [rule] = [
            r for g in rules["data"]["groups"] for r in g["rules"] if r["name"] == "VllmKvCacheNearlyFull"
        ]
        return rule

    assert kv_rule()["query"].endswith("> 0.9")  # glm:monitoring.thresholds.kvCacheUsage's default
    rules = release["contents"]["rules.yml"]
    assert rules.count(" > 0.9\n") == 1
    lowered = {
        **release,
        "contents": {**release["contents"], "rules.yml": rules.replace(" > 0.9\n", " > 0.85\n")},
    }
    said = prometheus_release.apply_release(lowered)
    assert said.startswith("Prometheus release ") and said.endswith(" is live"), said
    assert kv_rule()["query"].endswith("> 0.85")
    assert docker("inspect", "-f", "{{.Id}} {{.State.StartedAt}}", container) == started
    broken = {**release, "contents": {**release["contents"], "rules.yml": rules.replace("expr:", "exp:", 1)}}
    with pytest.raises(RuntimeError, match="promtool refused the new Prometheus config") as refused:
        prometheus_release.apply_release(broken)
    assert "rules.yml" in str(refused.value)  # promtool's own words name the file
    assert kv_rule()["query"].endswith("> 0.85")
    live = docker(
        "exec",
        container,
        "sh",
        "-c",
        "ls /etc/prometheus/glm53/releases; readlink /etc/prometheus/glm53/current",
    )
    assert live.split() == [prometheus_release.release_id(lowered["contents"], lowered["secrets_digest"]),
                            f"releases/{prometheus_release.release_id(lowered['contents'], lowered['secrets_digest'])}"]  # fmt: skip
    prometheus_release.apply_release(release)  # as the stack had it, for the tests that follow
    assert kv_rule()["query"].endswith("> 0.9")


def test_the_status_page_reads_the_stacks_prometheus_through_the_front(
    local_stack: tuple[Deployment, dict[str, Any]],
) -> None:
    """The program's Prometheus container (its flags, the page's files) behind the program's front
    release: the page for anyone, a panel's query for the gate's metrics key, once Prometheus has
    scraped vLLM (interval 15 s)."""
    deployment, ports = local_stack
    base = f"http://127.0.0.1:{ports['front_port']}"
    page = httpx.get(f"{base}/status/", timeout=10)
    assert page.status_code == 200 and page.text == render_page()
    gate = deployment.one("pulumi-python:dynamic:Resource", "-smoke-gate").inputs
    key = {"Authorization": f"Bearer {unwrap(gate['metrics_key'])}"}
    assert httpx.get(f"{base}/status/query/kv_cache", timeout=10).status_code == 401
    deadline = time.monotonic() + 60
    while not (answer := httpx.get(f"{base}/status/query/kv_cache", headers=key, timeout=10).json())["data"][
        "result"
    ]:
        assert time.monotonic() < deadline, answer
        time.sleep(1)
    assert answer["data"]["resultType"] == "matrix"
