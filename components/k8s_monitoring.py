"""Prometheus on Kubernetes: the same alert rules, each serving pod scraped on its own.

Docker hosts list each replica's address; on Kubernetes pods come and go, so a sidecar lists them
through the API (components/k8s_targets.py: this namespace only, with a Role that may only list
pods) into a ``file_sd`` target file, each pod's series labelled ``host=<pod name>``: the rules are the Docker
stack's several-hosts rules (``render_alert_rules(..., by_host=True)``) unchanged. Clusters that
run the Prometheus Operator get the same rules as a ``PrometheusRule`` and a ``PodMonitor``
(``glm:target.kubernetes.prometheusOperator``) instead of this Deployment.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.config import KubernetesTargetConfig, StackConfig
from components.k8s_guard import GUARD_CA_KEY, SCRAPE_SECRET, SCRAPE_SECRET_KEY
from components.k8s_workload import GUARD_PORT_NAME, labels, prometheus_annotations
from components.prometheus_config import (
    CONFIG_PATH,
    CONTAINER_PORT,
    DATA_PATH,
    DEFAULT_JOB,
    PROMETHEUS_FLAGS,
    REPLICA_CA_PATH,
    RULES_PATH,
    SCRAPE_KEY_PATH,
    ScrapeSpec,
    to_yaml,
)
from components.prometheus_rules import render_alert_rules, rule_groups
from components.replica_tls import TLS_NAME
from components.semantic_probe import SCRAPE_JOB

CONFIG_DIR = CONFIG_PATH.rsplit("/", 1)[0]


TARGETS_DIR = "/var/lib/glm53-targets"
TARGETS_FILE = f"{TARGETS_DIR}/vllm.json"
TARGETS_SCRIPT = Path(__file__).with_name("k8s_targets.py")
SCRIPT_DIR = "/opt/glm53"


def scrape_config(
    monitoring_interval: str, probe_target: str | None = None, tls: bool = False
) -> dict[str, Any]:
    """``prometheus.yml``: each serving pod of the stack (Ready or not: a pod out of the Service is
    exactly the one to see) from the target file ``k8s_targets.py`` keeps, labelled ``host``, through
    its guard with the scrape key (components/k8s_guard.py); with ``tls``, over TLS, pinning the
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
        ],
    }


def targets_container(
    image: pulumi.Input[str], pull: str, namespace: str, stack: str, port: int
) -> dict[str, Any]:
    selector = ",".join(f"{k}={v}" for k, v in labels(stack, "vllm").items())
    return {
        "name": "targets",
        "image": image,
        "imagePullPolicy": pull,
        "command": [
            "python3",
            f"{SCRIPT_DIR}/{TARGETS_SCRIPT.name}",
            namespace,
            selector,
            str(port),
            TARGETS_FILE,
        ],
        "volumeMounts": [
            {"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True},
            {"name": "targets", "mountPath": TARGETS_DIR},
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "96Mi"}},
    }


def _rbac(name: str, namespace: str, opts: pulumi.ResourceOptions) -> k8s.core.v1.ServiceAccount:
    """A service account that may list and watch the namespace's pods, nothing else."""
    account = k8s.core.v1.ServiceAccount(
        f"{name}-account", metadata={"namespace": namespace, "name": "glm53-prometheus"}, opts=opts
    )
    role = k8s.rbac.v1.Role(
        f"{name}-role",
        metadata={"namespace": namespace, "name": "glm53-prometheus"},
        rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        opts=opts,
    )
    k8s.rbac.v1.RoleBinding(
        f"{name}-binding",
        metadata={"namespace": namespace, "name": "glm53-prometheus"},
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "glm53-prometheus"},
        subjects=[{"kind": "ServiceAccount", "name": "glm53-prometheus", "namespace": namespace}],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[role, account])),
    )
    return account


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


