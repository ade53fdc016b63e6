"""The semantic probe on a Docker host: its image and its container on the stack's private network.

``GeneratedKey`` (components/secrets.py) generates the probe's API key once, in ``create``,
and keeps it as a secret output: stable across previews and updates (there is no random provider
here). ``deployment.py`` merges it into the front's key map under ``glm:semanticProbe.clientName``,
so the front logs the probe's traffic under its own name.

``SemanticProbe`` builds the probe image on the target's Docker engine (like the serving image) from
the context of components/verification/semantic_probe_image.py and runs it on the stack's private network, told
what components/verification/semantic_probe_spec.py renders: it reaches the front by its container name and
vLLM's ``/metrics`` by its network alias.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from components.docker.rotation_requests import PROBE_REQUESTS_DIR
from components.docker.vllm_server import upstream_hosts
from components.semantic_probe import container_name
from components.serving.replica_credentials import guard_tls
from components.verification.semantic_probe_image import build_context
from components.verification.semantic_probe_spec import (
    KEY_PATH,
    PARAMS_PATH,
    REPLICA_KEY_PATH,
    SCRAPE_KEY_PATH,
    ProbeReplica,
    SemanticProbeSpec,
    probe_settings,
    render_params,
)


@dataclass(frozen=True)
class SemanticProbeArgs:
    """What the probe asks, whom, with which keys, and where its container runs."""

    spec: SemanticProbeSpec
    """What the probe reads from the stack config."""
    network_name: pulumi.Input[str]
    """The stack's private network, on the front's host."""
    front_host: pulumi.Input[str]
    """The front's container name: the probe's way into the front on the private network."""
    upstream: str
    """vLLM's ``host:port`` on the private network, for its ``/metrics``."""
    api_key: pulumi.Output[str]
    """The probe's own API key (``GeneratedKey.key``)."""
    replicas: tuple[ProbeReplica, ...] = ()
    """The replicas it also asks directly, so that a result names its host."""
    replica_key: pulumi.Output[str] | None = None
    """The stack's replica key; needed when one of ``replicas`` is guarded."""
    scrape_key: pulumi.Output[str] | None = None
    """The guards' scrape key, for guarded replicas' ``/metrics``; needed with ``replica_key``."""
    requests_volume: pulumi.Input[str] | None = None
    """The front's requests volume (components/docker/rotation_requests.py), the one thing of the front the
    probe mounts: it ejects and re-admits replicas through it."""
    replica_certificate: pulumi.Output[str] | None = None
    """The guards' pinned certificate, when they serve TLS."""
    started_after: tuple[pulumi.Resource, ...] = ()
    """The container starts once these are done (the gate: a loading engine is the gate's business,
    not an alert); the image builds meanwhile."""
    build_platform: str | None = None
    """What its image is built for, where known (``HostConfig.build_platform`` of the front's host)."""

    def __post_init__(self) -> None:
        if any(r.guarded for r in self.replicas) and (self.replica_key is None or self.scrape_key is None):
            raise ValueError("a guarded replica needs the stack's replica key and the guards' scrape key")


def _guard_key_uploads(args: SemanticProbeArgs) -> list[docker.ContainerUploadArgs]:
    """The guards' two keys, each in a file of its own: inference reads one, ``/metrics`` the other."""
    if not any(r.guarded for r in args.replicas) or args.replica_key is None or args.scrape_key is None:
        return []
    return [
        docker.ContainerUploadArgs(file=path, content=pulumi.Output.secret(key), permissions="0444")
        for path, key in ((REPLICA_KEY_PATH, args.replica_key), (SCRAPE_KEY_PATH, args.scrape_key))
    ]


def _params(args: SemanticProbeArgs, front_host: str, certificate: str | None) -> str:
    """``params.json`` once the front's container name and the guards' pinned certificate are known:
    a guarded replica is verified by that certificate, as the front verifies it."""
    settings = probe_settings(
        args.spec,
        front_host,
        args.upstream,
        args.replicas,
        guard_tls(certificate) if certificate is not None else None,
    )
    requests_dir = PROBE_REQUESTS_DIR if args.requests_volume is not None else None
    return render_params(dataclasses.replace(settings, requests_dir=requests_dir))


SATURATION_LABEL = "glm53.probe-saturated-at-max-num-seqs"
"""The probe container's label holding ``glm:serving.maxNumSeqs``, the saturation it judges by."""


class SemanticProbe(pulumi.ComponentResource):
    """The probe container on the stack's private network, scraped by the stack's Prometheus."""

    container_name: pulumi.Output[str]
    """Docker name of the probe container."""
    image_ref: pulumi.Output[str]
    """The probe image (content-hash tag)."""

    def __init__(
        self, name: str, args: SemanticProbeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("glm:semanticProbe:SemanticProbe", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec = args.spec
        context, tag = build_context()
        image = docker.Image(
            f"{name}-image",
            image_name=tag,
            build=docker.DockerBuildArgs(
                context=context,
                dockerfile=f"{context}/Dockerfile",
                args={"BASE_IMAGE": spec.probe.base_image},
                builder_version=docker.BuilderVersion.BUILDER_BUILD_KIT,
                platform=args.build_platform,
            ),
            skip_push=True,
            opts=child,
        )
        certificate = (
            args.replica_certificate
            if args.replica_certificate is not None
            else pulumi.Output.from_input(None)
        )
        params = pulumi.Output.all(pulumi.Output.from_input(args.front_host), certificate).apply(
            lambda values: _params(args, values[0], values[1])
        )
        container = docker.Container(
            f"{name}-container",
            name=container_name(spec.container.name),
            image=image.image_name,
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=args.network_name)],
            uploads=[
                docker.ContainerUploadArgs(file=PARAMS_PATH, content=params, permissions="0444"),
                # The probe runs as nobody in a container of its own: the key file is its only reader.
                docker.ContainerUploadArgs(
                    file=KEY_PATH, content=pulumi.Output.secret(args.api_key), permissions="0444"
                ),
                *_guard_key_uploads(args),
            ],
            # Nothing else is mounted: no Docker socket, no host path, none of the front's config.
            volumes=[
                docker.ContainerVolumeArgs(
                    volume_name=args.requests_volume, container_path=PROBE_REQUESTS_DIR
                )
            ]
            if args.requests_volume is not None
            else None,
            labels=[
                docker.ContainerLabelArgs(label="glm53.role", value="semantic-probe"),
                # The probe skips a replica running this many requests (saturated, not wrong); its
                # params upload carries it, and is secret: this label says why a maxNumSeqs change
                # replaces the probe too.
                docker.ContainerLabelArgs(label=SATURATION_LABEL, value=str(spec.max_num_seqs)),
            ],
            hosts=upstream_hosts(spec.container),
            restart="unless-stopped",
            log_driver="json-file",
            log_opts=spec.container.log_opts,
            # A fixed container name cannot exist twice: remove the old one first.
            opts=pulumi.ResourceOptions(
                parent=self, delete_before_replace=True, depends_on=list(args.started_after)
            ),
        )
        self.container_name = container.name
        self.image_ref = image.image_name
        self.register_outputs({"container_name": self.container_name, "image_ref": self.image_ref})
