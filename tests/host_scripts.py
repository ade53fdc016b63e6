"""Helpers for the tests of the shell the program runs on the host (preflight, weights check,
download): a weights folder, fake tools on PATH, a config whose weights are in ``tmp_path``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from components.config import StackConfig, build_stack_config
from components.docker.preflight import preflight_script
from components.hardware import HardwareFacts
from tests.conftest import TEST_HOST_KEY
from tests.weights_folder import write_weights

HOST = {
    "hosts": [
        {"name": "gpu01", "dockerHost": "ssh://deploy@gpu01.example.internal", "hostKey": TEST_HOST_KEY}
    ]
}


def weights(root: Path, shards: int = 2, missing: int = 0, gib: float = 306.0, **kwargs: Any) -> Path:
    """The a800 profile's weights folder under ``root``: ``gib`` GiB (its ``weightsGib``), sparse."""
    return write_weights(root / "GLM-5.3-Flash", gib, shards, missing, **kwargs)


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


def preflight_of(config: StackConfig, facts: HardwareFacts | None = None, profile: str | None = None) -> str:
    """The preflight script of ``config``'s hosts: the slices deployment.py gives ``Preflight``
    (``facts``/``profile`` stand in for the profile's, for a card no profile is for)."""
    return preflight_script(
        config.preflight,
        config.model,
        facts or config.facts,
        profile or config.hardware,
        config.container.accelerators,
        config.serving.gpu_memory_utilization,
        config.target.host,
    )
