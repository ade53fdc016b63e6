"""ReplicaGuard: the only way into a replica on a host other than the front's.

Such a replica must be reachable from the front's host, so something listens on the host's private
address; vLLM itself checks no key (or, with ``--api-key``, only on ``/v1``; SPEC §6), and an open
vLLM port was scanned and used within a day (A100 seed §6.4). The guard is an nginx on the replica's
private Docker network that publishes ``publish_address:serving.port`` and forwards to vLLM's fixed
address only requests that carry one of the stack's two guard keys, each on its own routes:

- the replica key (the front's, and the semantic probe's for asking a replica directly) on the
  front's inference routes and on ``/metrics``, ``/version``, ``/health``, which the front proxies
  for its metrics keys;
- the scrape key (Prometheus', and the probe's for its ``/metrics`` reads) on those three read-only
  routes only: whoever reads Prometheus' files cannot run inference on a replica (issue 33,
  finding 3).

With ``glm:front.tls`` it serves TLS with a per-stack self-signed certificate that the front pins, so
keys and prompts never cross the network in clear.

The files are components/render/replica_guard.py's (the Kubernetes pods' guard serves the same);
the keys and the certificate are the stack's (components/serving/replica_credentials.py).
``ReplicaGuard`` wires the files into Docker the way ``NginxFront`` does: a container whose
definition does not depend on the config, and an ``NginxReload`` that delivers each config with a
graceful reload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_docker as docker

from components.config import ContainerConfig, FrontConfig, HostConfig, binds_all_interfaces
from components.docker.nginx_front import STOP_GRACE_SECONDS, front_fingerprint, shown_keys
from components.docker.nginx_reload import START_COMMAND, NginxReload, secrets_digest
from components.docker.target import exec_ssh
from components.render.replica_guard import (
    CLIENT,
    CONTAINER_PORT,
    SCRAPER,
    SECRET_FILES,
    render_guard_conf,
    render_guard_files,
)
from components.serving.replica_credentials import GuardCredentials, ReplicaCertificate
from components.serving.spec import ServingSpec


def guard_address(container: ContainerConfig) -> str:
    """The guard's fixed address on the replica's private network, beside vLLM's (``.10``)."""
    return str(container.subnet.network_address + 11)


def _one_address(name: str, address: str) -> str:
    """The address without brackets; a wildcard (every interface) is refused."""
    if binds_all_interfaces(address):
        raise ValueError(f"{name}: the guard publishes on one address, not {address!r}")
    return address.strip("[]")


@dataclass(frozen=True)
class ReplicaGuardArgs:
    """The replica a guard stands in front of, where it publishes, and what it accepts."""

    serving: ServingSpec
    """The replica's serving container: vLLM's fixed address and port, the guard's name and logs."""
    front: FrontConfig
    """``glm:front``: the nginx image, limits and timeouts the guard shares with the front, and TLS."""
    host: HostConfig
    """The replica's host (pass its Docker provider in ``opts``)."""
    publish_address: str | None
    """The host's private address the guard publishes ``serving.port`` on; None publishes nothing:
    the replica on the front's own host, guarded all the same so that every server of the front's
    upstream speaks the same scheme (with TLS a ``proxy_pass https://`` cannot mix in a plain-HTTP vLLM)."""
    network_name: pulumi.Input[str]
    """The replica's private network, where vLLM keeps ``serving.container.vllm_address``."""
    credentials: GuardCredentials
    """The stack's replica and scrape keys and, with ``glm:front.tls``, the certificate the guard serves."""


