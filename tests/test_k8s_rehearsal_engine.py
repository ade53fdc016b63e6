"""A production profile rehearsed on the one-node Kubernetes, on the real engine: the a800 stack
file with ``glm:rehearsal`` on and the Kubernetes target (tests/k8s_cluster.py). Skipped, with
the reason, where the engine, root or the cluster cache is missing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.engine import PulumiProject
from tests.host_scripts import weights
from tests.k8s_cluster import (
    API_KEY,
    REPORT,
    base_config,
    kubectl,
    set_stack_config,
    unavailable,
)

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

REHEARSAL_NAMESPACE = "glm53-rehearsal"
REHEARSAL_PORTS = (30082, 30083)


def test_a800_rehearses_on_the_cluster_without_cards(
    k8s_cluster: Path, k8s_folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The a800 stack file with ``glm:rehearsal`` on: its argv and env on the simulator image,
    imported into the node's containerd, no card requested; the gate passes through its front."""
    project = PulumiProject.copy_of_repo(tmp_path_factory.mktemp("k8s-rehearsal"))
    project.run("stack", "init", "a800")
    project.run("config", "set", "--secret", "--path", "glm:apiKeys.e2e", API_KEY, "-s", "a800")
    config = base_config(
        k8s_cluster, {**k8s_folders, "cache": k8s_folders["cache"].with_name("rehearsal-cache")}
    )
    k8s = config["glm:target"]["kubernetes"]
    k8s.update(
        namespace=REHEARSAL_NAMESPACE,
        frontNodePort=REHEARSAL_PORTS[0],
        prometheusNodePort=REHEARSAL_PORTS[1],
        frontUrl=f"http://127.0.0.1:{REHEARSAL_PORTS[0]}/v1",
    )
    config.pop("glm:serving")  # the fault switch is the local lifecycle's
    # The pod's preflight checks the profile's weights where the pod mounts them, as a Docker
    # rehearsal's does on its stand-in host: the a800 folder (sparse: 306 GiB on paper).
    weights(k8s_folders["models"])
    # Above the a800 engine's known start (371.5 s): config refuses a shorter gate deadline.
    config["glm:smoke"] = {"deadlineSeconds": 400}
    set_stack_config(project, config, stack="a800")
    set_stack_config(
        project,
        {
            "glm:rehearsal": {"enabled": True, "baseImage": "glm53-local/python:bookworm"},
            "glm:front": {"image": "glm53-local/nginx:bookworm"},
            "glm:monitoring": {"image": "glm53-local/prometheus:bookworm"},
            "glm:semanticProbe": {"baseImage": "glm53-local/python:bookworm"},
        },
        stack="a800",
    )
    try:
        started = time.monotonic()
        out = project.run("up", "--yes", "--skip-preview", "-s", "a800", timeout=900)
        REPORT["a800_rehearsal_up_s"] = round(time.monotonic() - started, 1)
        assert "REHEARSAL of a800" in out
        outputs = project.outputs("a800")
        assert "arithmetic" in outputs["smoke"]["steps_run"]
        listed = json.loads(
            kubectl(
                k8s_cluster,
                "get",
                "pods",
                "-n",
                REHEARSAL_NAMESPACE,
                "-l",
                "app.kubernetes.io/name=glm53-vllm",
                "-o",
                "json",
            )
        )["items"]
        assert len(listed) == 2
        for pod in listed:
            vllm = pod["spec"]["containers"][0]
            assert "--tensor-parallel-size=8" in vllm["args"]  # the a800 seed's TP 8, on the simulator
            assert not (vllm.get("resources") or {}).get("limits"), "a rehearsal must not request cards"
            assert vllm["image"].startswith("glm53-vllm-sim:")
        project.run("preview", "--expect-no-changes", "-s", "a800", timeout=300)
    finally:
        project.run("destroy", "--yes", "-s", "a800", check=False, timeout=600)
