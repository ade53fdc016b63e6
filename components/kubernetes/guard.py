"""The serving pods' guard on Kubernetes: no pod reaches vLLM without the stack's credential.

A Service's address is reachable from every pod of the cluster, and a NetworkPolicy is enforced
only where the CNI does it (the project's one-node cluster runs the bridge CNI, which ignores them).
So the credential is the barrier, as on Docker hosts (components/render/replica_guard.py, the same nginx
config): in each serving pod vLLM listens on ``127.0.0.1`` only, and a guard sidecar, nginx from
the front's image, publishes the pod's one port and forwards to vLLM only requests that carry one
of the stack's two guard keys:

- the replica key (the front's) on the front's inference routes and on ``/metrics``, ``/version``,
  ``/health``;
- the scrape key (Prometheus', the semantic probe's ``/metrics`` reads) on those three only.

With ``glm:front.tls`` the guard serves TLS with the stack's replica certificate
(components/serving/replica_credentials.py), which the front and Prometheus pin, as on several Docker hosts: keys
and prompts never cross the pod network in clear.

What stays inside the pod needs no key: the gate sidecar asks vLLM over the pod's loopback, and
the kubelet's startup and liveness checks run ``/health`` in the vLLM container (an exec probe: an
HTTP probe comes from the node to the pod's address, where vLLM no longer listens). The
NetworkPolicy (the front, Prometheus and the probe may reach the guard's port, nobody else) is
defence in depth for clusters that enforce it.

The guard also keeps the pod's own verdict: while the gate sidecar's last check has not passed
(``VERDICT_FILE``: components/kubernetes/readiness.py) it closes inference requests without an
answer, so the front retries them on a new connection, which reaches another pod, in the seconds
before the Service has dropped this one everywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.config import FrontConfig, KubernetesTargetConfig
from components.kubernetes.pod_security import GUARD_SCRATCH
from components.kubernetes.readiness import VERDICT_DIR, VERDICT_FILE, VERDICT_VOLUME
from components.kubernetes.state import moved_from_root
from components.kubernetes.workload import GUARD_PORT_NAME, ON_ERROR_LOGS, labels, listening_probe
from components.render.nginx_conf import CONF_FILE
from components.render.replica_guard import CONTAINER_PORT, render_guard_files
from components.serving.replica_credentials import GuardCredentials, guard_credentials
from components.serving.spec import ServingSpec
from components.template import one_line_script
from components.vllm_flags.render import FlagValue

GUARD_CONTAINER = "guard"
GUARD_PORT = CONTAINER_PORT
"""The guard's port in the pod: the Service's target, Prometheus' scrape port."""
LOOPBACK = "127.0.0.1"
GUARD_DIR = "/etc/glm53-guard"
SECRET_NAME = "glm53-vllm-guard"
SCRAPE_SECRET = "glm53-scrape-key"
"""The scrape key alone, for Prometheus and the semantic probe (never the replica key)."""
SCRAPE_SECRET_KEY = "scrape-key"
GUARD_CA_KEY = "replica-ca.crt"
"""With TLS: the guards' pinned certificate, in ``SCRAPE_SECRET`` for Prometheus."""
ALLOWED_ROLES = ("front", "prometheus", "semantic-probe")
"""The stack's pods that may reach the guard's port, where a NetworkPolicy is enforced."""
OPERATOR_PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}
"""The Prometheus Operator's pods' label: they scrape from their own namespace."""


def pod_serving(serving: ServingSpec) -> ServingSpec:
    """``serving`` with vLLM on the pod's loopback: ``--host=127.0.0.1`` where the profile sets a
    host (the ascend seed's ``0.0.0.0``), else before ``--port``."""
    if "--host" in serving.flags:
        return dataclasses.replace(serving, flags={**serving.flags, "--host": LOOPBACK})
    flags: dict[str, FlagValue] = {}
    for flag, value in serving.flags.items():
        if flag == "--port":
            flags["--host"] = LOOPBACK
        flags[flag] = value
    return dataclasses.replace(serving, flags=flags)


def guard_quit(pre_stop_seconds: int) -> str:
    """The guard's preStop: out of the Service with vLLM, then nginx's graceful quit, which lets
    the streams vLLM is still draining finish (SIGTERM would be a fast quit that cuts them)."""
    values = {"PAUSE_SECONDS": str(pre_stop_seconds), "CONF": f"{GUARD_DIR}/{CONF_FILE}"}
    return one_line_script("nginx-quit.sh", values=values)


def guard_container(k8s_target: KubernetesTargetConfig, image: str) -> dict[str, Any]:
    """nginx (``image``: the front's) with the guard's release: nginx.conf and the two key maps."""
    return {
        "name": GUARD_CONTAINER,
        "image": image,
        "imagePullPolicy": k8s_target.image_pull_policy,
        "command": ["nginx", "-c", f"{GUARD_DIR}/{CONF_FILE}", "-e", "stderr", "-g", "daemon off;"],
        "ports": [{"name": GUARD_PORT_NAME, "containerPort": GUARD_PORT}],
        "volumeMounts": [
            {"name": "guard", "mountPath": GUARD_DIR, "readOnly": True},
            # The gate sidecar's verdict: no inference while its check has not passed.
            {"name": VERDICT_VOLUME, "mountPath": VERDICT_DIR, "readOnly": True},
            GUARD_SCRATCH[1],
        ],
        "readinessProbe": listening_probe(GUARD_PORT_NAME),
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", guard_quit(k8s_target.pre_stop_seconds)]}}},
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        **ON_ERROR_LOGS,
    }  # fmt: skip


