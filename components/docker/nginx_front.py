"""The Nginx front: the stack's one published port.

vLLM listens only on the private Docker network; this container is the only thing clients reach.
It checks API keys, streams SSE unbuffered, bounds request bodies, rates and requests in flight
(per key, and per client address for everything without an API key),
answers in OpenAI's error shape, and exposes nothing of vLLM but ``/v1/`` (plus ``/healthz``, and
``/metrics`` for metrics keys only). The A100 seed's vLLM port was scanned within a day of being
left open (SPEC §2, cross-cutting).

What nginx runs is rendered in components/render/nginx_conf.py (pure, run through the real ``nginx`` by the
tests). ``NginxFront`` wires it into Docker: a container whose definition does not depend on the
config, and an ``NginxReload`` that delivers each config as files and reloads nginx gracefully
(components/docker/nginx_reload.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from components.config import ContainerConfig, FrontConfig, HostConfig
from components.docker.nginx_reload import NginxReload, secrets_digest
from components.docker.rotation_requests import FRONT_COMMAND, FRONT_REQUESTS_DIR, volume_name
from components.docker.target import exec_ssh
from components.docker.vllm_server import upstream_hosts
from components.render.nginx_conf import CONTAINER_PORT, SECRET_FILES, render_front_files, render_release_conf
from components.render.nginx_meter import METER_STATE_DIR, MeterRoute
from components.render.prometheus_config import CONTAINER_PORT as PROMETHEUS_PORT
from components.render.prometheus_config import container_name as prometheus_container_name

STOP_GRACE_SECONDS = 30
"""When the front container itself is replaced (image, port): SIGQUIT, then this long to drain."""


def front_container_name(container: ContainerConfig) -> str:
    """The front's Docker name, from the serving container's (``glm:container.name``)."""
    return f"{container.name}-nginx"


def public_base(front: FrontConfig, host: HostConfig) -> str:
    """``http(s)://<host>:<front.port>``: the bind address, or for a wildcard bind the address of
    ``host``, the one the front runs on (``localhost`` for the local Docker engine)."""
    if front.bind_address not in ("0.0.0.0", "::", ""):
        address = front.bind_address
    elif host.is_local:
        address = "localhost"
    else:
        address = host.ssh_address
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"{'https' if front.tls else 'http'}://{address}:{front.port}"


def public_url(front: FrontConfig, host: HostConfig) -> str:
    """The OpenAI base URL of the front: ``http(s)://<host>:<front.port>/v1``."""
    return f"{public_base(front, host)}/v1"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def shown_keys(names: Iterable[str], weights: Mapping[str, float] | None = None) -> dict[str, float | bool]:
    """Key names as the front's release shows them in a diff: by name, so that adding one reads
    ``+ bob``, not as a sorted list's renames (``"local" => "bob"``); where the usage meter shares
    the engine's slots, each name's weight (default 1), so that a weight change reads
    ``~ bob: 2 => 3`` beside the secret files' digest (the share table is one of those files).

    >>> shown_keys(["local", "bob"])
    {'bob': True, 'local': True}
    >>> shown_keys(["local", "bob"], {"bob": 3.0, "local": 0.5})
    {'bob': 3, 'local': 0.5}
    """
    if weights is None:
        return {name: True for name in sorted(names)}
    shown = {name: float(weights.get(name, 1.0)) for name in sorted(names)}
    return {name: int(w) if w.is_integer() else w for name, w in shown.items()}


def front_fingerprint(
    nginx_conf: str, image: str, key_names: list[str], metrics_key_names: list[str], secrets: str
) -> str:
    """One hash of everything between a client and the model at the front, no secret value in it:
    the rendered nginx.conf, the image, the key names and the secret files' digest."""
    parts = {"conf": nginx_conf, "image": image, "keys": key_names, "metrics": metrics_key_names}
    return _sha256(json.dumps({**parts, "secrets": secrets}, sort_keys=True))


