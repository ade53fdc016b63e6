"""The GPU preflight on Kubernetes (issue 34): components/host/preflight.sh, the file the Docker hosts
run, as the serving pod's init container, on the node, with vLLM's cards, weights and /dev/shm;
rendered under mocks, and the rendered script run with bash against the real H200's nvidia-smi
outputs (tests/smi_fixtures.py) as a pod on node ``gpu-node-3`` would run it.

Expected values come from the seeds (the a800 box's 8 cards and GMU 0.95, the ascend box's NPUs
and its ``npu-smi`` mount), the Kubernetes API (the downward API's ``spec.nodeName``) and the H200
captures, not from the code under test.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components.render.preflight import PREFLIGHT_SH, pod_preflight_script
from tests.conftest import Deployment, run_program, unwrap
from tests.host_scripts import a800, weights
from tests.k8s_rendered import DEPLOYMENT, k8s_target, plain_http_accepted
from tests.smi_fixtures import H200_FACTS, eight_gpus, render_h200_pod_scripts, without_comments

NODE = "gpu-node-3"
WHERE = f"preflight on glm:target.kubernetes node {NODE}: "


def on_k8s(stack: str, **overrides: Any) -> Deployment:
    return run_program(stack, {"glm:target": k8s_target(), **plain_http_accepted(stack), **overrides})


def pod_spec(deployment: Deployment) -> dict[str, Any]:
    return unwrap(deployment.one(DEPLOYMENT, "-vllm").inputs)["spec"]["template"]["spec"]


def settings(script: str) -> dict[str, str]:
    """The ``NAME=value`` lines above the script's body, as bash reads them (quotes removed)."""
    head = script.split("check_weights() {", 1)[0].split("# shellcheck shell=bash", 1)[0]
    return {
        k: " ".join(shlex.split(v))
        for k, v in (line.split("=", 1) for line in head.splitlines() if "=" in line)
    }


@pytest.fixture(scope="module")
def a800_pod() -> dict[str, Any]:
    return pod_spec(on_k8s("a800"))


