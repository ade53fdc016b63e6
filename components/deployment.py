"""The whole deployment of one stack: which components, in which order, wired how."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pulumi
import pulumi_docker as docker

from components.change_cost import front_replacement_notice, serving_replacement_notice, warn_when_replaced
from components.config import StackConfig, semantic_probe_runs
from components.gate.resource import SmokeTest, metrics_url_for
from components.model_volume import ModelVolume
from components.nginx_front import STOP_GRACE_SECONDS, NginxFront
from components.preflight import Preflight
from components.prometheus_scrape import PrometheusScrape
from components.promotion import fingerprint, promoted_image, served_model
from components.secrets import Secrets
from components.semantic_probe.resource import ProbeKey, SemanticProbe
from components.serving_image import ServingImage
from components.target import docker_ssh_opts
from components.vllm_server import VllmServer, command_line


def _first_key(keys: dict[str, str]) -> str:
    return keys[sorted(keys)[0]]


def _with_probe_key(
    api_keys: pulumi.Output[dict[str, str]], client_name: str, probe_key: pulumi.Output[str]
) -> pulumi.Output[dict[str, str]]:
    """The users' keys plus the probe's under its own name (config loading refused a user key of
    that name), secret like the keys themselves."""
    merged = pulumi.Output.all(api_keys, probe_key).apply(lambda both: {**both[0], client_name: both[1]})
    return pulumi.Output.secret(merged)


def deploy(config: StackConfig, secrets: Secrets, stack: str) -> dict[str, Any]:
    """Create every resource of the stack and return the stack outputs."""
    host = config.target.host
    docker_host = host.docker_host
    provider = docker.Provider(
        f"{host.name}-docker",
        host=docker_host,
        ssh_opts=docker_ssh_opts(host) if docker_host.startswith("ssh://") else None,
    )
    on_host = pulumi.ResourceOptions(providers=[provider])

    preflight = (
        Preflight(f"{stack}-preflight", config, secrets.ssh_private_key) if config.preflight.enabled else None
    )
    served = served_model(config, secrets.serving_env_names)
    served_fingerprint = fingerprint(served)
    promoted = promoted_image(config, served) if config.promote_from else None
    image = ServingImage(f"{stack}-image", config.image, pinned=promoted, opts=on_host)
    volume = ModelVolume(
        f"{stack}-model",
        config,
        secrets.ssh_private_key,
        opts=pulumi.ResourceOptions(providers=[provider], depends_on=[preflight] if preflight else []),
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
    probe = config.semantic_probe
    probe_key = (
        ProbeKey(f"{stack}-semantic-probe-key", probe.client_name) if semantic_probe_runs(config) else None
    )
    front = NginxFront(
        f"{stack}-front",
        config,
        network_name=server.network_name,
        upstream=server.upstream,
        api_keys=_with_probe_key(secrets.api_keys, probe.client_name, probe_key.key)
        if probe_key is not None
        else secrets.api_keys,
        tls_files=secrets.tls_files,
        metrics_keys=secrets.metrics_keys,
        opts=pulumi.ResourceOptions(providers=[provider], depends_on=[server]),
    )
    warn_when_replaced(server.container, serving_replacement_notice(config.hardware, config.facts))
    warn_when_replaced(front.container, front_replacement_notice(STOP_GRACE_SECONDS))
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
        metrics_url=metrics_url_for(config),
        container_id=server.container.id,
        opts=pulumi.ResourceOptions(depends_on=[server, front, monitoring]),
    )
    if probe_key is not None:
        # Started once the gate passed: a loading engine is the gate's business, not an alert.
        semantic_probe = SemanticProbe(
            f"{stack}-semantic-probe",
            config,
            network_name=server.network_name,
            front_host=front.hostname,  # the probe starts after the gate, which waits for the front
            upstream=server.upstream,
            api_key=probe_key.key,
            opts=pulumi.ResourceOptions(providers=[provider], depends_on=[smoke]),
        )
    outputs: dict[str, Any] = {
        "endpoint": front.url,
        # vLLM's /metrics through the front, for glm:metricsKeys bearer tokens only.
        "metricsEndpoint": front.metrics_url,
        "frontFingerprint": front.fingerprint,
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
    if probe_key is not None:
        outputs["semanticProbe"] = semantic_probe.container_name
    if promoted is not None:
        outputs["promotedFrom"] = promoted.apply(lambda ref: {"stack": config.promote_from, "imageRef": ref})
    return outputs


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
