"""Prometheus on the Docker host: scrape vLLM's ``/metrics`` and alert on the failure modes the
seeds lived through.

The component runs the official image with two rendered files: ``prometheus.yml``
(components/render/prometheus_config.py: what to scrape, and the paths and flags) and ``rules.yml``
(components/render/prometheus_rules.py: the alerts and why each exists).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from components import semantic_probe
from components.docker.nginx_front import front_container_name
from components.docker.vllm_server import upstream_hosts
from components.render import status_page
from components.render.nginx_conf import STATUS_PORT
from components.render.prometheus_config import (
    CONFIG_PATH,
    CONTAINER_PORT,
    DEFAULT_JOB,
    PROMETHEUS_FLAGS,
    REPLICA_CA_PATH,
    RULES_PATH,
    SCRAPE_KEY_PATH,
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


def _credential_uploads(guarded: GuardedScrape | None) -> list[docker.ContainerUploadArgs]:
    if guarded is None:
        return []
    files = [docker.ContainerUploadArgs(file=SCRAPE_KEY_PATH, content=guarded.key, permissions="0644")]
    if guarded.certificate is not None:
        files.append(
            docker.ContainerUploadArgs(file=REPLICA_CA_PATH, content=guarded.certificate, permissions="0644")
        )
    return files


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
        monitoring, container, probe = spec.monitoring, spec.container, spec.semantic_probe
        probe_target = semantic_probe.scrape_target(container.name, probe.port) if probe else None
        child = pulumi.ResourceOptions(parent=self)

        image = docker.RemoteImage(f"{name}-image", name=monitoring.image, keep_locally=True, opts=child)
        prometheus = docker.Container(
            f"{name}-prometheus",
            name=container_name(container),
            image=image.image_id,
            # The status page's files are served at /user/, which the front proxies (/status/).
            command=[*PROMETHEUS_FLAGS, f"--web.user-assets={status_page.ASSETS_DIR}"],
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=network_name)],
            ports=[
                docker.ContainerPortArgs(
                    internal=CONTAINER_PORT, external=monitoring.port, ip=monitoring.bind_address
                )
            ],
            # The image runs as `nobody`: the files must be world-readable (only the guards' scrape key,
            # inside this container, is a secret, and it opens no inference route; the config and the
            # rules are not).
            uploads=[
                docker.ContainerUploadArgs(
                    file=CONFIG_PATH,
                    content=render_prometheus_config(
                        monitoring,
                        target,
                        DEFAULT_JOB,
                        probe_target=probe_target,
                        guarded=guarded is not None,
                        guard_tls_name=guarded.tls_name if guarded is not None else None,
                        rotation_target=f"{front_container_name(container)}:{STATUS_PORT}",
                        meter_target=f"{front_container_name(container)}:{STATUS_PORT}"
                        if spec.usage_meter is not None
                        else None,
                    ),
                    permissions="0644",
                ),
                docker.ContainerUploadArgs(
                    file=RULES_PATH,
                    content=render_alert_rules(spec, by_host=isinstance(target, dict)),
                    permissions="0644",
                ),
                *_credential_uploads(guarded),
                # Not secret (the page holds no data and no key), readable by the image's `nobody`.
                *[
                    docker.ContainerUploadArgs(
                        file=f"{status_page.ASSETS_DIR}/{name}", content=content, permissions="0644"
                    )
                    for name, content in sorted(status_page.page_files().items())
                ],
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

        host = monitoring.bind_address
        if host in ("0.0.0.0", "::"):
            host = "localhost" if spec.host.is_local else spec.host.ssh_address
        if ":" in host:  # an IPv6 literal
            host = f"[{host}]"
        self.url = pulumi.Output.from_input(f"http://{host}:{monitoring.port}")
        self.container_name = prometheus.name
        self.container = prometheus
        self.register_outputs({"url": self.url, "container_name": self.container_name})
