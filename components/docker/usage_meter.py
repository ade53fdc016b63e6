"""The usage meter on the front's host: usage per API key name and each key's fair share.

The meter itself (``images/usage-meter/usage_meter.py``, standard library only) says why it is a
process of its own and how the share works. Here: ``UsageMeter``, which builds its image on the
front host's Docker engine and runs it on the stack's private network (the share table nginx sends
it: ``shares_header``, components/render/nginx_meter.py). nginx sends the inference routes to it
with the key's name and it sends them back to nginx's return listener
(components/render/nginx_conf.py), which keeps the rotation of gated replicas; the stack's
Prometheus scrapes its ``/metrics`` (job ``usage-meter``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pulumi
import pulumi_docker as docker

from components.config import ContainerConfig, FrontConfig
from components.config.edge import UsageMeterConfig

CONTEXT = "images/usage-meter"
REPOSITORY = "glm53-usage-meter"
CONTEXT_FILES = ("Dockerfile", "usage_meter.py", "meter_proxy.py", "meter_shares.py")
_PROJECT = Path(__file__).resolve().parents[2]


def container_name(container: ContainerConfig) -> str:
    """The meter's Docker name (and host name on the private network)."""
    return f"{container.name}-usage-meter"


def image_tag() -> str:
    """The content hash of the build context: a changed meter is a new image and a new container."""
    digest = hashlib.sha256()
    for name in CONTEXT_FILES:
        digest.update(name.encode() + b"\0" + (_PROJECT / CONTEXT / name).read_bytes() + b"\0")
    return f"{REPOSITORY}:{digest.hexdigest()[:16]}"


def meter_command(meter: UsageMeterConfig, return_address: str) -> list[str]:
    """The meter's arguments (its image's entry point runs ``usage_meter.py``).

    >>> meter_command(UsageMeterConfig(queue_seconds=2.5), "glm53-nginx:8081")
    ['--port', '9147', '--upstream', 'glm53-nginx:8081', '--queue-seconds', '2.5']
    """
    queue = meter.queue_seconds
    seconds = str(int(queue)) if queue.is_integer() else str(queue)  # 10, not 10.0, as the key is written
    return ["--port", str(meter.port), "--upstream", return_address, "--queue-seconds", seconds]


class UsageMeter(pulumi.ComponentResource):
    """The meter container on the stack's private network, between nginx and nginx."""

    address: pulumi.Output[str]
    """``name:port`` on the private network: what nginx's ``upstream usage_meter`` lists."""

    def __init__(
        self,
        name: str,
        front: FrontConfig,
        container: ContainerConfig,
        network_name: pulumi.Input[str],
        return_address: str,
        build_platform: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``return_address``: nginx's return listener (``<front>:8081``). The meter's command line
        has its port, that address and ``glm:front.usageMeter.queueSeconds``; the shares come with
        each request, so the container changes with its code and those three only.
        ``build_platform``: what its image is built for, where known (``HostConfig.build_platform``)."""
        super().__init__("glm:front:UsageMeter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        image = docker.Image(
            f"{name}-image",
            image_name=image_tag(),
            build=docker.DockerBuildArgs(
                context=CONTEXT,
                dockerfile=f"{CONTEXT}/Dockerfile",
                args={"BASE_IMAGE": front.usage_meter.base_image},
                builder_version=docker.BuilderVersion.BUILDER_BUILD_KIT,
                platform=build_platform,
            ),
            skip_push=True,
            opts=child,
        )
        meter = docker.Container(
            f"{name}-container",
            name=container_name(container),
            image=image.image_name,
            command=meter_command(front.usage_meter, return_address),
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=network_name)],
            labels=[docker.ContainerLabelArgs(label="glm53.role", value="usage-meter")],
            restart="unless-stopped",
            log_driver="json-file",
            log_opts=container.log_opts,
            # A fixed container name cannot exist twice: remove the old one first.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        self.address = pulumi.Output.concat(meter.name, f":{front.usage_meter.port}")
        self.register_outputs({"address": self.address})
