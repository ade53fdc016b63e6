"""A fresh clone of the repository's scripts and stack files, and the environment it runs in."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.engine import PROJECT

SCRIPT_FILES = [
    "Pulumi.yaml", "Pulumi.local.yaml", "Pulumi.local-k8s.yaml", "requirements.txt", "requirements-dev.txt",
]  # fmt: skip


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """The scripts and stack files of the repository, as a fresh clone has them; its own state."""
    root = tmp_path / "glm"
    shutil.copytree(PROJECT / "scripts", root / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "policy").mkdir()
    shutil.copy2(PROJECT / "policy" / "requirements.txt", root / "policy")
    for name in SCRIPT_FILES:
        shutil.copy2(PROJECT / name, root / name)
    (root / ".venv").symlink_to(PROJECT / ".venv")
    (tmp_path / "state").mkdir()
    return root


def clone_env(root: Path) -> dict[str, str]:
    env = {**os.environ, "GLM_STATE_DIR": str(root.parent / "state")}
    for var in ("PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE"):
        env.pop(var, None)
    return env
