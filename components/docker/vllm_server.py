"""VllmServer: the `vllm serve` container on a Docker host, run from the ``ServingSpec``
(components/serving/spec.py) as rendered once per deployment, on a private network with no
published port.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from components.config.replica import ContainerConfig
from components.serving.spec import ServingSpec, health_probe

REPLICA_LABEL = "glm53.replica"
"""The serving container's label naming its replica in the front's rotation, read by the drain
before the container goes (components/docker/drain_hook.py)."""
VLLM_NETWORK_ALIAS = "vllm"
VLLM_HOST_GATEWAY = "host.docker.internal"


def _env_entry(name: str, secret: pulumi.Output[str]) -> pulumi.Output[str]:
    return pulumi.Output.secret(secret.apply(lambda value: f"{name}={value}"))


def upstream_hosts(container: ContainerConfig) -> list[docker.ContainerHostArgs] | None:
    """/etc/hosts entries a container needs to reach vLLM: on the host network, the gateway."""
    if container.network_mode != "host":
        return None
    return [docker.ContainerHostArgs(host=VLLM_HOST_GATEWAY, ip="host-gateway")]


def go_duration(seconds: int) -> str:
    """A duration as Go prints it (``1800`` → ``30m0s``): the Docker provider reads health-check
    durations back in this form, so any other spelling would show as a change on every preview.

    >>> go_duration(30), go_duration(300), go_duration(3725)
    ('30s', '5m0s', '1h2m5s')
    """
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


@dataclass(frozen=True)
class VllmServerArgs:
    """The serving container as rendered, the image it runs, and what it mounts besides."""

    serving: ServingSpec
    """``render_serving``'s, rendered once per deployment."""
    image: pulumi.Input[str]
    """The serving image (``ServingImage.ref``)."""
    mounts: list[docker.ContainerMountArgs]
    """The model volume's mounts (``ModelVolume.mounts``); ``serving.mounts`` are added after them."""
    secret_env: Mapping[str, pulumi.Output[str]] | None = None
    """``glm:servingSecretEnv``: joins the env as secret entries. The SDK then stores the whole
    ``envs`` encrypted, so a preview shows it as ``[secret]`` (the plain env stays readable in the
    ``verified`` output and the fingerprint)."""
    replica: str | None = None
    """The replica's name in the front's rotation: a label, read by ``drain``."""
    drain: pulumi.ResourceHook | None = None
    """The ``before_delete`` hook that takes the replica out of rotation before Docker stops it."""


