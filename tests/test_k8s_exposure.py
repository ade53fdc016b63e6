"""Issue 34 findings 2 and 3 under mocks: what the Kubernetes stack publishes, and how.

A stack that says TLS is either served TLS or refused at preview (finding 2); a NodePort is a
public bind and needs the opt-ins ``bindAddress`` needs (finding 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest

from tests.conftest import run_program, stack_config
from tests.test_k8s_target import k8s_target
from tests.tls_certs import self_signed


def local_with(**sections: dict[str, Any]) -> dict[str, Any]:
    """The local stack's glm:<section> values with ``sections``' keys merged in."""
    values = stack_config("local")
    return {f"glm:{name}": {**(values.get(f"glm:{name}") or {}), **keys} for name, keys in sections.items()}


def refused(overrides: dict[str, Any], secrets: dict[str, Any] | None = None) -> str:
    with pytest.raises(pulumi.RunError) as info:
        run_program("local", overrides, secrets)
    return str(info.value)


# ---- finding 2: glm:front.tls on Kubernetes ----------------------------------------------------


def test_tls_on_kubernetes_is_refused_at_preview_naming_the_key_and_the_fix(tmp_path: Path) -> None:
    """Before: the front's nginx.conf had ``listen 8080;`` and its Secret no certificate, while the
    stack said TLS. Refused now, with what to do instead."""
    cert, key = self_signed(tmp_path, ["DNS:api.glm.test"])
    message = refused(
        {"glm:target": k8s_target(frontNodePort=30080), **local_with(front={"tls": True})},
        {"glm:tlsCertificate": cert, "glm:tlsKey": key},
    )
    assert (
        "glm:front.tls=true with glm:target.kubernetes: the front on Kubernetes does not serve TLS" in message
    )
    assert "Fix: terminate TLS in front of the front's Service" in message
    assert "glm:target.kubernetes.frontUrl https://" in message
    assert "remove glm:target.kubernetes" in message
    assert "BEGIN" not in message  # no certificate or key in the message


def test_the_same_tls_stack_on_docker_is_served(tmp_path: Path) -> None:
    """The refusal is Kubernetes' only: on a Docker host the same config serves TLS."""
    cert, key = self_signed(tmp_path, ["DNS:api.glm.test"])
    deployment = run_program(
        "local", local_with(front={"tls": True}), {"glm:tlsCertificate": cert, "glm:tlsKey": key}
    )
    assert deployment.outputs["endpoint"].startswith("https://")
