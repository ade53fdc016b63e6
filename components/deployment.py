"""The whole deployment of one stack: the target its config names, built by that target's floor
(components/docker/deployment.py, components/kubernetes/deployment.py)."""

from __future__ import annotations

from typing import Any

from components.config import StackConfig
from components.secrets import Secrets


def deploy(config: StackConfig, secrets: Secrets, stack: str) -> dict[str, Any]:
    """Create every resource of the stack and return the stack outputs."""
    # Each target imports only its own floor: a Docker stack never loads pulumi_kubernetes.
    if config.target.kubernetes is not None:
        from components.kubernetes.deployment import deploy_kubernetes

        return deploy_kubernetes(config, secrets, stack)
    from components.docker.deployment import deploy_docker

    return deploy_docker(config, secrets, stack)
