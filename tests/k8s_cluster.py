"""A real one-node Kubernetes for the e2e tests: the cluster fixture, the stack's config on it,
and what the tests read back (scripts/k8s/cluster.sh; docs/scaling.md).

The fixtures ``k8s_cluster`` (started once per session, for every Kubernetes module that runs in it:
tests/conftest.py's ONE_CLUSTER puts them on one worker; stopped at the end, leaving nothing behind)
and ``k8s_folders`` reach every module through tests/conftest.py; each module keeps to its own
namespace and NodePorts. The figures of every module go into one report (``GLM_K8S_REPORT=path``).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from components.kubernetes.pod_security import RUN_AS_USER
from tests.engine import PROJECT, PulumiProject, engine_missing

CLUSTER = PROJECT / "scripts" / "k8s" / "cluster.sh"
BUILD = PROJECT / "scripts" / "k8s" / "build.sh"
NAMESPACE = "glm53-e2e"
NODE_PORT = 30080
PROMETHEUS_PORT = 30081
FRONT_URL = f"http://127.0.0.1:{NODE_PORT}/v1"
API_KEY = "sk-k8s-e2e-5b0f3c2a9d7e41f68c3b"
DEADLINE_SECONDS = 60
NODE_IP = "198.19.255.1"
"""The node's address inside its network namespace (scripts/k8s/cluster.sh ``NODE_IP``)."""
"""The gate's deadline, hence each pod's start allowance and the Deployment's progress deadline."""


def unavailable() -> str | None:
    if engine_missing():
        return engine_missing()
    if os.geteuid() != 0:
        return "the one-node cluster needs root (network and mount namespaces, cgroups)"
    checked = subprocess.run([str(BUILD), "--check"], capture_output=True, text=True)
    if checked.returncode != 0:
        lacking = checked.stderr.strip().rsplit(": ", 1)[-1].split()
        where = os.path.commonpath(lacking) if lacking else "the cache"
        return (
            f"the Kubernetes cache lacks {len(lacking)} parts under {where} "
            f"(make k8s-build, ~15 min once; scripts/k8s/build.sh --check names them)"
        )
    return None


