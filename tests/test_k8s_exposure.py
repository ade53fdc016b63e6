"""Issue 34 findings 2 and 3 under mocks: what the Kubernetes stack publishes, and how.

A stack that says TLS is either served TLS or refused at preview (finding 2); a NodePort is a
public bind and needs the opt-ins ``bindAddress`` needs (finding 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest

from tests.conftest import run_program, stack_config, unwrap
from tests.test_k8s_target import SERVICE, k8s_target
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


# ---- finding 3: a NodePort is a public bind --------------------------------------------------

LOOPBACK_PLAIN = {
    "front": {"bindAddress": "127.0.0.1", "tls": False},
    "monitoring": {"bindAddress": "127.0.0.1"},
}


def test_node_ports_without_the_opt_ins_are_refused_both_at_once() -> None:
    """The issue's config: both NodePorts, both bind addresses 127.0.0.1, no TLS, no opt-in. It was
    accepted: a plain-HTTP API and an unauthenticated Prometheus on every node."""
    target = k8s_target(frontNodePort=30080, prometheusNodePort=30090)
    message = refused({"glm:target": target, **local_with(**LOOPBACK_PLAIN)})
    assert (
        "glm:target.kubernetes.frontNodePort=30080 serves the API over plain HTTP on every node's addresses"
        in message
    )
    assert "glm:front.allowPlainHttp: true" in message
    assert (
        "glm:target.kubernetes.prometheusNodePort=30090 publishes Prometheus on every node's addresses"
        in message
    )
    assert "kubectl port-forward -n glm53-test svc/glm53-prometheus 9090" in message
    assert "glm:monitoring.allowPublicBind: true" in message


@pytest.mark.parametrize(
    ("node_port", "opt_in", "key"),
    [
        ("frontNodePort", {"front": {"allowPlainHttp": True}}, "prometheusNodePort"),
        ("prometheusNodePort", {"monitoring": {"allowPublicBind": True}}, "frontNodePort"),
    ],
)
def test_each_opt_in_opens_only_its_own_node_port(node_port: str, opt_in: dict[str, Any], key: str) -> None:
    sections = {name: {**LOOPBACK_PLAIN[name], **opt_in.get(name, {})} for name in LOOPBACK_PLAIN}
    run_program("local", {"glm:target": k8s_target(**{node_port: 30080}), **local_with(**sections)})
    message = refused({"glm:target": k8s_target(**{node_port: 30080, key: 30090}), **local_with(**sections)})
    assert f"glm:target.kubernetes.{key}=30090" in message and node_port not in message


def test_opted_in_node_ports_warn_and_mark_their_services() -> None:
    """The opt-ins reach the objects (annotations, for the policy pack) and every preview warns."""
    from components.config import build_stack_config

    sections = {
        "front": {**LOOPBACK_PLAIN["front"], "allowPlainHttp": True},
        "monitoring": {**LOOPBACK_PLAIN["monitoring"], "allowPublicBind": True},
    }
    target = k8s_target(frontNodePort=30080, prometheusNodePort=30090)
    config = build_stack_config({"hardware": "local", "target": target, **sections})
    warnings = "\n".join(config.advisories())
    assert (
        "the API on every node's port 30080 (glm:target.kubernetes.frontNodePort) is plain HTTP" in warnings
    )
    assert "Prometheus on every node's port 30090 (glm:target.kubernetes.prometheusNodePort)" in warnings
    deployment = run_program("local", {"glm:target": target, **local_with(**sections)})
    services = {r.name: unwrap(r.inputs) for r in deployment.of_type(SERVICE)}
    assert services["local-front-service"]["metadata"]["annotations"] == {"glm53.plain-http": "accepted"}
    assert services["local-prometheus-service"]["metadata"]["annotations"] == {
        "glm53.public-bind": "accepted"
    }
