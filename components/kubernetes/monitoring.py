"""Prometheus on Kubernetes: the same alert rules, each serving pod scraped on its own.

Docker hosts list each replica's address; on Kubernetes pods come and go, so a sidecar lists them
through the API (components/host/k8s_targets.py: this namespace only, with a Role that may only list
pods) into a ``file_sd`` target file, each pod's series labelled ``host=<pod name>``: the rules are the Docker
stack's several-hosts rules (``render_alert_rules(..., by_host=True)``), their texts naming kubectl
where a Docker stack's name ``docker`` (``alert_look_at``). Clusters that run the Prometheus
Operator get the same rules as a ``PrometheusRule`` and a ``PodMonitor``
(``glm:target.kubernetes.prometheusOperator``) instead of this Deployment.

Past 400 lines, kept whole: both ways of monitoring the cluster (this Deployment, the Operator's
objects) render from the one scrape config here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.config import KubernetesTargetConfig, MonitoringConfig
from components.gate.messages import LookAt
from components.kubernetes.guard import GUARD_CA_KEY, GUARD_PORT, SCRAPE_SECRET, SCRAPE_SECRET_KEY, PodGuard
from components.kubernetes.pod_security import (
    LISTER_SCRIPT,
    api_token_volume,
    lister_account,
    lister_container,
    restricted,
)
from components.kubernetes.semantic_probe import PROBE_NAME, probe_log
from components.kubernetes.state import moved_from_root
from components.kubernetes.workload import (
    GUARD_PORT_NAME,
    SERVING_CONTAINER,
    label_selector,
    labels,
    prometheus_annotations,
)
from components.render import status_page
from components.render.nginx_conf import STATUS_PORT
from components.render.nginx_meter import METRICS_PATH
from components.render.prometheus_config import (
    CONFIG_PATH,
    CONTAINER_PORT,
    DATA_PATH,
    DEFAULT_JOB,
    METER_JOB,
    PROMETHEUS_FLAGS,
    REPLICA_CA_PATH,
    ROTATION_JOB,
    RULES_PATH,
    SCRAPE_KEY_PATH,
    AlertLookAt,
    ScrapeSpec,
    to_yaml,
)
from components.render.prometheus_rules import render_alert_rules, rule_groups
from components.render.replica_guard import TLS_NAME
from components.semantic_probe import SCRAPE_JOB

CONFIG_DIR = CONFIG_PATH.rsplit("/", 1)[0]


TARGETS_DIR = "/var/lib/glm53-targets"
TARGETS_FILE = f"{TARGETS_DIR}/vllm.json"
FRONT_TARGETS_FILE = f"{TARGETS_DIR}/front.json"
"""The front pods' status ports: the usage meter's counters, each pod's own (Prometheus sums them)."""
ROTATION_PORT = 9147
"""Where the targets lister serves the serving pods' rotation, inside Prometheus' pod (loopback)."""
TARGETS_PERIOD_SECONDS = 5
API_TOKEN = api_token_volume()
"""The service-account token, for ``targets`` alone: ``prometheus`` calls no API."""


def alert_look_at(pods: LookAt, namespace: str, stack: str) -> AlertLookAt:
    """What the alert texts name on the cluster, which has no ``docker``: the log of the serving pod
    the alert is about (its ``host`` label is the pod's name: ``k8s_targets.py``), the stack's pods as
    a gate's failure names them (``pods``: ``where_to_look`` in components/kubernetes/serving.py),
    and the probe's log in ``namespace``.

    A container the kubelet restarted (an OOM, an engine that gave up) logs afresh: ``--previous``
    reads the run that ended, which ``docker logs`` shows in one piece.
    """
    return AlertLookAt(
        serving_log=f"`kubectl -n {namespace} logs {{{{ $labels.host }}}} -c {SERVING_CONTAINER}`",
        restarts=f"its restart count (RESTARTS in `{pods.running}`; `--previous` reads the log of the "
        "run before a restart)",
        probe_log=probe_log(namespace),
        running=pods.running,
        front_log=f"kubectl -n {namespace} logs -l {label_selector(stack, 'front')} -c nginx --prefix "
        "| grep 'usage meter'",
    )


