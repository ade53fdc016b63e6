"""Rehearsal end to end: each hardware stack deployed for real to the stand-in GPU host over SSH.

For a800, ascend and rtx5090 with ``glm:rehearsal`` on: `pulumi up` (preflight over SSH against the
fake accelerators, the simulator built on the host, the front on the profile's port, Prometheus,
the gate across the network) → `preview --expect-no-changes` → one vLLM flag changed, and preview
plans only the serving container and the gate → `destroy`, which leaves the weights and the JIT
cache volume on the host. Skipped, with the reason, without the engine or network namespaces.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from tests.engine import PulumiProject, engine_missing
from tests.standin_host import StandinHost, unavailable_reason

pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))

API_KEY = "sk-rehearsal-0123456789abcdef0123"
LOCAL_IMAGES = {
    "base": "glm53-local/python:bookworm",
    "front": "glm53-local/nginx:bookworm",
    "monitoring": "glm53-local/prometheus:bookworm",
}
PROMETHEUS_PORT = 9090
# (stack, the front's port from the seed, served name, container name, the flag changed in step 3)
PROFILES = {
    "a800": (8008, "zai-org/GLM-5.3-Flash", "glm53-flash-a800-8008", ("maxNumSeqs", "64")),
    "ascend": (8077, "glm5.3-flash", "vllm-ascend-glm5.3", ("maxNumSeqs", "32")),
    "rtx5090": (8000, "glm-5.3-flash", "glm53-flash", ("maxNumSeqs", "8")),
}
WEIGHTS_DIR = {"a800": "GLM-5.3-Flash", "ascend": "GLM-5.3-Flash-w8a8", "rtx5090": "GLM-5.3-Flash-NVFP4"}
SITE_DIR = "site"
"""rtx5090's second mount (/site) on the stand-in host: not a driver mount, so a rehearsal keeps it."""


@pytest.fixture(scope="module")
def host() -> Iterator[StandinHost]:
    """One stand-in host for the module, with the local images loaded onto its engine."""
    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    for image in LOCAL_IMAGES.values():
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
            pytest.skip(f"local image {image} is missing (offline/images.sh makes it)")
    with StandinHost.create() as standin:
        for image in LOCAL_IMAGES.values():
            standin.load_image(image)
        (standin.root / SITE_DIR).mkdir(mode=0o755)
        yield standin


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> PulumiProject:
    return PulumiProject.copy_of_repo(tmp_path_factory.mktemp("rehearsal") / "glm")


def rehearsal_config(host: StandinHost, stack: str, **extra: str) -> dict[str, str]:
    """The stack file's own config plus what a rehearsal on this host changes: where (host, key,
    weights), which images are available offline, and where the gate reads vLLM's metrics."""
    config = {
        "glm:rehearsal.enabled": "true",
        "glm:rehearsal.baseImage": LOCAL_IMAGES["base"],
        "glm:target.hosts[0].dockerHost": host.docker_host,
        "glm:target.hosts[0].hostKey": host.host_key,
        "glm:target.hosts[0].identityFile": str(host.private_key_path),
        "glm:model.hostDir": str(host.models_dir),
        "glm:front.image": LOCAL_IMAGES["front"],
        "glm:monitoring.image": LOCAL_IMAGES["monitoring"],
        # Prometheus on the host's address (not loopback), so the gate reads the KV pool through
        # its /federate from this machine, across the network.
        "glm:monitoring.bindAddress": host.address,
        "glm:monitoring.scrapeInterval": "2s",
        "glm:smoke.metricsUrl": metrics_url(host),
    }
    if stack == "rtx5090":
        config["glm:container.mounts[0].source"] = str(host.root / SITE_DIR)
    return {**config, **extra}


def metrics_url(host: StandinHost, port: int = PROMETHEUS_PORT) -> str:
    return f"http://{host.address}:{port}/federate?match[]=vllm:cache_config_info"


def inspect(host: StandinHost, name: str) -> dict[str, Any]:
    result = host.docker("inspect", name)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]  # type: ignore[no-any-return]


def assert_rehearsal_container(host: StandinHost, name: str, stack: str, outputs: dict[str, Any]) -> None:
    """The profile's argv on the simulator image, with no accelerator request of any kind."""
    container = inspect(host, name)
    config, hostconfig = container["Config"], container["HostConfig"]
    assert config["Image"].startswith("glm53-vllm-sim:")
    assert config["Entrypoint"] == ["vllm", "serve"]
    # The profile's own argv, as production renders it (the vllmCommandLine output).
    assert ["vllm", "serve", *config["Cmd"]] == shlex.split(outputs["vllmCommandLine"])
    assert not hostconfig.get("DeviceRequests"), "a rehearsal must not request GPUs"
    assert not hostconfig.get("Devices"), "a rehearsal must not map accelerator devices"
    sources = [m["Source"] for m in container["Mounts"] if m["Type"] == "bind"]
    assert not [s for s in sources if s.startswith(("/usr/local/Ascend", "/usr/local/sbin", "/etc/hccn"))]
    assert str(host.models_dir) in sources
    if stack == "rtx5090":
        assert str(host.root / SITE_DIR) in sources


@pytest.mark.parametrize("stack", list(PROFILES))
def test_rehearsal_lifecycle_on_the_standin_host(
    project: PulumiProject, host: StandinHost, stack: str
) -> None:
    front_port, served_name, container, (flag, value) = PROFILES[stack]
    project.init_stack(stack, config=rehearsal_config(host, stack), secrets={"glm:apiKeys.e2e": API_KEY})
    try:
        out = project.run("up", "--yes", "--skip-preview", "-s", stack, label=f"{stack} up")
        assert f"REHEARSAL of {stack}" in out, "the rehearsal warning is missing from pulumi up"
        assert API_KEY not in out
        outputs = project.outputs(stack)
        assert outputs["endpoint"] == f"http://{host.address}:{front_port}/v1"
        assert outputs["rehearsal"]["hardware"] == stack
        smoke = outputs["smoke"]
        assert smoke["served_name"] == served_name
        assert smoke["steps_skipped"] == {}, smoke["steps_skipped"]
        assert smoke["kv_pool_tokens"] >= smoke["max_model_len"]
        assert_rehearsal_container(host, container, stack, outputs)

        # A client on this machine, across the veth "network", through the front on the seed's port.
        client = OpenAI(base_url=outputs["endpoint"], api_key=API_KEY, timeout=30)
        reply = client.chat.completions.create(
            model=served_name, messages=[{"role": "user", "content": "What is 13×17?"}]
        )
        assert reply.choices[0].message.content.strip() == "221"

        project.run("preview", "--expect-no-changes", "-s", stack, label=f"{stack} preview (no changes)")

        project.run("config", "set", "--path", f"glm:serving.{flag}", value, "-s", stack)
        steps = project.preview_steps(stack)
        changed = sorted({s["urn"].rsplit("::", 1)[1] for s in steps})
        assert changed == [f"{stack}-serving-vllm", f"{stack}-smoke-gate"], steps
    finally:
        project.run("destroy", "--yes", "-s", stack, label=f"{stack} destroy", check=False)
    volume = host.docker("volume", "inspect", f"{container}-jit-cache")
    assert volume.returncode == 0, "destroy removed the JIT cache volume"
    left = host.docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert not [n for n in left if n.startswith(container)], left
    weights = host.models_dir / WEIGHTS_DIR[stack]
    assert (weights / "config.json").exists(), "destroy touched the weights"
    print(f"rehearsal {stack} timings (s):", {k: round(v, 1) for k, v in project.timings.items()})
