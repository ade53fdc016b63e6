"""Prometheus' own files: what it is built from (``ScrapeSpec``), where its files live in the
container, and ``prometheus.yml``, which tells it what to scrape.

The Docker component (components/docker/prometheus_scrape.py) and the Kubernetes one
(components/kubernetes/monitoring.py) share the paths, the flags and the YAML both files are written in;
the alert rules are in components/render/prometheus_rules.py. The render functions are pure; the tests
run them through the real ``promtool``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from components import semantic_probe
from components.config import (
    ContainerConfig,
    HostConfig,
    MonitoringConfig,
    SemanticProbeConfig,
    ServingConfig,
    SmokeConfig,
    StackConfig,
    semantic_probe_runs,
    usage_meter_runs,
)
from components.config.edge import UsageMeterConfig
from components.hardware import HardwareFacts
from components.render.nginx_meter import METRICS_PATH

DEFAULT_JOB = "vllm"
ROTATION_JOB = "front-rotation"
"""The front's status port: which replicas are in rotation, and their gate and ejection history."""
METER_JOB = "usage-meter"
"""The usage meter: requests, tokens and latency per API key name, on the front's status port
(components/render/nginx_meter.py)."""
CONFIG_PATH = "/etc/prometheus/prometheus.yml"
RULES_PATH = "/etc/prometheus/rules.yml"
SCRAPE_KEY_PATH = "/etc/prometheus/scrape-key"
REPLICA_CA_PATH = "/etc/prometheus/replica-ca.crt"
"""With several hosts: the guards' scrape key (and, with TLS, the pinned certificate). The scrape
key reads /metrics, /version and /health; the guards refuse it on every inference route."""
CONTAINER_PORT = 9090
DATA_PATH = "/prometheus"
"""The image's TSDB ``VOLUME``: an anonymous volume that goes with the container. On Docker hosts
series restart only when the container is replaced (its image, port or network): its files reload
in place (components/docker/prometheus_release.py). The alerts need only minutes of data."""

# The official image's ENTRYPOINT is /bin/prometheus and its CMD the flags, so `command` holds
# flags only. Replacing CMD drops the image's console-template flags, which the UI does not need.
PROMETHEUS_FLAGS = [
    f"--config.file={CONFIG_PATH}",
    f"--storage.tsdb.path={DATA_PATH}",
    f"--web.listen-address=:{CONTAINER_PORT}",
]


def container_name(container: ContainerConfig) -> str:
    """Prometheus' Docker name (and host name on the stack's private network)."""
    return f"{container.name}-prometheus"


@dataclass(frozen=True)
class AlertLookAt:
    """What the alert texts tell the operator to run, on the stack's target: a Docker host's
    commands (:meth:`docker`), or kubectl's in the stack's namespace on Kubernetes
    (components/kubernetes/monitoring.py ``alert_look_at``), which has no ``docker``.

    >>> AlertLookAt.docker("glm53-flash-local").probe_log
    'docker logs glm53-flash-local-semantic-probe'
    """

    serving_log: str
    """Why the engine is down, as ``VllmTargetDown``'s "Check ..." names it: "`docker logs` of the
    serving container"."""
    restarts: str
    """Whether it restarted, as the same sentence names it: "its restart count"."""
    probe_log: str
    """The semantic probe's log (what came back, one JSON line per failed step): ``docker logs
    <probe container>``."""
    running: str
    """What runs, the probe's container among it, stopped or not: ``docker ps -a``."""
    front_log: str = "the front's log"
    """The front's nginx log, where the usage meter says why it failed on a request."""

    @classmethod
    def docker(cls, stack_container: str) -> AlertLookAt:
        """Docker's commands; ``stack_container``: the serving container's name, after which the probe's is named."""
        return cls(
            serving_log="`docker logs` of the serving container",
            restarts="its restart count",
            probe_log=f"docker logs {semantic_probe.container_name(stack_container)}",
            running="docker ps -a",
            front_log=f"docker logs {stack_container}-nginx 2>&1 | grep 'usage meter'",
        )


def alert_rule(
    name: str, expr: str, severity: str, summary: str, description: str, for_: str | None
) -> dict[str, Any]:
    """One Prometheus alerting rule: its labels carry the severity, its annotations the texts."""
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


