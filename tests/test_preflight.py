"""The preflight and weights checks, run for real with bash (fake nvidia-smi / npu-smi on PATH)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from components.config import build_stack_config
from components.model_volume import download_script, verify_script
from components.preflight import preflight_script
from tests.conftest import TEST_HOST_KEY

HOST = {
    "hosts": [
        {"name": "gpu01", "dockerHost": "ssh://deploy@gpu01.example.internal", "hostKey": TEST_HOST_KEY}
    ]
}


def weights(root: Path, shards: int = 2, missing: int = 0) -> Path:
    folder = root / "GLM-5.3-Flash"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    index = {"weight_map": {f"layer{i}.weight": name for i, name in enumerate(names)}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    for name in names[missing:]:
        (folder / name).write_bytes(b"\0")
    return folder


def fake_tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)


def run(script: str, bin_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=30)


def a800(tmp_path: Path, **overrides: object):
    return build_stack_config(
        {
            "hardware": "a800",
            "target": HOST,
            "model": {"hostDir": str(tmp_path)},
            "front": {"allowPlainHttp": True},
            **overrides,
        }
    )


NVIDIA_SMI = """case "$1" in
  -L) i=0; while [ $i -lt ${GPUS:-8} ]; do echo "GPU $i: NVIDIA A800-SXM4-80GB (UUID: GPU-$i)"; i=$((i+1)); done ;;
  *) echo 550.54.15 ;;
esac"""


def test_a800_preflight_passes_with_eight_gpus(tmp_path: Path) -> None:
    weights(tmp_path)
    fake_tool(tmp_path / "bin", "nvidia-smi", NVIDIA_SMI)
    result = run(preflight_script(a800(tmp_path)), tmp_path / "bin")
    assert result.returncode == 0, result.stderr
    assert "preflight: 8 GPUs, driver 550.54.15" in result.stdout
    assert "weights check:" in result.stdout


def test_a800_preflight_fails_with_four_gpus(tmp_path: Path) -> None:
    weights(tmp_path)
    fake_tool(tmp_path / "bin", "nvidia-smi", "GPUS=4\n" + NVIDIA_SMI)
    result = run(preflight_script(a800(tmp_path)), tmp_path / "bin")
    assert result.returncode == 1
    assert "found 4 NVIDIA GPUs, glm:container.accelerators lists 8" in result.stderr


def test_preflight_fails_without_nvidia_smi(tmp_path: Path) -> None:
    weights(tmp_path)
    script = preflight_script(a800(tmp_path))
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
    result = run(preflight_script(config), tmp_path / "bin")
    assert result.returncode == 1, "this machine has no /dev/davinci* devices"
    assert "found 0 /dev/davinci* NPUs, glm:container.accelerators lists 8" in result.stderr


def test_preflight_refuses_too_little_disk(tmp_path: Path) -> None:
    weights(tmp_path)
    fake_tool(tmp_path / "bin", "nvidia-smi", NVIDIA_SMI)
    config = a800(tmp_path, preflight={"minFreeDiskGib": 10**7})
    result = run(preflight_script(config), tmp_path / "bin")
    assert result.returncode == 1
    assert "the weights need 1e+07 GiB (glm:model.weightsGib / glm:preflight.minFreeDiskGib)" in result.stderr


def test_preflight_refuses_a_small_dev_shm(tmp_path: Path) -> None:
    weights(tmp_path)
    fake_tool(tmp_path / "bin", "nvidia-smi", NVIDIA_SMI)
    config = a800(tmp_path, preflight={"minShmGib": 10**6})
    result = run(preflight_script(config), tmp_path / "bin")
    assert result.returncode == 1
    assert "glm:preflight.minShmGib asks for 1e+06 GiB" in result.stderr


@pytest.mark.parametrize(("missing", "message"), [(1, "shards listed in the index are missing")])
def test_weights_check_finds_a_missing_shard(tmp_path: Path, missing: int, message: str) -> None:
    weights(tmp_path, shards=3, missing=missing)
    result = run(verify_script(a800(tmp_path).model))
    assert result.returncode == 1
    assert message in result.stderr and "model-00001-of-00003.safetensors" in result.stderr


def test_weights_check_finds_no_config(tmp_path: Path) -> None:
    result = run(verify_script(a800(tmp_path).model))
    assert result.returncode == 1
    assert "config.json is missing" in result.stderr


def test_download_uses_the_hub_cli_then_verifies(tmp_path: Path) -> None:
    config = build_stack_config(
        {
            "hardware": "ascend",
            "target": HOST,
            "front": {"allowPlainHttp": True},
            "model": {"hostDir": str(tmp_path), "revision": "v1.0", "download": {"enabled": True}},
        }
    )
    script = download_script(config.model)
    assert (
        f"modelscope download --model Eco-Tech/GLM-5.3-Flash-w8a8 --revision v1.0 --local_dir {tmp_path}/GLM-5.3-Flash-w8a8"
        in script
    )
    # With a fake hub CLI that writes nothing, the verification fails the download step.
    fake_tool(tmp_path / "bin", "modelscope", "exit 0")
    result = run(script, tmp_path / "bin")
    assert result.returncode == 1 and "config.json is missing" in result.stderr


def test_local_preflight_runs_on_this_machine() -> None:
    config = build_stack_config({"hardware": "local"})
    if not Path(config.model.host_path, "config.json").exists():
        pytest.skip(f"the local weights fixture {config.model.host_path} is missing (make test writes it)")
    result = run(preflight_script(config))
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
    script = preflight_script(config)
    assert "glm53-npu-smi.txt" not in script  # the output stays in a variable: no file in /tmp at all
    result = run(script, tmp_path / "bin")
    assert result.returncode == 1
    assert "npu-smi info failed: npu-smi: driver not loaded" in result.stderr