def test_the_preflight_runs_first_with_vllms_cards_weights_and_shm(a800_pod: dict[str, Any]) -> None:
    (preflight,) = a800_pod["initContainers"]
    vllm = next(c for c in a800_pod["containers"] if c["name"] == "vllm")
    assert preflight["name"] == "preflight" and preflight["image"] == vllm["image"]
    # The seed's box: 8 A800s, requested as the device plugin's resource, the same as vLLM's.
    assert preflight["resources"] == {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}
    assert preflight["resources"] == vllm["resources"]
    assert preflight["volumeMounts"] == vllm["volumeMounts"]
    assert {"name": "weights", "mountPath": "/models", "readOnly": True} in preflight["volumeMounts"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in preflight["volumeMounts"]
    assert preflight["env"] == [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "HOME", "value": "/home/glm53"},
        {"name": "USER", "value": "glm53"},
    ]
    assert preflight["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_the_pods_script_is_the_docker_hosts_file(a800_pod: dict[str, Any]) -> None:
    command = a800_pod["initContainers"][0]["command"]
    assert command[:2] == ["bash", "-c"]
    script = command[2]
    assert script.endswith(PREFLIGHT_SH.read_text())
    docker_host = run_program("a800").one("command:remote:Command", "-preflight-check").inputs["stdin"]
    assert unwrap(docker_host).endswith(PREFLIGHT_SH.read_text())
    assert settings(script) | {"HOST": "?"} == {
        "HOST": "?",
        "ACCELERATOR": "nvidia",
        "ACCELERATORS": "0 1 2 3 4 5 6 7",  # a container sees its own cards, from 0
        "GMU": "0.95",
        "CONTEXT_MIB": "528",
        "IDLE_HBM_MIB": "3500",
        "PROFILE": "a800",
        "CHIP": "A800",
        "CHIP_CC": "8.0",
        "IMAGE_CUDA": settings(script)["IMAGE_CUDA"],
        "DRIVER_MINIMUM": settings(script)["DRIVER_MINIMUM"],
        "HOST_DIR": "/models",  # the weights where the pod mounts them
        "NEED_DISK_GIB": "0",
        "MIN_SHM_GIB": "1",
        "CARDS_FROM": "device-plugin",
    }
    assert script.startswith('HOST="glm:target.kubernetes node ${NODE_NAME}"\n')


def test_ascend_pods_check_their_npus_with_the_mounted_npu_smi() -> None:
    spec = pod_spec(on_k8s("ascend"))
    (preflight,) = spec["initContainers"]
    assert preflight["resources"]["limits"] == {"huawei.com/Ascend910": "8"}
    assert any(m["mountPath"] == "/usr/local/sbin/npu-smi" for m in preflight["volumeMounts"])
    assert settings(preflight["command"][2])["ACCELERATOR"] == "ascend"


def test_without_glm_preflight_no_init_container() -> None:
    spec = pod_spec(on_k8s("a800", **{"glm:preflight": {"enabled": False}}))
    assert "initContainers" not in spec


def in_pod(script: str, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    """``bash -c script`` as the init container runs it: the node's name from the downward API."""
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NODE_NAME": NODE}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=30)


def test_a_refusal_names_the_node_the_key_and_the_fix(tmp_path: Path) -> None:
    """The a800 stack's pod, its weights mounted at ``tmp_path``, on a node of H200s (the real
    one's rows) where another process holds GPU 3."""
    weights(tmp_path)
    model = {"hostDir": str(tmp_path), "mountPath": str(tmp_path)}
    spec = pod_spec(on_k8s("a800", **{"glm:model": model}))
    eight_gpus(busy=(3,)).install(tmp_path / "bin")
    result = in_pod(spec["initContainers"][0]["command"][2], tmp_path / "bin")
    assert result.returncode == 1
    problems = result.stderr.splitlines()
    assert problems and all(p.startswith(WHERE) for p in problems), problems
    assert any(
        "GPU 3 (NVIDIA H200) has 81190 MiB free; glm:serving.gpuMemoryUtilization 0.95" in p for p in problems
    )
    assert any(
        p.endswith("Fix: set glm:hardware to this box's profile, or deploy to A800 hosts (glm:target.hosts)")
        for p in problems
    )


def test_an_idle_node_passes_without_a_docker_runtime(tmp_path: Path) -> None:
    """Pods get their cards from the device plugin: no Docker runtime, hook or CDI spec is asked
    for (a host's preflight refuses the same box: tests/test_preflight.py)."""
    weights(tmp_path)
    config = a800(tmp_path, model={"hostDir": str(tmp_path), "mountPath": str(tmp_path)})
    script = pod_preflight_script(config.preflight, config.model, H200_FACTS, "h200", "nvidia", 8, 0.95)
    eight_gpus().install(tmp_path / "bin")
    result = in_pod(script, tmp_path / "bin")
    assert result.returncode == 0, result.stderr
    assert "preflight: GPUs from the device plugin" in result.stdout
    assert "weights check:" in result.stdout


def test_a_small_pod_shm_names_the_containers_shm_size(tmp_path: Path) -> None:
    weights(tmp_path)
    config = a800(
        tmp_path, model={"hostDir": str(tmp_path), "mountPath": str(tmp_path)}, preflight={"minShmGib": 10**6}
    )
    script = pod_preflight_script(config.preflight, config.model, H200_FACTS, "h200", "nvidia", 8, 0.95)
    eight_gpus().install(tmp_path / "bin")
    result = in_pod(script, tmp_path / "bin")
    assert result.returncode == 1
    assert f"{WHERE}/dev/shm in the pod is" in result.stderr
    assert (
        "glm:preflight.minShmGib asks for 1000000 GiB. Fix: set glm:container.shmSize to 1000000g or more"
        in result.stderr
    )


def test_a_pod_given_fewer_cards_than_it_requests_names_the_device_plugin(tmp_path: Path) -> None:
    """Eight cards requested, one there (the real H200's row): in a pod the indices are the device
    plugin's, not the user's to list, so the fix is the node's plugin, not glm:container.accelerators'
    indices (the line the real H200 printed: tests/fixtures/nvidia-h200/pod-2026-12-03/)."""
    weights(tmp_path)
    config = a800(tmp_path, model={"hostDir": str(tmp_path), "mountPath": str(tmp_path)})
    script = pod_preflight_script(config.preflight, config.model, H200_FACTS, "h200", "nvidia", 8, 0.95)
    eight_gpus(count=1).install(tmp_path / "bin")
    result = in_pod(script, tmp_path / "bin")
    assert result.returncode == 1
    (line,) = [p for p in result.stderr.splitlines() if "GPU(s)" in p]
    assert line.startswith(f"{WHERE}the pod was given 1 GPU(s), indices 0, fewer than the 8 nvidia.com/gpu")
    assert line.endswith(
        "Fix: check the node's device plugin (kubectl describe node: nvidia.com/gpu allocatable)"
    )
    assert "list only indices" not in result.stderr


def test_a_pod_given_no_card_finds_no_nvidia_smi_and_names_the_device_plugin(tmp_path: Path) -> None:
    """NVIDIA's container toolkit mounts nvidia-smi into a container only with the cards the device
    plugin gave it: a pod given none has no nvidia-smi (how the real H200 run made one: PATH
    without it)."""
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an nvidia-smi on PATH")
    weights(tmp_path)
    config = a800(tmp_path, model={"hostDir": str(tmp_path), "mountPath": str(tmp_path)})
    script = pod_preflight_script(config.preflight, config.model, H200_FACTS, "h200", "nvidia", 1, 0.95)
    result = in_pod(script, tmp_path / "no-tools")
    assert result.returncode == 1
    assert f"{WHERE}nvidia-smi not found in the pod: it was given no NVIDIA GPU" in result.stderr
    assert "Fix: run the NVIDIA device plugin and container toolkit on the node" in result.stderr


H200_POD = Path(__file__).parent / "fixtures" / "nvidia-h200" / "pod-2026-12-03"
"""The pod's script run on the real H200 (2026-12-03): one card, eight asked for one, none."""


def _h200_blocks() -> dict[str, str]:
    text = (H200_POD / "pod-preflight-h200.txt").read_text()
    return {b.split("\n", 1)[0]: b.split("\n", 1)[1] for b in text.split("### ")[1:]}


def test_the_scripts_run_on_the_real_h200_are_what_pods_run_today() -> None:
    """The H200 profile's pod scripts as they ran there (weights mounted at /tmp/w): their commands,
    comments renamed since aside."""
    for name, script in render_h200_pod_scripts().items():
        assert without_comments(script) == without_comments((H200_POD / name).read_text()), name


def test_on_the_real_h200_a_pod_passes_with_its_card_and_is_refused_without_them() -> None:
    blocks = _h200_blocks()
    one = blocks["pod, h200 profile, 1 card (the device plugin's index 0)"]
    assert "preflight: GPUs from the device plugin" in one and "\nexit=0 " in one
    eight = blocks["pod, h200 profile, 8 cards asked, 1 present"]
    assert (
        "preflight on glm:target.kubernetes node h200-node: the pod was given 1 GPU(s), indices 0, "
        "fewer than the 8 nvidia.com/gpu" in eight
    ) and "\nexit=1 " in eight
    none = blocks["pod given no card: nvidia-smi absent, as the toolkit mounts it only with a card"]
    assert "node h200-node: nvidia-smi not found in the pod" in none and "\nexit=1 " in none
    # The host's run of the same file beside them keeps its own lines (no runtime on that host).
    host = blocks["host (Docker), h200 profile, GPU [0..7]"]
    assert "glm:container.accelerators lists GPU 1,2,3,4,5,6,7 but nvidia-smi shows 1 GPU(s)" in host