def scrape_config(
    monitoring_interval: str, probe_target: str | None = None, tls: bool = False, meter: bool = False
) -> dict[str, Any]:
    """``prometheus.yml``: each serving pod of the stack (Ready or not: a pod out of the Service is
    exactly the one to see) from the target file ``k8s_targets.py`` keeps, labelled ``host``, through
    its guard with the scrape key (components/kubernetes/guard.py); with ``tls``, over TLS, pinning the
    guards' certificate by its one name."""
    guarded: dict[str, Any] = {"authorization": {"type": "Bearer", "credentials_file": SCRAPE_KEY_PATH}}
    if tls:
        guarded |= {"scheme": "https", "tls_config": {"ca_file": REPLICA_CA_PATH, "server_name": TLS_NAME}}
    return {
        "global": {"scrape_interval": monitoring_interval, "evaluation_interval": monitoring_interval},
        "rule_files": [RULES_PATH],
        "scrape_configs": [
            {
                "job_name": DEFAULT_JOB,
                "metrics_path": "/metrics",
                **guarded,
                "file_sd_configs": [{"files": [TARGETS_FILE], "refresh_interval": "5s"}],
            },
            *(
                [
                    {
                        "job_name": SCRAPE_JOB,
                        "metrics_path": "/metrics",
                        "static_configs": [{"targets": [probe_target]}],
                    }
                ]
                if probe_target
                else []
            ),
            # The pods' rotation as a Docker front's (k8s_targets.py): the page's and dashboard's panels.
            {"job_name": ROTATION_JOB, "static_configs": [{"targets": [f"127.0.0.1:{ROTATION_PORT}"]}]},
            *(
                [
                    {
                        "job_name": METER_JOB,
                        "metrics_path": METRICS_PATH,
                        "file_sd_configs": [{"files": [FRONT_TARGETS_FILE], "refresh_interval": "5s"}],
                    }
                ]
                if meter
                else []
            ),
        ],
    }


def targets_container(
    image: pulumi.Input[str], pull: str, namespace: str, stack: str, port: int, role: str = "vllm"
) -> dict[str, Any]:
    """The lister of ``role``'s pods (``vllm``: the serving pods into ``TARGETS_FILE``; ``front``: the
    front pods' status ports into ``FRONT_TARGETS_FILE``)."""
    argv = [
        namespace,
        label_selector(stack, role),
        str(port),
        TARGETS_FILE if role == "vllm" else FRONT_TARGETS_FILE,
        str(TARGETS_PERIOD_SECONDS),
        *([str(ROTATION_PORT)] if role == "vllm" else []),
    ]
    name = "targets" if role == "vllm" else f"{role}-targets"
    return lister_container(name, image, pull, argv, script="script", out="targets", out_dir=TARGETS_DIR)


