"""The real program's configuration path on the REAL engine (no Docker provider needed for this).

Config loading and validation run before the program registers any resource, so they can be
exercised with the Go-built CLI and language host alone: the stack file's objects and Pulumi.yaml's
defaults as the engine hands them over, a bad stack refused with the message (no traceback, nothing
created), and the warnings printed by a valid stack before it reaches the Docker provider.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.engine import PulumiProject, core_engine_missing

pytestmark = pytest.mark.skipif(core_engine_missing() is not None, reason=str(core_engine_missing()))

KEY = "sk-engine-config-df6f703306634415"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> PulumiProject:
    return PulumiProject.copy_of_repo(tmp_path_factory.mktemp("engine-config") / "glm")


def test_bad_stack_fails_preview_with_the_message_and_creates_nothing(project: PulumiProject) -> None:
    project.init_stack(
        "a800", config={"glm:serving.tensorParallelSize": "4"}, secrets={"glm:apiKeys.ci": KEY}
    )
    refused = subprocess.run(
        ["pulumi", "preview", "-s", "a800", "--non-interactive"],
        cwd=project.root, env=project.env, capture_output=True, text=True,
    )  # fmt: skip
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0, out
    # The program's own message only: no "error: an unhandled error occurred: program exited with
    # non-zero exit code: 1" after it (__main__.py exits 32, the language host's "already said").
    assert "invalid stack configuration" in out and "an unhandled error occurred" not in out, out
    assert "glm:serving.tensorParallelSize=4" in out
    assert "76.5 GiB per card exceeds the budget 80 GiB HBM x gpuMemoryUtilization 0.95" in out
    assert "tensorParallelSize=4 but glm:container.accelerators lists 8" in out
    assert "Traceback" not in out, "a config error must read as a message, not a stack trace"
    state = json.loads(project.run("stack", "export", "-s", "a800"))
    resources = state.get("deployment", {}).get("resources") or []
    assert not [r for r in resources if not r["type"].startswith("pulumi:")], "nothing may be created"


def test_valid_stack_loads_its_config_through_the_engine(project: PulumiProject) -> None:
    """The Ascend stack passes validation; its advisories print before any resource is registered."""
    project.init_stack("ascend", config={}, secrets={"glm:apiKeys.ci": KEY})
    out = project.run("preview", "-s", "ascend", check=False)
    assert "VLLM_RPC_TIMEOUT does nothing on vLLM 0.23.0" in out
    assert "invalid stack configuration" not in out
    assert KEY not in out
