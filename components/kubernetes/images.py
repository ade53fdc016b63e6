"""The images a Kubernetes stack runs, built where Docker hosts build them and loaded onto the nodes.

The serving image (``ServingImage``: the profile's patched build or its pinned upstream image) and
the gate sidecar's (the semantic probe's image: the gate package and its Python packages) are built
on ``glm:target.hosts[0]``'s Docker engine; then ``glm:target.kubernetes.imageLoadCommand`` hands
each image, the front's and Prometheus' too, to the cluster (a push, or an import into the nodes'
containerd).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components.config import HostConfig, ImageConfig
from components.kubernetes.state import moved_from_root
from components.serving.image import ServingImage
from components.template import placeholders, render_template
from components.verification.semantic_probe_image import build_context


@dataclass(frozen=True)
class ClusterImagesArgs:
    """What is built and what is loaded (pass the building engine's Docker provider in ``opts``)."""

    serving_image: ImageConfig
    """The profile's serving image: built (a patch layer) or pulled by reference."""
    gate_base_image: str
    """``glm:semanticProbe.baseImage``: the Python image the gate sidecar's image is built on."""
    front_image: str
    """``glm:front.image``: nginx for the front and the pods' guards."""
    prometheus_image: str
    """``glm:monitoring.image``."""
    load_command: str | None
    """``glm:target.kubernetes.imageLoadCommand`` (``{{image}}`` the reference, ``image_load_template``);
    None: the nodes pull."""
    build_platform: str | None = None
    """What the builds are for, where known (``HostConfig.build_platform`` of the building host), as
    on Docker hosts: unset, the Docker provider warns that it assumes one, once per image."""


def build_engine(builder: HostConfig, stack: str) -> docker.Provider:
    """``builder``'s Docker engine, which builds the images (the one place a Kubernetes stack
    uses the Docker provider: tests/test_k8s_own.py)."""
    return docker.Provider(
        f"{stack}-build-docker",
        host=builder.docker_host,
        ssh_opts=builder.ssh_options if builder.docker_host.startswith("ssh://") else None,
    )


def _load(template: str, image: pulumi.Input[str]) -> pulumi.Output[str]:
    """The load command for ``image``, quoted for the shell."""
    # A command that names no image (the config allows it, as it always did) runs as written.
    return pulumi.Output.from_input(image).apply(
        lambda ref: render_template(template, {"image": shlex.quote(ref)} if placeholders(template) else {})
    )


class ClusterImages(pulumi.ComponentResource):
    """The stack's images, on the cluster's nodes once ``loaded`` has run."""

    serving: pulumi.Output[str]
    """The serving image's reference (its content-hash tag, or the pinned upstream reference)."""
    gate: pulumi.Output[str]
    """The gate sidecar's image (also the semantic probe's and the targets lister's)."""
    loaded: list[pulumi.Resource]
    """The load commands: the pods start only once their images are on the nodes."""

    def __init__(
        self, name: str, args: ClusterImagesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("glm:k8s_images:ClusterImages", name, None, opts)
        child = moved_from_root(self)
        if args.serving_image.to_build is not None:
            self.serving = ServingImage(
                f"{name}-image", args.serving_image, opts=child, platform=args.build_platform
            ).ref
        else:
            assert args.serving_image.reference is not None
            self.serving = pulumi.Output.from_input(args.serving_image.reference)
        context, tag = build_context()
        self.gate = docker.Image(
            f"{name}-gate-image",
            image_name=tag,
            build=docker.DockerBuildArgs(
                context=context,
                dockerfile=f"{context}/Dockerfile",
                args={"BASE_IMAGE": args.gate_base_image},
                builder_version=docker.BuilderVersion.BUILDER_BUILD_KIT,
                platform=args.build_platform,
            ),
            skip_push=True,
            opts=child,
        ).image_name
        images: dict[str, pulumi.Input[str]] = {
            "serving": self.serving,
            "gate": self.gate,
            "front": args.front_image,
            "prometheus": args.prometheus_image,
        }
        template = args.load_command
        self.loaded = [
            command.local.Command(
                f"{name}-load-{role}", create=_load(template, ref), triggers=[ref], opts=child
            )
            for role, ref in images.items()
            if template is not None
        ]
        self.register_outputs({"serving": self.serving, "gate": self.gate})
