"""Stacks over three hosts rendered under mocks: the targets and the gate's inputs."""

from __future__ import annotations

from typing import Any

from tests.conftest import TEST_HOST_KEY

GATE = "pulumi-python:dynamic:Resource"


def host(name: str, address: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "dockerHost": f"ssh://deploy@{address}", "hostKey": TEST_HOST_KEY, **extra}


THREE = [host("gpu01", "10.0.0.11"), host("gpu02", "10.0.0.12"), host("gpu03", "10.0.0.13")]


def target(*hosts: dict[str, Any], front: str | None = None) -> dict[str, Any]:
    return {"hosts": list(hosts), **({"frontHost": front} if front else {})}
