"""Helpers for the tests of the shell the program runs on the host (preflight, weights check,
download): a weights folder, fake tools on PATH, a config whose weights are in ``tmp_path``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from components.config import StackConfig, build_stack_config
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


def a800(tmp_path: Path, **overrides: object) -> StackConfig:
    return build_stack_config(
        {
            "hardware": "a800",
            "target": HOST,
            "model": {"hostDir": str(tmp_path)},
            "front": {"allowPlainHttp": True},
            **overrides,
        }
    )


def preflight_of(config: StackConfig) -> str:
    """The preflight script of ``config``'s hosts: the slices deployment.py gives ``Preflight``."""
    return preflight_script(
        config.preflight, config.model, config.facts.accelerator, config.container.accelerators
    )
