"""Least privilege on every pod a Kubernetes stack renders (issue 49), under the mocks: no
service-account token but in Prometheus' ``targets`` container, UID 10001 everywhere, no capability,
a read-only root file system with an ``emptyDir`` where each process writes. The policy pack's
``k8s-pod-least-privilege`` (tests/test_policy_k8s.py) refuses a pod that breaks a rule; the real
cluster shows the token path absent and ``id`` (tests/test_k8s_engine.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Deployment, unwrap
from tests.k8s_urns import KINDS

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
UID = 10001
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def stacks() -> dict[str, Deployment]:
    return {kind: KINDS[kind]() for kind in ("local-node-port", "local-tls-operator")}


def _pods(deployment: Deployment) -> dict[str, dict[str, Any]]:
    return {
        unwrap(d.inputs)["metadata"]["name"]: unwrap(d.inputs)["spec"]["template"]["spec"]
        for d in deployment.of_type(DEPLOYMENT)
    }


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def test_every_pod_of_every_kind_is_restricted(stacks: dict[str, Deployment]) -> None:
    seen = set()
    for deployment in stacks.values():
        for name, pod in _pods(deployment).items():
            seen.add(name)
            assert pod["automountServiceAccountToken"] is False, name
            assert pod["securityContext"]["runAsNonRoot"] is True, name
            assert pod["securityContext"]["runAsUser"] == UID, name
            for c in _containers(pod):
                assert c["securityContext"] == {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "readOnlyRootFilesystem": True,
                }, (name, c["name"])
    # Every pod the target renders (the Operator's kind has no Prometheus of its own).
    assert seen == {"glm53-vllm", "glm53-front", "glm53-prometheus", "glm53-semantic-probe"}


def test_only_the_listers_hold_the_token(stacks: dict[str, Deployment]) -> None:
    holders = {
        (name, c["name"])
        for deployment in stacks.values()
        for name, pod in _pods(deployment).items()
        for c in _containers(pod)
        if any(m["mountPath"] == TOKEN_DIR for m in c.get("volumeMounts", []))
    }
    # The listers of the serving pods and (with the usage meter) of the front pods, and a metered
    # front pod's lister of the serving pods it routes to: never nginx, prometheus or vLLM.
    assert holders == {
        ("glm53-prometheus", "targets"), ("glm53-prometheus", "front-targets"), ("glm53-front", "routes")
    }  # fmt: skip
    prometheus = _pods(stacks["local-node-port"])["glm53-prometheus"]
    [token] = [v for v in prometheus["volumes"] if v["name"] == "api-token"]
    sources = [next(iter(s)) for s in token["projected"]["sources"]]
    assert sources == ["serviceAccountToken", "configMap", "downwardAPI"]
    # What components/host/k8s_targets.py reads there.
    assert TOKEN_DIR in (ROOT / "components" / "host" / "k8s_targets.py").read_text()


def _scratch(pod: dict[str, Any], container: dict[str, Any]) -> set[str]:
    """The paths where ``container`` mounts one of ``pod``'s emptyDir volumes."""
    empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    return {m["mountPath"] for m in container["volumeMounts"] if m["name"] in empty}


def _written_by_nginx(conf: str) -> set[str]:
    """The folders of the pid and temp files an nginx.conf names."""
    paths = re.findall(r"^\s*(?:pid|\w+_temp_path)\s+(\S+?);", conf, re.M)
    assert paths, conf
    return {p.rsplit("/", 1)[0] for p in paths}


def test_nginx_writes_only_to_its_empty_dirs(stacks: dict[str, Deployment]) -> None:
    """The front's and the guards' rendered nginx.conf: every pid and temp path is in an emptyDir."""
    deployment = stacks["local-node-port"]
    pods = _pods(deployment)
    front_conf = unwrap(deployment.one("kubernetes:core/v1:ConfigMap", "-front-config").inputs)["data"]
    guard_conf = unwrap(deployment.one("kubernetes:core/v1:Secret", "-vllm-guard").inputs)["stringData"]
    for pod, container, conf in (
        (pods["glm53-front"], "nginx", front_conf["nginx.conf"]),
        (pods["glm53-vllm"], "guard", guard_conf["nginx.conf"]),
    ):
        [c] = [c for c in pod["containers"] if c["name"] == container]
        assert _written_by_nginx(conf) <= _scratch(pod, c), container


def test_vllm_writes_to_its_claim_and_its_empty_dirs(stacks: dict[str, Deployment]) -> None:
    pod = _pods(stacks["local-node-port"])["glm53-vllm"]
    [vllm] = [c for c in pod["containers"] if c["name"] == "vllm"]
    env = {e["name"]: e.get("value") for e in vllm["env"]}
    assert _scratch(pod, vllm) == {"/tmp", env["HOME"], "/dev/shm"}
    assert {m["mountPath"] for m in vllm["volumeMounts"] if m["name"] == "jit-cache"} == {"/var/cache/glm53"}
    assert env["USER"]  # getpass.getuser() for a UID with no passwd entry
    [data] = [
        m
        for c in _pods(stacks["local-node-port"])["glm53-prometheus"]["containers"]
        for m in c["volumeMounts"]
        if m["name"] == "data"
    ]
    assert data["mountPath"] == "/prometheus"
