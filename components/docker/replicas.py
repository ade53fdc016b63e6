"""One replica per host, as ``components/docker/deployment.py`` wires it: what a host needs before its serving
container (Docker, preflight, image, weights), the container, the guard that publishes it off the
front's host, and the gate that admits it to the front's rotation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_docker as docker

from components.config import FrontConfig, HostConfig, SmokeConfig, StackConfig
from components.docker.model_volume import ModelVolume
from components.docker.nginx_front import NginxFront
from components.docker.preflight import Preflight, PreflightArgs
from components.docker.prometheus_scrape import GuardedScrape
from components.docker.replica_gate import Admission, ReplicaGate, ReplicaGateArgs
from components.docker.replica_guard import ReplicaGuard, ReplicaGuardArgs
from components.docker.vllm_server import VllmServer, VllmServerArgs
from components.render.replica_guard import TLS_NAME
from components.secrets import Secrets
from components.serving.image import ServingImage
from components.serving.replica_credentials import GuardCredentials
from components.serving.spec import ServingSpec


@dataclass
class HostBase:
    """What a host needs before its serving container: Docker, preflight, image, weights."""

    host: HostConfig
    prefix: str
    """Resource name prefix: the front's host keeps the one-host names, the others add their name."""
    provider: docker.Provider
    preflight: Preflight | None
    image: ServingImage
    volume: ModelVolume


@dataclass
class Replica:
    host: HostConfig
    provider: docker.Provider
    image: ServingImage
    volume: ModelVolume
    server: VllmServer
    upstream: str
    """Where Prometheus reaches this replica: the private network alias, or the host's address."""
    gate: ReplicaGate
    guarded: bool
    """Behind a guard (``upstream`` is the guard's): asked with the replica key, over TLS with TLS."""


def host_base(
    config: StackConfig,
    secrets: Secrets,
    stack: str,
    host: HostConfig,
    promoted: pulumi.Output[str] | None,
) -> HostBase:
    on_front = host is config.target.host
    prefix = stack if on_front else f"{stack}-{host.name}"
    docker_host = host.docker_host
    provider = docker.Provider(
        f"{host.name}-docker",
        host=docker_host,
        ssh_opts=host.ssh_options if docker_host.startswith("ssh://") else None,
    )
    preflight = (
        Preflight(
            f"{prefix}-preflight",
            PreflightArgs(
                preflight=config.preflight,
                model=config.model,
                facts=config.facts,
                profile=config.hardware,
                accelerators=config.container.accelerators,
                gpu_memory_utilization=config.serving.gpu_memory_utilization,
                host=host,
                ssh_private_key=secrets.ssh_private_key,
            ),
        )
        if config.preflight.enabled
        else None
    )
    after_preflight = pulumi.ResourceOptions(
        providers=[provider], depends_on=[preflight] if preflight else []
    )
    # After preflight too: a host that fails its checks gets no image build or pull (tens of GB).
    image = ServingImage(
        f"{prefix}-image",
        config.serving_image,
        pinned=promoted,
        opts=after_preflight,
        platform=host.build_platform,
    )
    volume = ModelVolume(
        f"{prefix}-model",
        config.model,
        config.container.name,
        host,
        secrets.ssh_private_key,
        opts=after_preflight,
    )
    return HostBase(host, prefix, provider, preflight, image, volume)


@dataclass(frozen=True)
class Roll:
    """What every replica of a roll shares: what it runs, how the front drains and admits it, how
    its gate asks it, and the guards' credentials (several hosts, or TLS)."""

    serving: ServingSpec
    secrets: Secrets
    """``glm:servingSecretEnv`` joins each serving container's env."""
    smoke: SmokeConfig
    """``glm:smoke``: what each replica's gate asks."""
    front: FrontConfig
    """The front's TLS and image: a guard speaks the front's scheme."""
    grace_seconds: int
    """``glm:container.stopGraceSeconds``: how long a drain waits for the requests in flight."""
    front_on: dict[str, Any]
    """How to reach the front's container (``rotation.front_access``)."""
    drain: pulumi.ResourceHook
    """Before Docker stops a replica (replaced, restarted, removed), the front stops sending it requests."""
    api_key: pulumi.Output[str]
    guards: GuardCredentials | None