REPORT: dict[str, Any] = {}


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> str:
    """kubectl in the e2e namespace (a later ``-n`` wins)."""
    bin_dir = subprocess.run([str(BUILD), "--check"], capture_output=True, text=True).stdout.strip()
    result = subprocess.run(
        [f"{bin_dir}/kubectl", "--kubeconfig", str(kubeconfig), "-n", NAMESPACE, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
    return result.stdout


@pytest.fixture(scope="session", name="k8s_cluster")
def cluster() -> Iterator[Path]:
    """One cluster for the session's Kubernetes modules: a start and a stop are ~40 s of CI each."""
    # The provider into Pulumi's plugin cache (a second or two when the cache is complete).
    subprocess.run([str(BUILD)], check=True, capture_output=True, timeout=120)
    started = time.monotonic()
    out = subprocess.run([str(CLUSTER), "start"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:  # what did start is stopped: a half-started node holds the ports
        stopped = subprocess.run([str(CLUSTER), "stop"], capture_output=True, text=True, timeout=300)
        raise AssertionError(f"{out.stderr}\n(stopped what had started: {stopped.stderr.strip()[-300:]})")
    REPORT["cluster_start_s"] = round(time.monotonic() - started, 1)
    # The roll's watch (components/kubernetes/roll.py) runs kubectl from PATH, as on an operator's machine.
    # kubectl alone (as scripts/k8s/up.sh does): the cache's whole bin folder on PATH makes the engine
    # warn of the Kubernetes provider there, in every later test of this worker too (CI, 2026-12-06:
    # the one-flag preview's transcript gained that warning).
    bin_dir = subprocess.run([str(BUILD), "--check"], capture_output=True, text=True).stdout.strip()
    only_kubectl = Path(tempfile.mkdtemp(prefix="glm53-kubectl-"))
    (only_kubectl / "kubectl").symlink_to(Path(bin_dir) / "kubectl")
    path = os.environ["PATH"]
    os.environ["PATH"] = f"{only_kubectl}{os.pathsep}{path}"
    try:
        yield Path(out.stdout.strip().splitlines()[-1])
    finally:
        os.environ["PATH"] = path
        started = time.monotonic()
        stopped = subprocess.run([str(CLUSTER), "stop"], capture_output=True, text=True, timeout=300)
        REPORT["cluster_stop_s"] = round(time.monotonic() - started, 1)
        _write_report()
        assert stopped.returncode == 0, stopped.stderr
        assert "nothing left" in stopped.stderr, stopped.stderr


def _write_report() -> None:
    print(json.dumps(REPORT, indent=2))
    if os.environ.get("GLM_K8S_REPORT"):
        Path(os.environ["GLM_K8S_REPORT"]).write_text(json.dumps(REPORT, indent=2))


@pytest.fixture(scope="module", name="k8s_folders")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The weights fixture (the simulator reads none) and the cache's hostPath, under /tmp: the
    node's own /var/lib, /run and /var/log are private to it."""
    root = tmp_path_factory.mktemp("k8s-host")
    weights = root / "models" / "GLM-5.3-Flash-sim"
    weights.mkdir(parents=True)
    (weights / "config.json").write_text('{"model_type": "glm-sim"}\n')
    (weights / "model.safetensors.index.json").write_text('{"weight_map": {}}\n')
    # The serving pods run as UID 10001 (components/kubernetes/pod_security.py): a hostPath cache
    # must be theirs, as docs/scaling.md tells an operator (fsGroup does not reach a hostPath).
    cache = root / "jit-cache"
    cache.mkdir()
    os.chown(cache, RUN_AS_USER, RUN_AS_USER)
    return {"models": root / "models", "weights": weights, "cache": cache}


def set_stack_config(project: PulumiProject, values: dict[str, Any], stack: str = "local") -> None:
    """glm:* keys merged into the copy's Pulumi.<stack>.yaml (a mapping's other keys stay)."""
    path = project.root / f"Pulumi.{stack}.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    config = data.setdefault("config", {})
    for key, value in values.items():
        config[key] = {**config[key], **value} if isinstance(config.get(key), dict) else value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def base_config(kubeconfig: Path, folders: dict[str, Path]) -> dict[str, Any]:
    return {
        "glm:target": {
            "hosts": [{"name": "localhost", "dockerHost": "unix:///var/run/docker.sock"}],
            "kubernetes": {
                "kubeconfig": str(kubeconfig),
                "namespace": NAMESPACE,
                "frontUrl": FRONT_URL,
                "frontNodePort": NODE_PORT,
                "prometheusNodePort": PROMETHEUS_PORT,
                "replicas": 2,
                "cacheHostPath": str(folders["cache"]),
                "imagePullPolicy": "Never",
                "imageLoadCommand": f"{CLUSTER} import {{{{image}}}}",
                "readinessPeriodSeconds": 5,
                "preStopSeconds": 5,
            },
        },
        "glm:model": {"hostDir": str(folders["models"])},
        "glm:smoke": {"deadlineSeconds": DEADLINE_SECONDS},
        # The simulator's runtime fault switch (PUT /sim/faults), for the ejection test.
        "glm:serving": {"extraEnv": {"VLLM_SIM_RUNTIME_FAULTS": "1"}},
        # The load loop's pace is far above the front's per-key default (its 429s are not the
        # subject here; tests/multihost.py does the same). The NodePorts are public binds: the
        # test cluster's node is this machine, reached on loopback, so the opt-ins are taken.
        "glm:front": {"rateLimit": {"enabled": False}, "allowPlainHttp": True},
        "glm:monitoring": {"allowPublicBind": True},
    }


def ask(question: str = "What is 13*17?") -> str:
    resp = httpx.post(
        f"{FRONT_URL}/chat/completions",
        headers={"Authorization": f"Bearer {API_KEY}"},
        json={
            "model": "glm-5.3-flash",
            "messages": [{"role": "user", "content": question}],
            "max_tokens": 64,
        },
        timeout=30,
        trust_env=False,
    )
    assert resp.status_code == 200, resp.text
    return str(resp.json()["choices"][0]["message"]["content"]).strip()


def pods(kubeconfig: Path) -> list[dict[str, Any]]:
    listed = json.loads(
        kubectl(kubeconfig, "get", "pods", "-l", "app.kubernetes.io/name=glm53-vllm", "-o", "json")
    )
    return list(listed["items"])


def live_pods(kubeconfig: Path) -> list[dict[str, Any]]:
    """The serving pods not being deleted (a replaced pod drains for a while after a roll)."""
    return [p for p in pods(kubeconfig) if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def in_node(*argv: str) -> list[str]:
    """``argv`` run in the one-node cluster's network namespace (its holder's: scripts/k8s/cluster.sh),
    where the NodePorts answer on ``NODE_IP`` with no loopback forward in between."""
    cache = Path(os.environ.get("GLM_K8S_CACHE", str(Path.home() / ".cache" / "glm53-k8s")))
    holder = (Path(os.environ.get("GLM_K8S_STATE", str(cache / "node"))) / "holder.pid").read_text().strip()
    return ["nsenter", "-t", holder, "-n", "--", *argv]
