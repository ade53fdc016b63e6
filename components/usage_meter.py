"""The usage meter on the front's host: usage per API key name and each key's fair share.

The meter itself (``images/usage-meter/usage_meter.py``, standard library only) says why it is a
process of its own and how the share works. Here: its parameters (:func:`meter_params`, pure) and
``UsageMeter``, which builds its image on the front host's Docker engine and runs it on the stack's
private network. nginx sends the inference routes to it with the key's name and it sends them back
to nginx's return listener (components/nginx_conf.py), which keeps the rotation of gated replicas;
the stack's Prometheus scrapes its ``/metrics`` (job ``usage-meter``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pulumi
import pulumi_docker as docker

from components.config import ContainerConfig, FrontConfig

CONTEXT = "images/usage-meter"
REPOSITORY = "glm53-usage-meter"
PARAMS_PATH = "/etc/usage-meter/params.json"
_PROJECT = Path(__file__).resolve().parents[1]


def container_name(container: ContainerConfig) -> str:
    """The meter's Docker name (and host name on the private network)."""
    return f"{container.name}-usage-meter"


def meter_params(
    front: FrontConfig, key_names: Sequence[str], max_num_seqs: int, replicas: int, return_address: str
) -> dict[str, Any]:
    """What the meter reads at start: its port, where requests go back to, the slots and the weights.

    >>> p = meter_params(FrontConfig(), ["bob", "alice"], 32, 2, "front:8081")
    >>> p["capacity"], p["weights"], p["upstream"]
    (64, {'alice': 1.0, 'bob': 1.0}, 'front:8081')
    """
    meter = front.usage_meter
    return {
        "port": meter.port,
        "upstream": return_address,
        "capacity": max_num_seqs * replicas,
        "weights": {name: float(meter.weights.get(name, 1.0)) for name in sorted(key_names)},
        "fairShare": meter.fair_share,
    }


def image_tag() -> str:
    """The content hash of the build context: a changed meter is a new image and a new container."""
    digest = hashlib.sha256()
    for name in ("Dockerfile", "usage_meter.py"):
        digest.update(name.encode() + b"\0" + (_PROJECT / CONTEXT / name).read_bytes() + b"\0")
    return f"{REPOSITORY}:{digest.hexdigest()[:16]}"


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
        params: pulumi.Input[dict[str, Any]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
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
            ),
            skip_push=True,
            opts=child,
        )
        meter = docker.Container(
            f"{name}-container",
            name=container_name(container),
            image=image.image_name,
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=network_name)],
            uploads=[
                docker.ContainerUploadArgs(
                    file=PARAMS_PATH,
                    # Key names and weights, no key: readable by the meter's user (nobody).
                    content=pulumi.Output.from_input(params).apply(lambda p: json.dumps(p, sort_keys=True)),
                    permissions="0444",
                )
            ],
            labels=[docker.ContainerLabelArgs(label="glm53.role", value="usage-meter")],
            restart="unless-stopped",
            log_driver="json-file",
            log_opts=container.log_opts,
            # A fixed container name cannot exist twice: remove the old one first.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        self.address = pulumi.Output.concat(meter.name, f":{front.usage_meter.port}")
        self.register_outputs({"address": self.address})