GUARD_VOLUME = {"name": "guard", "secret": {"secretName": SECRET_NAME}}
"""The guard's release, mounted at ``GUARD_DIR`` in its container only."""


def guard_files(
    front: FrontConfig, port: int, key: str, scrape_key: str, tls_pair: tuple[str, str] | None = None
) -> dict[str, str]:
    """The guard's release in a pod: vLLM on the pod's loopback, the guard on ``GUARD_PORT``;
    ``tls_pair`` the replica certificate and key, with ``glm:front.tls``."""
    return render_guard_files(
        front,
        f"{LOOPBACK}:{port}",
        key,
        scrape_key,
        tls_pair,
        listen=str(GUARD_PORT),
        verdict_file=VERDICT_FILE,
    )


@dataclasses.dataclass(frozen=True)
class PodGuardArgs:
    """What the pods' guard serves and where (pass the cluster's provider in ``opts``)."""

    front: FrontConfig
    """``glm:front``: the nginx limits and timeouts the guard shares with the front, and TLS."""
    vllm_port: int
    """vLLM's port on the pod's loopback, where the guard forwards."""
    k8s_target: KubernetesTargetConfig
    """``glm:target.kubernetes``: the namespace, and whether the Operator's Prometheus scrapes."""
    stack: str
    """The stack's name: the pods' labels the NetworkPolicy selects."""


class PodGuard(pulumi.ComponentResource):
    """The stack's guard credentials, the guard's Secret, the scrape key's Secret and the
    NetworkPolicy of the serving pods; the guard container itself is in each pod
    (``guard_container``)."""

    credentials: GuardCredentials
    """The replica key (the front's), the scrape key and, with TLS, the one replica certificate."""
    release: k8s.core.v1.Secret
    """The guard's files; the pods start after it."""
    digest: pulumi.Output[str]
    """A pod annotation: a new release (another key) rolls the pods."""
    scrape_key: k8s.core.v1.Secret
    """``SCRAPE_SECRET``: what Prometheus and the probe mount."""

    def __init__(self, name: str, args: PodGuardArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("glm:k8s_guard:PodGuard", name, None, opts)
        front, ns = args.front, args.k8s_target.namespace
        child = moved_from_root(self)
        # With TLS, one certificate for every pod's guard: the front and Prometheus verify its one name.
        self.credentials = credentials = guard_credentials(name, [], tls=front.tls, opts=child)
        cert = credentials.certificate if front.tls else None
        pair = pulumi.Output.all(cert.certificate, cert.private_key) if cert is not None else None
        files: pulumi.Output[dict[str, str]] = pulumi.Output.secret(
            pulumi.Output.all(credentials.key, credentials.scrape_key, pair).apply(
                lambda a: guard_files(
                    front, args.vllm_port, str(a[0]), str(a[1]), (a[2][0], a[2][1]) if a[2] else None
                )
            )
        )
        self.release = k8s.core.v1.Secret(
            f"{name}-vllm-guard",
            metadata={"namespace": ns, "name": SECRET_NAME},
            string_data=files,
            opts=child,
        )
        scrape_key: pulumi.Output[str] = pulumi.Output.secret(credentials.scrape_key)
        self.scrape_key = k8s.core.v1.Secret(
            f"{name}-scrape-key",
            metadata={"namespace": ns, "name": SCRAPE_SECRET},
            # With TLS, the replica certificate Prometheus pins beside the key (public, not a secret).
            string_data={SCRAPE_SECRET_KEY: scrape_key, **({GUARD_CA_KEY: cert.certificate} if cert else {})},
            opts=child,
        )
        k8s.networking.v1.NetworkPolicy(
            f"{name}-vllm-ingress",
            metadata={"namespace": ns, "name": "glm53-vllm"},
            spec=network_policy_spec(args.stack, args.k8s_target),
            opts=child,
        )
        self.digest = pulumi.Output.unsecret(
            files.apply(lambda f: hashlib.sha256(json.dumps(f, sort_keys=True).encode()).hexdigest()[:16])
        )
        self.register_outputs({"digest": self.digest})


def network_policy_spec(stack: str, k8s_target: KubernetesTargetConfig) -> dict[str, Any]:
    """Ingress to the serving pods: the guard's port, from the stack's front, Prometheus and probe
    (or the Operator's Prometheus, in its own namespace); nothing else, where it is enforced."""
    peers: list[dict[str, Any]] = [
        {"podSelector": {"matchLabels": labels(stack, role)}} for role in ALLOWED_ROLES
    ]
    if k8s_target.prometheus_operator:
        peers.append({"namespaceSelector": {}, "podSelector": {"matchLabels": OPERATOR_PROMETHEUS}})
    return {
        "podSelector": {"matchLabels": labels(stack, "vllm")},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": peers, "ports": [{"protocol": "TCP", "port": GUARD_PORT}]}],
    }