def deploy_monitoring(
    config: StackConfig,
    spec: ScrapeSpec,
    stack: str,
    k8s_target: KubernetesTargetConfig,
    opts: pulumi.ResourceOptions,
    *,
    script_image: pulumi.Input[str],
    port: int,
    scrape_key: k8s.core.v1.Secret,
    probe_target: pulumi.Output[str] | None = None,
) -> pulumi.Resource:
    """Prometheus (or the Operator's objects) for the stack; returns the resource the gate waits for.
    ``port`` is the pods' guard's, ``scrape_key`` the Secret of the key it asks Prometheus for."""
    ns = k8s_target.namespace
    if k8s_target.prometheus_operator:
        rules, monitor = operator_objects(spec, ns, stack, config.front.tls)
        k8s.apiextensions.CustomResource(
            f"{stack}-alert-rules",
            api_version="monitoring.coreos.com/v1",
            kind="PrometheusRule",
            metadata={"namespace": ns, "name": "glm53-vllm"},
            spec=rules,
            opts=opts,
        )
        return k8s.apiextensions.CustomResource(
            f"{stack}-pod-monitor",
            api_version="monitoring.coreos.com/v1",
            kind="PodMonitor",
            metadata={"namespace": ns, "name": "glm53-vllm"},
            spec=monitor,
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[scrape_key])),
        )
    rules_file = render_alert_rules(spec, by_host=True)
    interval = config.monitoring.scrape_interval

    def prometheus_files(probe: str | None) -> dict[str, str]:
        return {
            "prometheus.yml": to_yaml(scrape_config(interval, probe, config.front.tls)),
            "rules.yml": rules_file,
        }

    files: pulumi.Output[dict[str, str]] = pulumi.Output.from_input(probe_target).apply(prometheus_files)
    digest = files.apply(lambda f: hashlib.sha256("".join(f[k] for k in sorted(f)).encode()).hexdigest()[:16])
    config_map = k8s.core.v1.ConfigMap(
        f"{stack}-prometheus-config",
        metadata={"namespace": ns, "name": "glm53-prometheus"},
        data=files,
        opts=opts,
    )
    script = k8s.core.v1.ConfigMap(
        f"{stack}-prometheus-targets",
        metadata={"namespace": ns, "name": "glm53-prometheus-targets"},
        data={TARGETS_SCRIPT.name: TARGETS_SCRIPT.read_text()},
        opts=opts,
    )
    account = _rbac(f"{stack}-prometheus", ns, opts)
    selector = labels(stack, "prometheus")
    prometheus = k8s.apps.v1.Deployment(
        f"{stack}-prometheus",
        metadata={"namespace": ns, "name": "glm53-prometheus"},
        spec={
            "replicas": 1,
            "selector": {"matchLabels": selector},
            # One TSDB volume: the old pod goes before the new one starts.
            "strategy": {"type": "Recreate"},
            "template": {
                # A new config or rule file restarts Prometheus (the Docker stack replaces its container).
                "metadata": {"labels": selector, "annotations": {"glm53/config": digest}},
                "spec": {
                    "serviceAccountName": "glm53-prometheus",
                    "containers": [{
                        "name": "prometheus",
                        "image": config.monitoring.image,
                        "imagePullPolicy": k8s_target.image_pull_policy,
                        "args": PROMETHEUS_FLAGS,
                        "ports": [{"name": "http", "containerPort": CONTAINER_PORT}],
                        "volumeMounts": [
                            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                            {"name": "data", "mountPath": DATA_PATH},
                            {"name": "targets", "mountPath": TARGETS_DIR, "readOnly": True},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/-/ready", "port": "http"}, "periodSeconds": 5},
                    }, targets_container(script_image, k8s_target.image_pull_policy, ns, stack, port)],
                    "volumes": [
                        {"name": "config", "projected": {"sources": [
                            {"configMap": {"name": "glm53-prometheus"}},
                            {"secret": {"name": SCRAPE_SECRET, "items": [
                                {"key": SCRAPE_SECRET_KEY, "path": SCRAPE_KEY_PATH.rsplit("/", 1)[1]},
                                *([{"key": GUARD_CA_KEY, "path": REPLICA_CA_PATH.rsplit("/", 1)[1]}] if config.front.tls else []),
                            ]}},
                        ]}},
                        {"name": "data", "emptyDir": {}},
                        {"name": "targets", "emptyDir": {}},
                        {"name": "script", "configMap": {"name": "glm53-prometheus-targets"}},
                    ],
                },
            },
        },
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(depends_on=[config_map, script, account, scrape_key])
        ),
    )  # fmt: skip
    service_port: dict[str, Any] = {"name": "http", "port": CONTAINER_PORT, "targetPort": "http"}
    if k8s_target.prometheus_node_port is not None:
        service_port["nodePort"] = k8s_target.prometheus_node_port
    k8s.core.v1.Service(
        f"{stack}-prometheus-service",
        metadata={"namespace": ns, "name": "glm53-prometheus", "annotations": prometheus_annotations(config)},
        spec={
            "type": "NodePort" if k8s_target.prometheus_node_port is not None else "ClusterIP",
            "selector": selector,
            "ports": [service_port],
        },
        opts=opts,
    )
    return prometheus
