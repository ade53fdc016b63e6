"""The preflight checks, run for real with bash (fake nvidia-smi / npu-smi on PATH), and where they
run (Pulumi mocks)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from components.config import build_stack_config
from tests.conftest import Deployment, unwrap
from tests.host_scripts import HOST, a800, fake_tool, preflight_of, run, weights

NVIDIA_SMI = """case "$1" in
  -L) i=0; while [ $i -lt ${GPUS:-8} ]; do echo "GPU $i: NVIDIA A800-SXM4-80GB (UUID: GPU-$i)"; i=$((i+1)); done ;;
  *) echo 550.54.15 ;;
esac"""


def test_a800_preflight_passes_with_eight_gpus(tmp_path: Path) -> None:
    weights(tmp_path)
    fake_tool(tmp_path / "bin", "nvidia-smi", NVIDIA_SMI)
    result = run(preflight_of(a800(tmp_path)), tmp_path / "bin")
    assert result.returncode == 0, result.stderr
    assert "preflight: 8 GPUs, driver 550.54.15" in result.stdout
    assert "weights check:" in result.stdout


def test_a800_preflight_fails_with_four_gpus(tmp_path: Path) -> None:
    weights(tmp_path)
    fake_tool(tmp_path / "bin", "nvidia-smi", "GPUS=4\n" + NVIDIA_SMI)
    result = run(preflight_of(a800(tmp_path)), tmp_path / "bin")
    assert result.returncode == 1
    assert "found 4 NVIDIA GPUs, glm:container.accelerators lists 8" in result.stderr


def test_preflight_fails_without_nvidia_smi(tmp_path: Path) -> None:
    weights(tmp_path)
    script = preflight_of(a800(tmp_path))
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert result.returncode == 1
    assert "nvidia-smi not found on the host" in result.stderr


def test_ascend_preflight_counts_davinci_devices(tmp_path: Path) -> None:
    weights(tmp_path)
    fake_tool(tmp_path / "bin", "npu-smi", "echo '| 910B3 | OK |'")
    config = build_stack_config(
        {
            "hardware": "ascend",
            "target": HOST,
            "front": {"allowPlainHttp": True},
            "model": {"hostDir": str(tmp_path), "directory": "GLM-5.3-Flash"},
        }
    )
    result = run(preflight_of(config), tmp_path / "bin")
    assert result.returncode == 1, "this machine has no /dev/davinci* devices"
    assert "found 0 /dev/davinci* NPUs, glm:container.accelerators lists 8" in result.stderr


def test_preflight_refuses_too_little_disk(tmp_path: Path) -> None:
    weights(tmp_path)
    fake_tool(tmp_path / "bin", "nvidia-smi", NVIDIA_SMI)
    config = a800(tmp_path, preflight={"minFreeDiskGib": 10**7})
    result = run(preflight_of(config), tmp_path / "bin")
    assert result.returncode == 1
    assert "the weights need 1e+07 GiB (glm:model.weightsGib / glm:preflight.minFreeDiskGib)" in result.stderr


def test_preflight_refuses_a_small_dev_shm(tmp_path: Path) -> None:
    weights(tmp_path)
    fake_tool(tmp_path / "bin", "nvidia-smi", NVIDIA_SMI)
    config = a800(tmp_path, preflight={"minShmGib": 10**6})
    result = run(preflight_of(config), tmp_path / "bin")
    assert result.returncode == 1
    assert "glm:preflight.minShmGib asks for 1e+06 GiB" in result.stderr


def test_local_preflight_runs_on_this_machine() -> None:
    config = build_stack_config({"hardware": "local"})
    if not Path(config.model.host_path, "config.json").exists():
        pytest.skip(f"the local weights fixture {config.model.host_path} is missing (make test writes it)")
    result = run(preflight_of(config))
    assert result.returncode == 0, result.stderr
    assert "weights check:" in result.stdout and "GPUs" not in result.stdout


def test_ascend_preflight_writes_no_fixed_tmp_file(tmp_path: Path) -> None:
    """A fixed /tmp path can be a planted symlink (another user's file gets overwritten): mktemp."""
    weights(tmp_path)
    fake_tool(tmp_path / "bin", "npu-smi", "echo 'npu-smi: driver not loaded' >&2; exit 3")
    config = build_stack_config(
        {
            "hardware": "ascend",
            "target": HOST,
            "front": {"allowPlainHttp": True},
            "model": {"hostDir": str(tmp_path), "directory": "GLM-5.3-Flash"},
        }
    )
    script = preflight_of(config)
    assert "glm53-npu-smi.txt" not in script  # the output stays in a variable: no file in /tmp at all
    result = run(script, tmp_path / "bin")
    assert result.returncode == 1
    assert "npu-smi info failed: npu-smi: driver not loaded" in result.stderr


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090"])
def test_preflight_runs_on_the_host_over_ssh(deployed: dict[str, Deployment], stack: str) -> None:
    check = deployed[stack].one("command:remote:Command", "-preflight-check").inputs
    assert unwrap(check["connection"])["user"] == "deploy"
    tool = "npu-smi" if stack == "ascend" else "nvidia-smi"
    assert tool in check["create"]