def _secret_files(
    front: FrontConfig,
    api_keys: pulumi.Output[dict[str, str]],
    metrics_keys: pulumi.Output[dict[str, str]],
    tls_files: tuple[pulumi.Output[str], pulumi.Output[str]] | None,
    replica_files: pulumi.Output[dict[str, str]] | None,
    meter: MeterRoute | None,
) -> pulumi.Output[dict[str, str]]:
    """The front's files that hold keys or TLS material, as one secret (delivered on stdin)."""
    tls_pair = pulumi.Output.all(*tls_files) if front.tls and tls_files is not None else None

    def secret_files(args: list[object]) -> dict[str, str]:
        keys, scrapers, guards, *pair = args
        files = render_front_files(
            front,
            dict(keys),  # type: ignore[call-overload]
            dict(scrapers),  # type: ignore[call-overload]
            (str(pair[0][0]), str(pair[0][1])) if pair else None,  # type: ignore[index]
            replica_files=dict(guards) if guards is not None else None,  # type: ignore[call-overload]
            meter=meter,
        )
        return {k: v for k, v in files.items() if k in SECRET_FILES}

    inputs: list[pulumi.Input[object]] = [api_keys, metrics_keys, replica_files]
    if tls_pair is not None:
        inputs.append(tls_pair)
    return pulumi.Output.secret(pulumi.Output.all(*inputs).apply(secret_files))


@dataclass(frozen=True)
class NginxFrontArgs:
    """What the front reads: its config, where it runs, and the keys and TLS pair it serves."""

    front: FrontConfig
    """``glm:front``: the image, published port and bind address, TLS, limits and timeouts."""
    host: HostConfig
    """The host the front runs on (``glm:target.frontHost``): its Docker engine and public address."""
    container: ContainerConfig
    """``glm:container``: the serving container's config, which names the front (``<name>-nginx``),
    rotates its logs and says how it reaches vLLM."""
    network_name: pulumi.Input[str]
    """The serving container's private network, the one the front joins."""
    api_keys: pulumi.Output[dict[str, str]]
    """Client name to API key (secret): ``glm:apiKeys`` and the keys the stack made for itself."""
    tls_files: tuple[pulumi.Output[str], pulumi.Output[str]] | None = None
    """(certificate PEM, key PEM) with ``glm:front.tls``; config loading refuses TLS without them."""
    metrics_keys: pulumi.Output[dict[str, str]] | None = None
    """Client name to metrics key (secret): ``glm:metricsKeys`` and the gate's; valid on ``/metrics`` only."""
    replica_files: pulumi.Output[dict[str, str]] | None = None
    """Several hosts: the replica key and pinned certificate the front sends to the replicas' guards
    (``GuardCredentials.front_files``)."""
    meter: MeterRoute | None = None
    """The usage meter in the inference routes (the engine's slots it shares, the stack's own
    clients; components/render/nginx_meter.py); None: nginx straight to the replicas."""