class ReplicaGuard(pulumi.ComponentResource):
    """Nginx on a replica's host: the replica's one published port, answering only the guard keys."""

    upstream: str
    """``host:port`` the front lists for this replica (known at preview): the published address, or
    on the front's own host the guard's container name on the shared private network."""
    container: docker.Container
    reload: NginxReload
    fingerprint: pulumi.Output[str]
    """Changes whenever the guard's behaviour can: config, image, key or TLS pair (no value in it)."""

    def __init__(self, name: str, args: ReplicaGuardArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        """TLS follows ``args.front.tls``, with ``args.credentials.certificate``."""
        super().__init__("glm:serving:ReplicaGuard", name, None, opts)
        serving, front, credentials = args.serving, args.front, args.credentials
        text = None if args.publish_address is None else _one_address(name, args.publish_address)
        tls = credentials.certificate if front.tls else None
        if front.tls and tls is None:
            raise ValueError(f"{name}: glm:front.tls is on but the guard credentials carry no certificate")
        c = serving.container
        self.upstream = _upstream(c, serving.port, text)
        image = docker.RemoteImage(
            f"{name}-image", name=front.image, keep_locally=True, opts=pulumi.ResourceOptions(parent=self)
        )
        self.container = _container(name, args, image.image_id, text, tls is not None, parent=self)
        nginx_conf = render_guard_conf(front, f"{c.vllm_address}:{serving.port}", tls is not None)
        files = _secret_files(front, credentials, tls)
        digest = pulumi.Output.unsecret(files.apply(secrets_digest))
        self.fingerprint = pulumi.Output.all(image.image_id, digest).apply(
            lambda a: front_fingerprint(nginx_conf, str(a[0]), [CLIENT], [SCRAPER], str(a[1]))
        )
        ssh = exec_ssh(args.host)
        self.reload = NginxReload(
            f"{name}-config",
            {
                "docker_host": args.host.docker_host,
                "ssh": ssh,
                "container": self.container.name,
                "container_id": self.container.id,
                "nginx_conf": nginx_conf,
                "api_key_names": shown_keys([CLIENT]),
                "metrics_key_names": shown_keys([SCRAPER]),
                "tls_certificate_sha256": tls.certificate_sha256 if tls is not None else None,
                "secrets_digest": digest,
                "secret_files": files,
                "fingerprint": self.fingerprint,
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container]),
        )
        self.register_outputs({"upstream": self.upstream, "fingerprint": self.fingerprint})


def _upstream(c: ContainerConfig, port: int, published: str | None) -> str:
    """``host:port`` the front lists for the guard: its published address, else its fixed one."""
    if published is None:
        # A fixed address, as vLLM's: the front loads its rotation without a name lookup.
        return f"{guard_address(c)}:{CONTAINER_PORT}"
    return f"[{published}]:{port}" if ":" in published else f"{published}:{port}"


def _container(
    name: str,
    args: ReplicaGuardArgs,
    image_id: pulumi.Input[str],
    published: str | None,
    tls: bool,
    parent: pulumi.Resource,
) -> docker.Container:
    """The guard's nginx container. Nothing here depends on the key, the TLS pair or nginx.conf:
    those reach nginx as a reload."""
    c, front = args.serving.container, args.front
    labels = [
        docker.ContainerLabelArgs(label="glm53.role", value="replica-guard"),
        docker.ContainerLabelArgs(label="glm53.tls", value="on" if tls else "off"),
    ]
    if front.allow_plain_http and not tls:
        # Plain HTTP between hosts only where the stack accepted it for its front too:
        # the policy pack (front-tls-on-public-bind) reads this as it does on the front.
        labels.append(docker.ContainerLabelArgs(label="glm53.plain-http", value="accepted"))
    return docker.Container(
        f"{name}-nginx",
        name=f"{c.name}-guard",
        image=image_id,
        entrypoints=["/bin/sh", "-c"],
        command=[START_COMMAND],
        networks_advanced=[
            docker.ContainerNetworksAdvancedArgs(name=args.network_name, ipv4_address=guard_address(c))
        ],
        ports=[docker.ContainerPortArgs(internal=CONTAINER_PORT, external=args.serving.port, ip=published)]
        if published is not None
        else None,
        labels=labels,
        restart="unless-stopped",
        log_driver="json-file",
        log_opts=c.log_opts,
        destroy_grace_seconds=STOP_GRACE_SECONDS,
        # A fixed container name and host port cannot exist twice: remove the old one first.
        opts=pulumi.ResourceOptions(parent=parent, delete_before_replace=True),
    )


def _secret_files(
    front: FrontConfig, credentials: GuardCredentials, tls: ReplicaCertificate | None
) -> pulumi.Output[dict[str, str]]:
    """The guard's files that hold a key or the TLS pair, rendered from the secret inputs."""

    def render(values: list[Any]) -> dict[str, str]:
        pair = (values[2], values[3]) if tls else None
        files = render_guard_files(front, "vllm:0", str(values[0]), str(values[1]), pair)
        return {k: v for k, v in files.items() if k in SECRET_FILES}

    inputs: list[pulumi.Input[Any]] = [credentials.key, credentials.scrape_key]
    if tls is not None:
        inputs += [tls.certificate, tls.private_key]
    return pulumi.Output.secret(pulumi.Output.all(*inputs).apply(render))
