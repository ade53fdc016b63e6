"""The semantic probe on Kubernetes: the same service, params and image as on a Docker host.

It asks the gate's questions through the front's Service on its schedule, with its own key, and
Prometheus scrapes its results (the same ``semantic-probe`` job and alert rules). What it does not
do here is eject replicas: on Kubernetes each serving pod's readiness already re-runs the gate's
checks against that pod (components/kubernetes/workload.py), and the Service drops a pod that fails them.
Its Service, the one Prometheus scrapes, is made with Prometheus (components/kubernetes/monitoring.py),
which needs its address before the probe starts. Its ``/metrics`` reads (the kv_pool step) go
through the front too, whose ``/metrics`` admits the guards' scrape key (components/kubernetes/guard.py):
the probe holds that key, never the replica key, and with ``glm:front.tls`` one certificate (the
front's) verifies both its requests.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.config import KubernetesTargetConfig
from components.kubernetes.guard import SCRAPE_SECRET, SCRAPE_SECRET_KEY
from components.kubernetes.pod_security import PROBE_SCRATCH, restricted
from components.kubernetes.state import moved_from_root
from components.kubernetes.workload import labels
from components.render.nginx_conf import CONTAINER_PORT as FRONT_PORT
from components.verification.semantic_probe_spec import (
    KEY_PATH,
    PARAMS_PATH,
    SCRAPE_KEY_PATH,
    SemanticProbeSpec,
    probe_settings,
    render_params,
)

PROBE_DIR = PARAMS_PATH.rsplit("/", 1)[0]
assert KEY_PATH.startswith(PROBE_DIR) and SCRAPE_KEY_PATH.startswith(PROBE_DIR)
PROBE_NAME = "glm53-semantic-probe"
"""The probe's Deployment and its params' ConfigMap in the namespace, and the Service Prometheus
scrapes it through (components/kubernetes/monitoring.py)."""
PROBE_CONTAINER = "probe"
"""The container of the probe's pod that runs ``python -m components.semantic_probe``."""


def probe_log(namespace: str) -> str:
    """The probe's log on the cluster, as its alerts name it: what came back, one JSON line per
    failed step.

    >>> probe_log("glm53-prod")
    'kubectl -n glm53-prod logs deploy/glm53-semantic-probe -c probe'
    """
    return f"kubectl -n {namespace} logs deploy/{PROBE_NAME} -c {PROBE_CONTAINER}"


@dataclass(frozen=True)
class KubernetesSemanticProbeArgs:
    """What the probe asks, through which front, with which keys (pass the cluster's provider in ``opts``)."""

    spec: SemanticProbeSpec
    """The probe's params, as on a Docker host but for what its failures name (``look_at``: kubectl's)."""
    k8s_target: KubernetesTargetConfig
    """``glm:target.kubernetes``: the namespace and pull policy."""
    stack: str
    """The stack's name: the probe pod's labels (its Service, made with Prometheus, selects them)."""
    image: pulumi.Input[str]
    """The probe's image (the gate sidecar's)."""
    front_ip: pulumi.Output[str]
    """The front Service's ClusterIP (the one-node cluster has no DNS)."""
    api_key: pulumi.Output[str]
    """The probe's own API key (secret)."""
    scrape_key: k8s.core.v1.Secret
    """The guards' scrape key Secret (components/kubernetes/guard.py): the probe's ``/metrics`` reads."""
    started_after: list[pulumi.Resource]
    """The gate: the probe's first run meets a model that answers; and the images' loads."""


class KubernetesSemanticProbe(pulumi.ComponentResource):
    """The probe's Deployment: its params in a ConfigMap, its key in a Secret, the guards' scrape
    key mounted beside them."""

    def __init__(
        self, name: str, args: KubernetesSemanticProbeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("glm:k8s_probe:KubernetesSemanticProbe", name, None, opts)
        spec, k8s_target = args.spec, args.k8s_target
        ns = k8s_target.namespace
        child = moved_from_root(self)

        def settings(ip: str) -> str:
            front = probe_settings(spec, ip, f"{ip}:{FRONT_PORT}")
            metrics = front.endpoint.removesuffix("/v1") + "/metrics"  # the front's, https with TLS
            keyed = dataclasses.replace(
                front, metrics_url=metrics, guarded_metrics=True, scrape_key_file=SCRAPE_KEY_PATH
            )
            return render_params(keyed)

        params = args.front_ip.apply(settings)
        params_map = k8s.core.v1.ConfigMap(
            f"{name}-params",
            metadata={"namespace": ns, "name": PROBE_NAME},
            data={"params.json": params},
            opts=child,
        )
        secret_key: pulumi.Output[str] = pulumi.Output.secret(args.api_key)
        key = k8s.core.v1.Secret(
            f"{name}-key",
            metadata={"namespace": ns, "name": "glm53-semantic-probe-key"},
            string_data={"api-key": secret_key},
            opts=child,
        )
        selector = labels(args.stack, "semantic-probe")
        k8s.apps.v1.Deployment(
            name,
            metadata={"namespace": ns, "name": PROBE_NAME},
            spec={
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    # New params restart it (the Docker stack replaces its container).
                    "metadata": {"labels": selector, "annotations": {"glm53/params": params.apply(_digest)}},
                    "spec": restricted({
                        "containers": [{
                            "name": PROBE_CONTAINER,
                            "image": args.image,
                            "imagePullPolicy": k8s_target.image_pull_policy,
                            "args": ["--params", PARAMS_PATH, "--api-key-file", KEY_PATH],
                            "ports": [{"name": "metrics", "containerPort": spec.probe.port}],
                            "volumeMounts": [{"name": "probe", "mountPath": PROBE_DIR, "readOnly": True}, PROBE_SCRATCH[1]],
                            "resources": {"requests": {"cpu": "20m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}},
                        }],
                        "volumes": [{"name": "probe", "projected": {"sources": [
                            {"configMap": {"name": PROBE_NAME}},
                            {"secret": {"name": "glm53-semantic-probe-key"}},
                            {"secret": {"name": SCRAPE_SECRET, "items": [
                                {"key": SCRAPE_SECRET_KEY, "path": SCRAPE_KEY_PATH.rsplit("/", 1)[1]},
                            ]}},
                        ]}}, PROBE_SCRATCH[0]],
                    }),
                },
            },
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(depends_on=[params_map, key, args.scrape_key, *args.started_after]),
            ),
        )  # fmt: skip
        self.register_outputs({})


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
