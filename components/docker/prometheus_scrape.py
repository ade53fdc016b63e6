"""Prometheus on the Docker host: scrape vLLM's ``/metrics`` and alert on the failure modes the
seeds lived through.

The component runs the official image with rendered files: ``prometheus.yml``
(components/render/prometheus_config.py: what to scrape, and the paths and flags), ``rules.yml``
(components/render/prometheus_rules.py: the alerts and why each exists) and the status page's. The
container never depends on them: a ``PrometheusRelease`` delivers them and reloads Prometheus in
place (components/docker/prometheus_release.py), so a rule or a scrape job changes no container and
loses no series.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from components import semantic_probe
from components.docker.nginx_front import front_container_name
from components.docker.nginx_reload import secrets_digest
from components.docker.prometheus_release import (
    CONFIG_FILE,
    PAGE_DIR,
    REPLICA_CA_FILE,
    RULES_FILE,
    SCRAPE_KEY_FILE,
    START_COMMAND,
    PrometheusRelease,
)
from components.docker.target import exec_ssh
from components.docker.vllm_server import upstream_hosts
from components.render import status_page
from components.render.nginx_conf import STATUS_PORT
from components.render.prometheus_config import (
    CONTAINER_PORT,
    DEFAULT_JOB,
    ScrapeSpec,
    container_name,
    render_prometheus_config,
)
from components.render.prometheus_rules import render_alert_rules


@dataclass(frozen=True)
class GuardedScrape:
    """How Prometheus reaches replicas behind their guards (components/docker/replica_guard.py)."""

    key: pulumi.Output[str]
    """The guards' scrape key (``GuardCredentials.scrape_key``), never the replica key the front sends."""
    certificate: pulumi.Output[str] | None = None
    tls_name: str | None = None
    """The name the pinned certificate carries; None: plain HTTP to the guards."""


def _secret_files(guarded: GuardedScrape | None) -> pulumi.Output[dict[str, str]]:
    """The guards' scrape key (and with TLS their certificate), as one secret (delivered on stdin)."""
    if guarded is None:
        return pulumi.Output.secret({})
    parts: list[pulumi.Input[str]] = [guarded.key]
    if guarded.certificate is not None:
        parts.append(guarded.certificate)
    names = [SCRAPE_KEY_FILE, REPLICA_CA_FILE][: len(parts)]
    return pulumi.Output.secret(
        pulumi.Output.all(*parts).apply(lambda values: dict(zip(names, values, strict=True)))
    )


def release_files(
    spec: ScrapeSpec, target: str | dict[str, str], guarded: GuardedScrape | None
) -> dict[str, str]:
    """The release's files that hold no secret, by their name in it: prometheus.yml (which names the
    rules, the key and the certificate relative to itself), rules.yml and the status page's."""
    container = spec.container
    probe = spec.semantic_probe
    config = render_prometheus_config(
        spec.monitoring,
        target,
        DEFAULT_JOB,
        rules_path=RULES_FILE,
        probe_target=semantic_probe.scrape_target(container.name, probe.port) if probe else None,
        guarded=guarded is not None,
        guard_tls_name=guarded.tls_name if guarded is not None else None,
        rotation_target=f"{front_container_name(container)}:{STATUS_PORT}",
        meter_target=f"{front_container_name(container)}:{STATUS_PORT}"
        if spec.usage_meter is not None
        else None,
        key_file=SCRAPE_KEY_FILE,
        ca_file=REPLICA_CA_FILE,
    )
    return {
        CONFIG_FILE: config,
        RULES_FILE: render_alert_rules(spec, by_host=isinstance(target, dict)),
        # Not secret (the page holds no data and no key).
        **{f"{PAGE_DIR}/{name}": content for name, content in sorted(status_page.page_files().items())},
    }


class PrometheusScrape(pulumi.ComponentResource):
    """Prometheus on the private network, scraping vLLM and evaluating the stack's alert rules."""

    url: pulumi.Output[str]
    """The Prometheus UI (loopback by default: reach it through an SSH tunnel)."""
    container_name: pulumi.Output[str]
    """Docker name of the Prometheus container."""
    container: docker.Container
    """The Prometheus container (its replacement is said in the preview: components/change_cost.py)."""

    def __init__(
        self,
        name: str,
        spec: ScrapeSpec,
        network_name: pulumi.Input[str],
        target: str | dict[str, str],
        opts: pulumi.ResourceOptions | None = None,
        guarded: GuardedScrape | None = None,
    ) -> None:
        """``target``: vLLM's host:port, or several replicas' by host name; ``guarded``: their
        guards' scrape key (readable inside this container only: the image runs as ``nobody``)."""
        super().__init__("glm:monitoring:PrometheusScrape", name, None, opts)
        monitoring, container = spec.monitoring, spec.container
        child = pulumi.ResourceOptions(parent=self)

        image = docker.RemoteImage(f"{name}-image", name=monitoring.image, keep_locally=True, opts=child)
        # Nothing here depends on the rules, the scrape config or the page: those reach Prometheus
        # as a release and a reload (PrometheusRelease below), never as a new container (every
        # `uploads` change replaced one, and its series with it).
        prometheus = docker.Container(
            f"{name}-prometheus",
            name=container_name(container),
            image=image.image_id,
            entrypoints=["/bin/sh", "-c"],
            command=[START_COMMAND],
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=network_name)],
            ports=[
                docker.ContainerPortArgs(
                    internal=CONTAINER_PORT, external=monitoring.port, ip=monitoring.bind_address
                )
            ],
            labels=[
                docker.ContainerLabelArgs(label="glm53.role", value="monitoring"),
                # Prometheus checks no credential: beyond loopback only as the stack's explicit choice,
                # which the policy pack (published-port-needs-credential) reads here.
                *(
                    [docker.ContainerLabelArgs(label="glm53.public-bind", value="accepted")]
                    if monitoring.allow_public_bind
                    else []
                ),
            ],
            hosts=upstream_hosts(container),
            restart="unless-stopped",
            log_driver="json-file",
            log_opts=container.log_opts,
            # A fixed container name and host port cannot exist twice: remove the old one first.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )

        files = _secret_files(guarded)
        self.release = PrometheusRelease(
            f"{name}-files",
            {
                "docker_host": spec.host.docker_host,
                "ssh": exec_ssh(spec.host),
                "container": prometheus.name,
                # The releases live in the container: a new one (image, port) waits in its command
                # until this delivers them again.
                "container_id": prometheus.id,
                "contents": release_files(spec, target, guarded),
                # A digest, not the values: shown and compared, so safe in plain.
                "secrets_digest": pulumi.Output.unsecret(files.apply(secrets_digest)),
                "secret_files": files,
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[prometheus]),
        )

        host = monitoring.bind_address
        if host in ("0.0.0.0", "::"):
            host = "localhost" if spec.host.is_local else spec.host.ssh_address
        if ":" in host:  # an IPv6 literal
            host = f"[{host}]"
        self.url = pulumi.Output.from_input(f"http://{host}:{monitoring.port}")
        # Resolved once the files are live, so dependents (the gate) see the rules loaded.
        self.container_name = pulumi.Output.all(prometheus.name, self.release.release).apply(
            lambda a: str(a[0])
        )
        self.container = prometheus
        self.register_outputs({"url": self.url, "container_name": self.container_name})