def operator_objects(
    spec: ScrapeSpec, namespace: str, stack: str, tls: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(PrometheusRule spec, PodMonitor spec) for a cluster's Prometheus Operator."""
    pinned = {
        "scheme": "https",
        "tlsConfig": {"ca": {"secret": {"name": SCRAPE_SECRET, "key": GUARD_CA_KEY}}, "serverName": TLS_NAME},
    }
    rules = rule_groups(spec, by_host=True)
    monitor = {
        "selector": {"matchLabels": labels(stack, "vllm")},
        "namespaceSelector": {"matchNames": [namespace]},
        "podMetricsEndpoints": [
            {
                "port": GUARD_PORT_NAME,
                "path": "/metrics",
                "authorization": {
                    "type": "Bearer",
                    "credentials": {"name": SCRAPE_SECRET, "key": SCRAPE_SECRET_KEY},
                },
                "interval": spec.monitoring.scrape_interval,
                "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "host"}],
                **(pinned if tls else {}),
            }
        ],
    }
    return rules, monitor


@dataclass(frozen=True)
class KubernetesScrapeArgs:
    """What Prometheus scrapes and alerts on (pass the cluster's provider in ``opts``)."""

    spec: ScrapeSpec
    """The alert rules' inputs (the same as a Docker stack's)."""
    monitoring: MonitoringConfig
    """``glm:monitoring``: the image, the scrape interval, the public-bind opt-in."""
    tls: bool
    """``glm:front.tls``: the guards serve TLS, pinned by the one replica certificate."""
    k8s_target: KubernetesTargetConfig
    """``glm:target.kubernetes``: namespace, pull policy, the NodePort, ``prometheusOperator``."""
    stack: str
    """The stack's name: the labels of the pods it scrapes and of its own."""
    script_image: pulumi.Input[str]
    """An image with python3 for the targets lister (the gate sidecar's)."""
    guard: PodGuard
    """The pods' guard: its port is scraped with the key in its ``scrape_key`` Secret."""
    probe_port: int | None
    """The semantic probe's metrics port, when the probe runs: its Service is made here (Prometheus
    needs its address before the probe itself starts, after the gate)."""
    after: list[pulumi.Resource]
    """What Prometheus' pods wait for: the images' loads onto the nodes."""


class KubernetesScrape(pulumi.ComponentResource):
    """Prometheus (or the Operator's objects) for the stack: every serving pod, by its guard."""

    address: pulumi.Output[str] | None = None
    """host:port of the stack's own Prometheus (its Service), where the front finds the status page's
    files and queries; None with the cluster's Prometheus Operator (no page)."""

    def __init__(
        self, name: str, args: KubernetesScrapeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("glm:k8s_monitoring:KubernetesScrape", name, None, opts)
        k8s_target, stack = args.k8s_target, args.stack
        ns = k8s_target.namespace
        child = moved_from_root(self)
        scrape_key = args.guard.scrape_key
        probe_target = None
        if args.probe_port is not None:
            port = args.probe_port
            probe = k8s.core.v1.Service(
                f"{name}-semantic-probe-service",
                metadata={"namespace": ns, "name": PROBE_NAME},
                spec={
                    "selector": labels(stack, "semantic-probe"),
                    "ports": [{"name": "metrics", "port": port, "targetPort": "metrics"}],
                },
                opts=child,
            )
            probe_target = probe.spec.cluster_ip.apply(lambda ip: f"{ip}:{port}")
        if k8s_target.prometheus_operator:
            rules, monitor = operator_objects(args.spec, ns, stack, args.tls)
            k8s.apiextensions.CustomResource(
                f"{name}-alert-rules",
                api_version="monitoring.coreos.com/v1",
                kind="PrometheusRule",
                metadata={"namespace": ns, "name": "glm53-vllm"},
                spec=rules,
                opts=child,
            )
            k8s.apiextensions.CustomResource(
                f"{name}-pod-monitor",
                api_version="monitoring.coreos.com/v1",
                kind="PodMonitor",
                metadata={"namespace": ns, "name": "glm53-vllm"},
                spec=monitor,
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[scrape_key])),
            )
        else:
            service = self._prometheus(name, args, probe_target, child)
            self.address = service.spec.cluster_ip.apply(lambda ip: f"{ip}:{CONTAINER_PORT}")
        self.register_outputs({})

    @staticmethod
    def _prometheus(
        name: str,
        args: KubernetesScrapeArgs,
        probe_target: pulumi.Output[str] | None,
        child: pulumi.ResourceOptions,
    ) -> k8s.core.v1.Service:
        """Prometheus in the namespace, its targets listed by a sidecar, and its Service; with the
        status page's files (``--web.user-assets``), which the front serves at /status/."""
        k8s_target, monitoring = args.k8s_target, args.monitoring
        ns = k8s_target.namespace
        rules_file = render_alert_rules(args.spec, by_host=True)
        metered = args.spec.usage_meter is not None
        interval = monitoring.scrape_interval

        def prometheus_files(probe: str | None) -> dict[str, str]:
            return {
                "prometheus.yml": to_yaml(scrape_config(interval, probe, args.tls, metered)),
                "rules.yml": rules_file,
            }

        files: pulumi.Output[dict[str, str]] = pulumi.Output.from_input(probe_target).apply(prometheus_files)
        digest = files.apply(
            lambda f: hashlib.sha256("".join(f[k] for k in sorted(f)).encode()).hexdigest()[:16]
        )
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-prometheus-config",
            metadata={"namespace": ns, "name": "glm53-prometheus"},
            data=files,
            opts=child,
        )
        page = k8s.core.v1.ConfigMap(
            f"{name}-status-page",
            metadata={"namespace": ns, "name": "glm53-status-page"},
            data=status_page.page_files(),
            opts=child,
        )
        script = k8s.core.v1.ConfigMap(
            f"{name}-prometheus-targets",
            metadata={"namespace": ns, "name": "glm53-prometheus-targets"},
            data={LISTER_SCRIPT.name: LISTER_SCRIPT.read_text()},
            opts=child,
        )
        account = lister_account(f"{name}-prometheus", "glm53-prometheus", ns, child)
        selector = labels(args.stack, "prometheus")
        k8s.apps.v1.Deployment(
            f"{name}-prometheus",
            metadata={"namespace": ns, "name": "glm53-prometheus"},
            spec={
                "replicas": 1,
                "selector": {"matchLabels": selector},
                # One TSDB volume: the old pod goes before the new one starts.
                "strategy": {"type": "Recreate"},
                "template": {
                    # A new config or rule file restarts Prometheus, its series with it (an emptyDir); a
                    # Docker host loads them in place (components/docker/prometheus_release.py).
                    "metadata": {"labels": selector, "annotations": {"glm53/config": digest}},
                    "spec": _prometheus_pod(args),
                },
            },
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=[config_map, page, script, account, args.guard.scrape_key, *args.after]
                ),
            ),
        )  # fmt: skip
        service_port: dict[str, Any] = {"name": "http", "port": CONTAINER_PORT, "targetPort": "http"}
        if k8s_target.prometheus_node_port is not None:
            service_port["nodePort"] = k8s_target.prometheus_node_port
        return k8s.core.v1.Service(
            f"{name}-prometheus-service",
            metadata={
                "namespace": ns,
                "name": "glm53-prometheus",
                "annotations": prometheus_annotations(monitoring),
            },
            spec={
                "type": "NodePort" if k8s_target.prometheus_node_port is not None else "ClusterIP",
                "selector": selector,
                "ports": [service_port],
            },
            opts=child,
        )


