"""ModelVolume: the weights check and download run for real with bash; the JIT cache volume under mocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.config import build_stack_config
from components.docker.model_volume import download_script, verify_script
from tests.conftest import Deployment, profile_stacks
from tests.host_scripts import HOST, a800, fake_tool, run, weights


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
    # With a fake hub CLI that writes nothing, the verification fails the download step.
    fake_tool(tmp_path / "bin", "modelscope", 'printf "%s\\n" "$@"')
    result = run(script, tmp_path / "bin")
    assert result.stdout.splitlines() == [
        "download",
        "--model=Eco-Tech/GLM-5.3-Flash-w8a8",
        "--revision=v1.0",
        f"--local_dir={tmp_path}/GLM-5.3-Flash-w8a8",
    ]
    assert result.returncode == 1 and "config.json is missing" in result.stderr


def test_hugging_face_download_reads_the_repo_only_as_a_positional(tmp_path: Path) -> None:
    """Issue 33 finding 6: option values are glued to their option and the repository follows
    ``--``, so huggingface-cli's parser (argparse) cannot take a value for an option."""
    config = a800(
        tmp_path, model={"hostDir": str(tmp_path), "revision": "v1.0", "download": {"enabled": True}}
    )
    fake_tool(tmp_path / "bin", "huggingface-cli", 'printf "%s\\n" "$@"')
    result = run(download_script(config.model), tmp_path / "bin")
    assert result.stdout.splitlines() == [
        "download",
        "--revision=v1.0",
        f"--local-dir={tmp_path}/GLM-5.3-Flash",
        "--",
        "zai-org/GLM-5.3-Flash",
    ]


@pytest.mark.parametrize("stack", profile_stacks())
def test_jit_cache_volume_survives_destroy(deployed: dict[str, Deployment], stack: str) -> None:
    volume = deployed[stack].one("docker:index/volume:Volume", "-jit-cache")
    assert volume.inputs["name"].endswith("-jit-cache")
    assert deployed[stack].options[volume.name].retain_on_delete is True
    assert volume.inputs["labels"] == [{"label": "glm53.role", "value": "jit-cache"}]