class NginxFront(pulumi.ComponentResource):
    """Nginx in front of vLLM: the only published port of the stack."""

    url: pulumi.Output[str]
    """The OpenAI base URL clients use (``.../v1``)."""
    metrics_url: pulumi.Output[str]
    """vLLM's ``/metrics`` through the front; answers only with a ``glm:metricsKeys`` bearer token."""
    container_name: pulumi.Output[str]
    """Docker name of the front container, resolved once its config is live."""
    hostname: str
    """The same name, known at preview: how containers on the private network reach the front."""
    container: docker.Container
    fingerprint: pulumi.Output[str]
    """Changes whenever the front's behaviour can: config, TLS material, image, key names (no values)."""

    def __init__(self, name: str, args: NginxFrontArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        """The front lists no replica in its config: each replica's gate puts it in the rotation
        (components/docker/rotation.py) by its fixed address, so the front's config loads, and a key can be
        revoked, whether or not any engine is up.
        """
        super().__init__("glm:front:NginxFront", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        front, host, container = args.front, args.host, args.container
        container_name = front_container_name(container)

        image = docker.RemoteImage(f"{name}-image", name=front.image, keep_locally=True, opts=child)

        self.container = nginx = self._container(name, args, image)

        # The names are config keys, not secrets: a reviewer sees which clients change.
        key_names = pulumi.Output.unsecret(pulumi.Output.from_input(args.api_keys).apply(sorted))
        route = args.meter
        nginx_conf = render_release_conf(
            front,
            tls=front.tls,
            guarded=args.replica_files is not None,
            meter=route,
            # The status page (/status/) and its queries, from the stack's Prometheus.
            prometheus=f"{prometheus_container_name(container)}:{PROMETHEUS_PORT}",
        )
        metrics = pulumi.Output.from_input(args.metrics_keys if args.metrics_keys is not None else {})
        metrics_names = pulumi.Output.unsecret(metrics.apply(sorted))
        files = _secret_files(front, args.api_keys, metrics, args.tls_files, args.replica_files, route)
        # Hashes, not values: shown in the diff and fed to the gate, so they are safe in plain.
        digest = pulumi.Output.unsecret(files.apply(secrets_digest))
        cert_sha = (
            pulumi.Output.unsecret(args.tls_files[0].apply(_sha256))
            if front.tls and args.tls_files is not None
            else None
        )
        self.fingerprint = pulumi.Output.all(image.image_id, key_names, metrics_names, digest).apply(
            lambda a: front_fingerprint(nginx_conf, str(a[0]), a[1], a[2], str(a[3]))
        )
        ssh = exec_ssh(host)
        # The keys' weights, where the meter shares the engine's slots by them.
        sharing = args.meter is not None and front.usage_meter.fair_share
        shared = dict(front.usage_meter.weights) if sharing else None
        self.reload = NginxReload(
            f"{name}-config",
            {
                "docker_host": host.docker_host,
                "ssh": ssh,
                "container": nginx.name,
                # The releases live in the container (removed with it, keys included): a new
                # container (image, port) waits in START_COMMAND until this delivers them again.
                "container_id": nginx.id,
                "nginx_conf": nginx_conf,
                "api_key_names": key_names.apply(lambda names: shown_keys(names, shared)),
                "metrics_key_names": metrics_names.apply(shown_keys),
                "tls_certificate_sha256": cert_sha,
                "secrets_digest": digest,
                "secret_files": files,
                "fingerprint": self.fingerprint,
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[nginx]),
        )

        self.url = pulumi.Output.from_input(public_url(front, host))
        self.metrics_url = pulumi.Output.from_input(f"{public_base(front, host)}/metrics")
        # Known at preview, so a config reload never shows as a change of what only needs the name.
        self.hostname = container_name
        # Outputs resolve once the new config is live, so dependents (the gate) see the new front.
        self.container_name = pulumi.Output.all(nginx.name, self.reload.release).apply(lambda a: str(a[0]))
        self.register_outputs(
            {
                "url": self.url,
                "metrics_url": self.metrics_url,
                "container_name": self.container_name,
                "fingerprint": self.fingerprint,
            }
        )

    def _container(self, name: str, args: NginxFrontArgs, image: docker.RemoteImage) -> docker.Container:
        """The front's container: its labels, its volumes (the probe's requests, the meter's usage),
        its network and published port. Nothing here depends on keys, TLS material or nginx.conf."""
        front, container = args.front, args.container
        container_name = front_container_name(container)
        child = pulumi.ResourceOptions(parent=self)
        # Read by the policy pack (front-tls-on-public-bind): TLS, or the stack's plain-HTTP opt-in.
        labels = [
            docker.ContainerLabelArgs(label="glm53.role", value="front"),
            docker.ContainerLabelArgs(label="glm53.tls", value="on" if front.tls else "off"),
        ]
        if front.allow_plain_http and not front.tls:
            labels.append(docker.ContainerLabelArgs(label="glm53.plain-http", value="accepted"))

        # The probe's only way into the front: eject/readmit requests (components/docker/rotation_requests.py).
        requests = docker.Volume(f"{name}-rotation-requests", name=volume_name(container.name), opts=child)
        self.requests_volume = requests.name
        """The volume the semantic probe writes its eject/readmit requests to."""
        volumes = [docker.ContainerVolumeArgs(volume_name=requests.name, container_path=FRONT_REQUESTS_DIR)]
        if args.meter is not None:
            # The usage meter's counters outlive the container (a new image, a restart): usage, and
            # the budgets that rest on it, never reset.
            usage = docker.Volume(f"{name}-usage", name=f"{container_name}-usage", opts=child)
            volumes.append(docker.ContainerVolumeArgs(volume_name=usage.name, container_path=METER_STATE_DIR))
        # Nothing here depends on keys, TLS material or nginx.conf: those changes reach nginx as a
        # reload (NginxReload below), never as a new container (every `uploads` change replaces one).
        return docker.Container(
            f"{name}-nginx",
            name=container_name,
            image=image.image_id,
            entrypoints=["/bin/sh", "-c"],
            # START_COMMAND (nginx as PID 1) with the request loop started before it.
            command=[FRONT_COMMAND],
            volumes=volumes,
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=args.network_name)],
            ports=[
                docker.ContainerPortArgs(internal=CONTAINER_PORT, external=front.port, ip=front.bind_address)
            ],
            labels=labels,
            hosts=upstream_hosts(container),
            restart="unless-stopped",
            log_driver="json-file",
            log_opts=container.log_opts,
            # docker stop sends the image's STOPSIGNAL (SIGQUIT: nginx's graceful shutdown).
            destroy_grace_seconds=STOP_GRACE_SECONDS,
            # A fixed container name and host port cannot exist twice: remove the old one first.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