def roll(plan: Roll, bases: list[HostBase], first: VllmServer, front: NginxFront) -> list[Replica]:
    """Every host's replica, the front's host (``first``, whose network the front joined) first. A
    rolling update replaces one replica at a time: each waits until the previous one is back in
    the front's rotation (its gate passed)."""
    replicas: list[Replica] = []
    for base in bases:
        server = first if not replicas else serving_container(plan, base, after=[replicas[-1].gate])
        guard = replica_guard(plan, base, server, on_front=not replicas)
        replicas.append(gated(plan, base, server, guard, front, one_box=len(bases) == 1))
    return replicas


def serving_container(plan: Roll, base: HostBase, after: list[pulumi.Resource]) -> VllmServer:
    return VllmServer(
        f"{base.prefix}-serving",
        VllmServerArgs(
            serving=plan.serving,
            image=base.image.ref,
            mounts=base.volume.mounts,
            secret_env=plan.secrets.serving_env,
            replica=base.host.name,
            drain=plan.drain,
        ),
        opts=pulumi.ResourceOptions(
            providers=[base.provider],
            depends_on=[*[d for d in (base.preflight, base.volume.download) if d is not None], *after],
        ),
    )


def gated(
    plan: Roll,
    base: HostBase,
    server: VllmServer,
    guard: ReplicaGuard | None,
    front: NginxFront,
    one_box: bool,
) -> Replica:
    """The replica's gate, which admits it to the front's rotation once it passed: by the fixed
    address of its guard, else of its vLLM."""
    upstream, address = server.upstream, server.address
    if guard is not None:
        upstream = address = guard.upstream
    gate = ReplicaGate(
        f"{base.prefix}-replica",
        ReplicaGateArgs(
            serving=plan.serving,
            smoke=plan.smoke,
            host=base.host,
            api_key=plan.api_key,
            image_ref=base.image.ref,
            container_id=server.container.id,
            admission=Admission(
                # Known at preview: a front release (a key revoked) is not a change of the gate's.
                front=plan.front_on,
                front_container_id=front.container.id,
                address=address,
                grace_seconds=plan.grace_seconds,
                stack=pulumi.get_stack(),
                one_box=one_box,
            ),
        ),
        # The front's config (which includes the rotation) and the guard's are live before the
        # replica is admitted through them.
        opts=pulumi.ResourceOptions(depends_on=[server, front, *([guard] if guard else [])]),
    )
    return Replica(
        base.host, base.provider, base.image, base.volume, server, upstream, gate, guard is not None
    )


def replica_guard(plan: Roll, base: HostBase, server: VllmServer, on_front: bool) -> ReplicaGuard | None:
    """A replica off the front's host is published only through its guard; with TLS the front's
    own replica too (one upstream speaks one scheme), on its private network only."""
    if plan.guards is None or (on_front and not plan.front.tls):
        return None
    return ReplicaGuard(
        f"{base.prefix}-guard",
        ReplicaGuardArgs(
            serving=plan.serving,
            front=plan.front,
            host=base.host,
            publish_address=None if on_front else base.host.replica_address,
            network_name=server.network_name,
            credentials=plan.guards,
        ),
        opts=pulumi.ResourceOptions(
            providers=[base.provider], depends_on=[base.preflight] if base.preflight else []
        ),
    )


def guarded_scrape(guards: GuardCredentials | None) -> GuardedScrape | None:
    """Prometheus' way to the guards: the scrape key, which no inference route takes."""
    if guards is None:
        return None
    if guards.certificate is None:
        return GuardedScrape(key=guards.scrape_key)
    return GuardedScrape(key=guards.scrape_key, certificate=guards.certificate.certificate, tls_name=TLS_NAME)
