"""The rules of ``glm:target.kubernetes`` across sections (``KUBERNETES_CHECKS``, run with
``rules.CHECKS``, and ``KUBERNETES_ADVISORIES``): what the Docker path checks on its binds, checked
on the cluster's own forms. A NodePort listens on every node's addresses, whatever
``bindAddress`` says: it is a public bind, and takes the opt-ins a public ``bindAddress`` takes.
"""

from __future__ import annotations

from components.config.sections import StackSections

K8S = "glm:target.kubernetes"


def _check_front_node_port(c: StackSections) -> str | None:
    k8s = c.target.kubernetes
    if k8s is None or k8s.front_node_port is None or c.front.tls or c.front.allow_plain_http:
        return None
    return (
        f"{K8S}.frontNodePort={k8s.front_node_port} serves the API over plain HTTP on every node's "
        "addresses (a NodePort is a public bind, whatever glm:front.bindAddress says): API keys and "
        f"prompts cross the network in clear. Fix: unset {K8S}.frontNodePort (a ClusterIP Service) "
        "and put an ingress or load balancer that terminates TLS in front of it, or accept it "
        "explicitly with glm:front.allowPlainHttp: true (every preview then warns)."
    )


def _check_prometheus_node_port(c: StackSections) -> str | None:
    k8s = c.target.kubernetes
    if k8s is None or k8s.prometheus_node_port is None or c.monitoring.allow_public_bind:
        return None
    return (
        f"{K8S}.prometheusNodePort={k8s.prometheus_node_port} publishes Prometheus on every node's "
        "addresses (a NodePort is a public bind, whatever glm:monitoring.bindAddress says): it has no "
        "authentication, so anyone who reaches a node reads every metric and queries its API. Fix: "
        f"unset {K8S}.prometheusNodePort and reach it with `kubectl port-forward -n {k8s.namespace} "
        "svc/glm53-prometheus 9090`, or accept it explicitly with glm:monitoring.allowPublicBind: true "
        "(every preview then warns)."
    )


def _check_front_tls(c: StackSections) -> str | None:
    """A TLS front is asked over TLS: the smoke gate goes to ``frontUrl``."""
    k8s = c.target.kubernetes
    if k8s is None or not c.front.tls or k8s.front_url.startswith("https://"):
        return None
    return (
        f"{K8S}.frontUrl={k8s.front_url!r} with glm:front.tls=true: the front serves TLS, and the "
        "smoke gate would ask it in plain HTTP. Fix: https://<node or load balancer>:<port>/v1 (the "
        "gate verifies glm:front.tlsName there, trusting glm:front.tlsCaCertificate)."
    )


def _warn_front_node_port(c: StackSections) -> str | None:
    k8s = c.target.kubernetes
    if k8s is None or k8s.front_node_port is None or c.front.tls or not c.front.allow_plain_http:
        return None
    return (
        f"glm:front.allowPlainHttp=true: the API on every node's port {k8s.front_node_port} "
        f"({K8S}.frontNodePort) is plain HTTP, so API keys and prompts cross the network in clear. "
        "Put a TLS ingress or load balancer in front of a ClusterIP Service and remove the opt-in."
    )


def _warn_prometheus_node_port(c: StackSections) -> str | None:
    k8s = c.target.kubernetes
    if k8s is None or k8s.prometheus_node_port is None or not c.monitoring.allow_public_bind:
        return None
    return (
        f"glm:monitoring.allowPublicBind=true: Prometheus on every node's port {k8s.prometheus_node_port} "
        f"({K8S}.prometheusNodePort) answers anyone who reaches a node, without authentication. "
        "Unset the NodePort (kubectl port-forward reaches it) and remove the opt-in."
    )


KUBERNETES_CHECKS = [_check_front_tls, _check_front_node_port, _check_prometheus_node_port]
KUBERNETES_ADVISORIES = [_warn_front_node_port, _warn_prometheus_node_port]