def _prometheus_pod(args: KubernetesScrapeArgs) -> dict[str, Any]:
    """Prometheus' pod: Prometheus reading its config, the scrape key (and the guards' CA) and the
    status page's files; beside it the sidecar that lists the guards' targets (and, with the usage
    meter, the front pods' status ports) from the API."""
    monitoring, ns, pull = args.monitoring, args.k8s_target.namespace, args.k8s_target.image_pull_policy
    metered = args.spec.usage_meter is not None
    return restricted({
        "serviceAccountName": "glm53-prometheus",
        "containers": [{
            "name": "prometheus",
            "image": monitoring.image,
            "imagePullPolicy": pull,
            # The status page's files are served at /user/, which the front proxies (/status/).
            "args": [*PROMETHEUS_FLAGS, f"--web.user-assets={status_page.ASSETS_DIR}"],
            "ports": [{"name": "http", "containerPort": CONTAINER_PORT}],
            "volumeMounts": [
                {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                {"name": "data", "mountPath": DATA_PATH},
                {"name": "targets", "mountPath": TARGETS_DIR, "readOnly": True},
                {"name": "status-page", "mountPath": status_page.ASSETS_DIR, "readOnly": True},
            ],
            "readinessProbe": {"httpGet": {"path": "/-/ready", "port": "http"}, "periodSeconds": 5},
        }, targets_container(args.script_image, pull, ns, args.stack, GUARD_PORT),
        *([targets_container(args.script_image, pull, ns, args.stack, STATUS_PORT, "front")]
          if metered else [])],
        "volumes": [
            {"name": "config", "projected": {"sources": [
                {"configMap": {"name": "glm53-prometheus"}},
                {"secret": {"name": SCRAPE_SECRET, "items": [
                    {"key": SCRAPE_SECRET_KEY, "path": SCRAPE_KEY_PATH.rsplit("/", 1)[1]},
                    *([{"key": GUARD_CA_KEY, "path": REPLICA_CA_PATH.rsplit("/", 1)[1]}] if args.tls else []),
                ]}},
            ]}},
            {"name": "data", "emptyDir": {}},
            {"name": "targets", "emptyDir": {}},
            {"name": "script", "configMap": {"name": "glm53-prometheus-targets"}},
            {"name": "status-page", "configMap": {"name": "glm53-status-page"}},
            API_TOKEN[0],
        ],
    })  # fmt: skip