class VllmServer(pulumi.ComponentResource):
    """The serving container on a private Docker network; it publishes no port."""

    container_name: pulumi.Output[str]
    """Name of the serving container on the host."""
    network_name: pulumi.Output[str]
    """The private network the front and Prometheus join."""
    upstream: str
    """host:port of vLLM on the private network."""

    def __init__(self, name: str, args: VllmServerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("glm:serving:VllmServer", name, None, opts)
        serving = args.serving
        c = serving.container
        self.network = _network(name, c, self)
        self.container = docker.Container(
            f"{name}-vllm",
            name=c.name,
            image=args.image,
            entrypoints=["vllm", "serve"],
            command=serving.argv,
            envs=_envs(serving, args.secret_env),
            gpus="all" if serving.nvidia_gpus else None,
            devices=[
                docker.ContainerDeviceArgs(host_path=d, container_path=d, permissions="rwm")
                for d in serving.devices
            ],
            mounts=_mounts(serving, args.mounts),
            shm_size=c.shm_size_mb,
            ipc_mode=c.ipc_mode,
            privileged=c.privileged,
            network_mode=c.network_mode,
            networks_advanced=_private_address(c, self.network),
            restart=c.restart,
            # SIGTERM first: with vLLM's --shutdown-timeout, requests in flight finish while the
            # front sends new ones to the other replicas (SPEC §6: the default 0 kills them).
            destroy_grace_seconds=c.stop_grace_seconds or None,
            healthcheck=_healthcheck(serving),
            log_driver="json-file",
            log_opts=c.log_opts,
            labels=_labels(serving, args.replica),
            wait=False,
            # A fixed container name cannot exist twice: remove the old one first.
            opts=pulumi.ResourceOptions(
                parent=self,
                delete_before_replace=True,
                hooks=pulumi.ResourceHookBinding(before_delete=[args.drain]) if args.drain else None,
            ),
        )
        self.container_name = self.container.name
        self.network_name = self.network.name
        host = VLLM_NETWORK_ALIAS if c.network_mode == "bridge" else VLLM_HOST_GATEWAY
        self.upstream = f"{host}:{serving.port}"
        # The fixed address needs no DNS: the front loads its config whether or not vLLM runs.
        near = c.vllm_address if c.network_mode == "bridge" else VLLM_HOST_GATEWAY
        self.address = f"{near}:{serving.port}"
        """host:port where the front on this host reaches vLLM, without a name lookup."""
        self.register_outputs({"container_name": self.container_name, "network_name": self.network_name})


def _network(name: str, c: ContainerConfig, parent: pulumi.Resource) -> docker.Network:
    """The replica's private bridge network (``glm:container.subnet``), which the front and
    Prometheus join."""
    return docker.Network(
        f"{name}-network",
        name=f"{c.name}-net",
        driver="bridge",
        # The gateway spelled out: Docker 20.10 records it only after a daemon restart, and
        # `up --refresh` would then see a changed ipamConfigs and replace the network.
        ipam_configs=[
            docker.NetworkIpamConfigArgs(subnet=str(c.subnet), gateway=str(c.subnet.network_address + 1))
        ],
        # A fixed network name cannot exist twice (Docker >= 25 refuses, 20.10 makes later
        # lookups ambiguous): a new subnet deletes the old network first, and with it the
        # containers attached to it, which are replaced anyway (vLLM's address is in the subnet).
        opts=pulumi.ResourceOptions(parent=parent, delete_before_replace=True),
    )


def _envs(
    serving: ServingSpec, secret_env: Mapping[str, pulumi.Output[str]] | None
) -> list[pulumi.Input[str]]:
    """The rendered env, then ``glm:servingSecretEnv`` as secret entries in name order."""
    return [
        *[f"{k}={v}" for k, v in serving.env.items()],
        *[_env_entry(k, v) for k, v in sorted((secret_env or {}).items())],
    ]


def _mounts(serving: ServingSpec, volume: list[docker.ContainerMountArgs]) -> list[docker.ContainerMountArgs]:
    """The model volume's mounts, then the rendered bind mounts."""
    binds = [
        docker.ContainerMountArgs(type="bind", source=m.source, target=m.target, read_only=m.read_only)
        for m in serving.mounts
    ]
    return [*volume, *binds]


def _private_address(
    c: ContainerConfig, network: docker.Network
) -> list[docker.ContainerNetworksAdvancedArgs] | None:
    """On a bridge, vLLM's fixed address and alias on the private network; none on the host's."""
    if c.network_mode != "bridge":
        return None
    return [
        docker.ContainerNetworksAdvancedArgs(
            name=network.name, aliases=[VLLM_NETWORK_ALIAS], ipv4_address=c.vllm_address
        )
    ]


def _healthcheck(serving: ServingSpec) -> docker.ContainerHealthcheckArgs:
    """Docker's health check of ``/health``, patient for as long as the gate waits for the load."""
    return docker.ContainerHealthcheckArgs(
        tests=health_probe(serving.port),
        interval=go_duration(30),
        timeout=go_duration(10),
        retries=3,
        # A load as long as the gate's deadline is normal (632 s weights on rtx5090).
        start_period=go_duration(serving.load_deadline_seconds),
    )


def _labels(serving: ServingSpec, replica: str | None) -> list[docker.ContainerLabelArgs]:
    """What the container says about itself: hardware, served model, and its replica's name."""
    labels = [
        docker.ContainerLabelArgs(label="glm53.hardware", value=serving.hardware),
        docker.ContainerLabelArgs(label="glm53.served-model", value=serving.served_name),
    ]
    if replica:
        labels.append(docker.ContainerLabelArgs(label=REPLICA_LABEL, value=replica))
    return labels