@dataclass(frozen=True)
class ScrapeSpec:
    """The slice of the stack Prometheus is built from: its own container and the facts its alert
    rules name or threshold on."""

    hardware: str
    """The profile: the rule group is named after it, and VllmTargetDown's text names it."""
    monitoring: MonitoringConfig
    """Prometheus' image, port and scrape interval; the alert thresholds (``glm:monitoring``)."""
    container: ContainerConfig
    """The serving container: Prometheus' and the probe's containers are named after it, and its
    log rotation and network mode apply to Prometheus too."""
    look_at: AlertLookAt
    """The commands the alert texts name, on the stack's target."""
    host: HostConfig
    """The host Prometheus runs on (the front's): its address is the UI's when the UI binds every
    interface."""
    serving: ServingConfig
    """vLLM's ``--max-model-len``, ``--block-size`` and MTP drafts: what the KV-pool and MTP rules
    check."""
    engine_start_seconds: float | None
    """How long an engine start took in the seeds on this hardware (None: not measured):
    VllmTargetDown waits 20 % longer."""
    semantic_probe: SemanticProbeConfig | None
    """The semantic probe when the stack deploys it (Prometheus scrapes it and adds its alerts),
    else None."""
    smoke: SmokeConfig
    """The arithmetic question and answer the probe asks, which its alert quotes."""
    usage_meter: UsageMeterConfig | None
    """The usage meter when the front's path goes through one (``glm:front.usageMeter``, Docker
    hosts): Prometheus scrapes its port; else None."""
    facts: HardwareFacts
    """The profile's facts: the latency objectives of the SLO alerts (components/render/slo_rules.py)."""

    @classmethod
    def of(cls, config: StackConfig, look_at: AlertLookAt | None = None) -> ScrapeSpec:
        """What Prometheus and its alert rules read of ``config`` (the Docker and the Kubernetes
        deployments build it alike; tests and benchmarks render the rules from it). ``look_at``:
        the commands the alerts name on the stack's target (None: a Docker host's)."""
        return cls(
            hardware=config.hardware,
            monitoring=config.monitoring,
            container=config.container,
            look_at=look_at or AlertLookAt.docker(config.container.name),
            host=config.target.host,
            serving=config.serving,
            engine_start_seconds=config.facts.known_engine_start_seconds,
            semantic_probe=config.semantic_probe if semantic_probe_runs(config) else None,
            smoke=config.smoke,
            usage_meter=config.front.usage_meter if usage_meter_runs(config) else None,
            facts=config.facts,
        )


def render_prometheus_config(
    monitoring: MonitoringConfig,
    target: str | dict[str, str],
    job: str,
    *,
    rules_path: str = RULES_PATH,
    probe_target: str | None = None,
    guarded: bool = False,
    guard_tls_name: str | None = None,
    rotation_target: str | None = None,
    meter_target: str | None = None,
    key_file: str = SCRAPE_KEY_PATH,
    ca_file: str = REPLICA_CA_PATH,
) -> str:
    """``prometheus.yml``: scrape vLLM's ``/metrics`` at ``target`` (host:port), the semantic
    probe's at ``probe_target`` when there is one, the front's rotation at ``rotation_target``, and
    load the rules.

    Several replicas: ``target`` maps each host's name to its ``host:port``; its series carry
    the label ``host``. ``guarded``: the replicas answer only their guards' keys; Prometheus holds
    the scrape key, and with ``guard_tls_name`` speaks TLS to the guards, pinning the certificate
    that carries that name. ``meter_target``: the usage meter's counters per key name (the front's status port, components/render/nginx_meter.py).
    ``rules_path``, ``key_file``, ``ca_file``: where the rules, the scrape key and the certificate
    are; a relative path is read in the config file's directory (Prometheus and promtool alike)."""
    vllm: dict[str, Any] = {
        "job_name": job,
        "metrics_path": "/metrics",
        "static_configs": [{"targets": [target]}]
        if isinstance(target, str)
        else [{"targets": [address], "labels": {"host": name}} for name, address in target.items()],
    }
    if guarded:
        vllm["authorization"] = {"type": "Bearer", "credentials_file": key_file}
        if guard_tls_name is not None:
            vllm["scheme"] = "https"
            vllm["tls_config"] = {"ca_file": ca_file, "server_name": guard_tls_name}
    scrape_configs = [vllm]
    if probe_target is not None:
        scrape_configs.append(
            {
                "job_name": semantic_probe.SCRAPE_JOB,
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [probe_target]}],
            }
        )
    if rotation_target is not None:
        scrape_configs.append(
            {
                "job_name": ROTATION_JOB,
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [rotation_target]}],
            }
        )
    if meter_target is not None:
        scrape_configs.append(
            {
                "job_name": METER_JOB,
                "metrics_path": METRICS_PATH,
                "static_configs": [{"targets": [meter_target]}],
            }
        )
    config = {
        "global": {
            "scrape_interval": monitoring.scrape_interval,
            "evaluation_interval": monitoring.scrape_interval,
        },
        "rule_files": [rules_path],
        "scrape_configs": scrape_configs,
    }
    return to_yaml(config)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (PromQL) as literal blocks, so the file reads like hand-written rules."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def to_yaml(data: Any) -> str:
    """Prometheus' YAML: keys in the order given, PromQL over several lines as a literal block.

    >>> print(to_yaml({"expr": "up == 0\\n  or absent(up)", "for": "5m"}), end="")
    expr: |-
      up == 0
        or absent(up)
    for: 5m
    """
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
