"""The whole deployment of one stack: which components, in which order, wired how."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pulumi
import pulumi_docker as docker

from components.config import StackConfig
from components.model_volume import ModelVolume
from components.nginx_front import NginxFront
from components.preflight import Preflight
from components.prometheus_scrape import PrometheusScrape
from components.promotion import fingerprint, promoted_image, served_model
from components.secrets import Secrets
from components.serving_image import ServingImage
from components.smoke_test import SmokeTest
from components.target import docker_ssh_opts
from components.vllm_server import VllmServer, command_line


def _first_key(keys: dict[str, str]) -> str:
    return keys[sorted(keys)[0]]


def deploy(config: StackConfig, secrets: Secrets, stack: str) -> dict[str, Any]:
    """Create every resource of the stack and return the stack outputs."""
    host = config.target.host
    docker_host = host.docker_host
    provider = docker.Provider(
        f"{host.name}-docker",
        host=docker_host,
        ssh_opts=docker_ssh_opts(host) if docker_host.startswith("ssh://") else None,
    )

    preflight = (
        Preflight(f"{stack}-preflight", config, secrets.ssh_private_key) if config.preflight.enabled else None
    )
    served = served_model(config, secrets.serving_env_names)
    served_fingerprint = fingerprint(served)
    promoted = promoted_image(config, served) if config.promote_from else None
    after_preflight = pulumi.ResourceOptions(
        providers=[provider], depends_on=[preflight] if preflight else []
    )
    # After preflight too: a host that fails its checks gets no image build or pull (tens of GB).
    image = ServingImage(f"{stack}-image", config.serving_image, pinned=promoted, opts=after_preflight)
    volume = ModelVolume(
        f"{stack}-model",
        config,
        secrets.ssh_private_key,
        opts=after_preflight,
    )
    server = VllmServer(
        f"{stack}-serving",
        config,
        image.ref,
        volume.mounts,
        secret_env=secrets.serving_env,
        opts=pulumi.ResourceOptions(
            providers=[provider],
            depends_on=[d for d in (preflight, volume.download) if d is not None],
        ),
    )
    front = NginxFront(
        f"{stack}-front",
        config,
        network_name=server.network_name,
        upstream=server.upstream,
        api_keys=secrets.api_keys,
        tls_files=secrets.tls_files,
        opts=pulumi.ResourceOptions(providers=[provider], depends_on=[server]),
    )
    monitoring = PrometheusScrape(
        f"{stack}-monitoring",
        config,
        network_name=server.network_name,
        target=server.upstream,
        opts=pulumi.ResourceOptions(providers=[provider], depends_on=[server]),
    )
    smoke = SmokeTest(
        f"{stack}-smoke",
        config,
        front_url=front.url,
        api_key=secrets.api_keys.apply(_first_key),
        image_ref=image.ref,
        metrics_url=_metrics_url(config),
        container_id=server.container.id,
        opts=pulumi.ResourceOptions(depends_on=[server, front, monitoring]),
    )
    outputs: dict[str, Any] = {
        "endpoint": front.url,
        "servedModelName": config.model.served_name,
        "vllmCommandLine": command_line(config),
        "imageRef": image.ref,
        "curl": front.url.apply(lambda url: _curl(url, config)),
        "prometheusUrl": monitoring.url,
        "cacheVolume": volume.cache_volume_name,
        "smoke": smoke.results,
        "fingerprint": served_fingerprint,
        # Published only by an update whose gate passed: what a promotion may take.
        "verified": pulumi.Output.all(smoke.results, image.verified_ref).apply(
            lambda gate_and_ref: {
                "fingerprint": served_fingerprint,
                "servedModel": served,
                "imageRef": gate_and_ref[1],
            }
        ),
    }
    if config.rehearsing:
        # Stated in the outputs too, so that nobody mistakes this stack's gate for the model's.
        outputs["rehearsal"] = {"hardware": config.hardware, "replaced": config.rehearsal_replaced()}
    if promoted is not None:
        outputs["promotedFrom"] = promoted.apply(lambda ref: {"stack": config.promote_from, "imageRef": ref})
    return outputs


def _metrics_url(config: StackConfig) -> str | None:
    """vLLM's metrics as the Pulumi host can reach them: the configured URL, or on a local target
    the stack's Prometheus (/federate), which scrapes vLLM on the private network."""
    if config.smoke.metrics_url or not config.target.host.is_local:
        return config.smoke.metrics_url
    monitoring = config.monitoring
    host = "127.0.0.1" if monitoring.bind_address in ("0.0.0.0", "::") else monitoring.bind_address
    return f"http://{host}:{monitoring.port}/federate?match[]=vllm:cache_config_info"


def _curl(url: str, config: StackConfig) -> str:
    """A command to paste: every value shell-quoted, the body built as JSON (never by hand)."""
    body = json.dumps(
        {"model": config.model.served_name, "messages": [{"role": "user", "content": "What is 13*17?"}]},
        separators=(",", ":"),
    )
    return (
        f"curl -s {shlex.quote(url + '/chat/completions')} "
        '-H "Authorization: Bearer $GLM_API_KEY" '
        f"-H 'Content-Type: application/json' -d {shlex.quote(body)}"
    )
