"""Kubernetes stacks rendered under mocks, and the parts of their specs a test looks at."""

from __future__ import annotations

from typing import Any

from tests.conftest import Deployment, stack_config, unwrap

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
LOCAL_DOCKER = {"name": "localhost", "dockerHost": "unix:///var/run/docker.sock"}
FRONT_URL = "http://127.0.0.1:30080/v1"


def k8s_target(**extra: Any) -> dict[str, Any]:
    return {
        "hosts": [LOCAL_DOCKER],
        "kubernetes": {"namespace": "glm53-test", "frontUrl": FRONT_URL, "replicas": 2, **extra},
    }


def plain_http_accepted(stack: str) -> dict[str, Any]:
    """The stack's glm:front with the opt-in a plain-HTTP NodePort needs (tests/test_k8s_exposure.py)."""
    return {"glm:front": {**(stack_config(stack).get("glm:front") or {}), "allowPlainHttp": True}}


def pod_spec(deployment: Deployment) -> dict[str, Any]:
    return unwrap(deployment.one(DEPLOYMENT, "-vllm").inputs)["spec"]["template"]["spec"]


def container(deployment: Deployment, name: str) -> dict[str, Any]:
    return next(c for c in pod_spec(deployment)["containers"] if c["name"] == name)


def flag(argv: list[str], name: str) -> str:
    return next(a.split("=", 1)[1] for a in argv if a.startswith(f"{name}="))
