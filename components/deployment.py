"""The whole deployment of one stack: which components, in which order, wired how."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

import pulumi

from components import rotation
from components.change_cost import front_replacement_notice, serving_replacement_notice, warn_when_replaced
from components.config import GATE_METRICS_CLIENT, StackConfig, semantic_probe_runs
from components.front_tls import front_tls
from components.nginx_front import STOP_GRACE_SECONDS, NginxFront, NginxFrontArgs, front_container_name
from components.preflight import Preflight
from components.prometheus_scrape import PrometheusScrape, ScrapeSpec
from components.promotion import fingerprint, promoted_image, served_model
from components.replica_guard import guard_credentials
from components.replicas import Replica, gated, guarded_scrape, host_base, replica_guard, serving_container
from components.secrets import GeneratedKey, Secrets
from components.semantic_probe.resource import (
    ProbeReplica,
    SemanticProbe,
    SemanticProbeArgs,
    SemanticProbeSpec,
)
from components.smoke_gate import SmokeTest, SmokeTestArgs
from components.target import exec_ssh
from components.vllm_server import ServingSpec, command_line, render_serving


def _first_key(keys: dict[str, str]) -> str:
    return keys[sorted(keys)[0]]


def _with_key(
    keys: pulumi.Output[dict[str, str]] | None, client_name: str, key: pulumi.Output[str] | None
) -> pulumi.Output[dict[str, str]] | None:
    """The users' keys plus one the stack generated, under its own name (config loading refuses a
    user key of that name), secret like the keys themselves."""
    if key is None:
        return keys
    users = keys if keys is not None else pulumi.Output.from_input({})
    merged = pulumi.Output.all(users, key).apply(lambda both: {**both[0], client_name: both[1]})
    return pulumi.Output.secret(merged)


def deploy(config: StackConfig, secrets: Secrets, stack: str) -> dict[str, Any]:
    """Create every resource of the stack and return the stack outputs."""
    if config.target.kubernetes is not None:
        from components.k8s_deployment import deploy_kubernetes

        return deploy_kubernetes(config, secrets, stack)
    # Rendered once: the serving containers run it, the gates quote it, the fingerprint hashes it.
    serving = render_serving(config)
    served = served_model(serving, config.serving_image, secrets.serving_env_names)
    promoted = promoted_image(config.promote_from, served) if config.promote_from else None
    api_key = secrets.api_keys.apply(_first_key)
    # The front's host first, then the others in list order: the order of a first load and a roll.
    hosts = [config.target.host, *[h for h in config.target.hosts if h is not config.target.host]]
    bases = [host_base(config, secrets, stack, host, promoted) for host in hosts]
    preflights = [b.preflight for b in bases if b.preflight]
    keys = _GeneratedKeys.create(config, stack, after=preflights)
    # Several hosts: each replica off the front's host answers only the stack's replica key, through
    # its guard (with TLS, every replica does, over TLS).
    guards = (
        guard_credentials(
            stack,
            [h.replica_address for h in hosts[1:]],
            config.front.tls,
            opts=pulumi.ResourceOptions(depends_on=preflights),
        )
        if len(hosts) > 1
        else None
    )
    front_on = rotation.front_access(
        config.target.host.docker_host, exec_ssh(config.target.host), front_container_name(config.container)
    )
    # Before Docker stops a replica (replaced, restarted, removed), the front stops sending it requests.
    drain = rotation.drain_hook(front_on, config.container.stop_grace_seconds)
    replicas: list[Replica] = []
    front: NginxFront | None = None
    for base in bases:
        # A rolling update replaces one replica at a time: each waits until the previous one is
        # back in the front's rotation (its gate passed).
        after: list[pulumi.Resource] = [replicas[-1].gate] if replicas else []
        server = serving_container(config, serving, secrets, base, after, drain)
        if front is None:
            front = NginxFront(
                f"{stack}-front",
                NginxFrontArgs(
                    front=config.front,
                    host=config.target.host,
                    container=config.container,
                    network_name=server.network_name,
                    api_keys=_with_key(secrets.api_keys, config.semantic_probe.client_name, keys.probe)
                    or secrets.api_keys,
                    tls_files=secrets.tls_files,
                    metrics_keys=_with_key(secrets.metrics_keys, GATE_METRICS_CLIENT, keys.gate_metrics),
                    replica_files=guards.front_files() if guards else None,
                    engine_slots=(config.serving.max_num_seqs, len(hosts))
                    if config.front.usage_meter.enabled
                    else None,
                ),
                # Only once the hosts passed preflight: a refused host leaves nothing in the state.
                opts=pulumi.ResourceOptions(providers=[base.provider], depends_on=preflights),
            )
        guard = replica_guard(config, serving, base, server, guards)
        replicas.append(gated(config, serving, base, server, guard, front, front_on, api_key))
    assert front is not None
    home = replicas[0]  # the front's host
    several = len(replicas) > 1
    for replica in replicas:
        warn_when_replaced(
            replica.server.container,
            serving_replacement_notice(
                config.hardware,
                config.facts,
                [r.host.name for r in replicas],
                replica.host.name,
                config.container.stop_grace_seconds,
            ),
        )
    warn_when_replaced(front.container, front_replacement_notice(STOP_GRACE_SECONDS))
    monitoring = PrometheusScrape(
        f"{stack}-monitoring",
        ScrapeSpec.of(config),
        network_name=home.server.network_name,
        target={r.host.name: r.upstream for r in replicas} if several else home.upstream,
        opts=pulumi.ResourceOptions(providers=[home.provider], depends_on=[home.server]),
        guarded=guarded_scrape(config, guards),
    )
    # A TLS front's certificate names neither the gate's way in nor the probe's: both verify its name.
    front_trust = front_tls(config.front)
    smoke = SmokeTest(
        f"{stack}-smoke",
        SmokeTestArgs(
            serving=serving,
            smoke=config.smoke,
            front_url=front.url,
            api_key=api_key,
            image_ref=home.image.ref,
            metrics_url=config.smoke.metrics_url or front.metrics_url,
            metrics_key=keys.gate_metrics,
            front_fingerprint=front.fingerprint,
            tls=front_trust,
            host=config.target.host,  # the gate follows the front host's serving container while it waits
            # Several replicas: any one replaced re-runs the front's gate.
            container_id=pulumi.Output.all(*[r.server.container.id for r in replicas]).apply(",".join),
        ),
        opts=pulumi.ResourceOptions(depends_on=[*[r.gate for r in replicas], front, monitoring]),
    )
    probe = None
    if keys.probe is not None:
        probe = SemanticProbe(
            f"{stack}-semantic-probe",
            SemanticProbeArgs(
                spec=SemanticProbeSpec.of(config, serving, front_trust),
                network_name=home.server.network_name,
                front_host=front.hostname,  # the probe starts after the gate, which waits for the front
                upstream=home.server.upstream,
                api_key=keys.probe,
                # Every replica directly too, by the address the front uses: so a result names its host.
                replicas=tuple(ProbeReplica(r.host.name, r.upstream, r.guarded) for r in replicas),
                replica_key=guards.key if guards else None,
                scrape_key=guards.scrape_key if guards else None,
                requests_volume=front.requests_volume if config.semantic_probe.eject_replicas else None,
                replica_certificate=guards.certificate.certificate if guards and guards.certificate else None,
                # Its container starts once the gate passed; its image builds while the gates run.
                started_after=(smoke,),
                build_platform=home.host.build_platform,
            ),
            # Only once the hosts passed preflight: a refused host leaves nothing in the state.
            opts=pulumi.ResourceOptions(providers=[home.provider], depends_on=preflights),
        )
    outputs = _outputs(config, serving, served, home, front, monitoring, smoke)
    # What the drain needs when `make destroy` meets a config the program refuses (rotation.py).
    outputs["drain"] = {"front": front_on, "graceSeconds": config.container.stop_grace_seconds}
    if probe is not None:
        outputs["semanticProbe"] = probe.container_name
    if keys.gate_metrics is not None:
        # Secret: `ops smoke` reads this one value, not the whole decrypted state.
        outputs["gateMetricsKey"] = keys.gate_metrics
    if several:
        outputs["replicas"] = {r.host.name: r.gate.results for r in replicas}
    if promoted is not None:
        outputs["promotedFrom"] = promoted.apply(lambda ref: {"stack": config.promote_from, "imageRef": ref})
    return outputs


@dataclass
class _GeneratedKeys:
    """Keys the stack makes for its own clients, secret, kept in the state (``GeneratedKey``)."""

    probe: pulumi.Output[str] | None
    """The semantic probe's API key, when the probe runs."""
    gate_metrics: pulumi.Output[str] | None
    """The gate's metrics key: the KV-pool check reads vLLM's /metrics through the front, on every
    stack, unless glm:smoke.metricsUrl names another source."""

    @classmethod
    def create(cls, config: StackConfig, stack: str, after: list[Preflight]) -> _GeneratedKeys:
        # Only once the hosts passed preflight: a refused host leaves nothing in the state.
        opts = pulumi.ResourceOptions(depends_on=after)
        probe = config.semantic_probe
        return cls(
            probe=GeneratedKey(f"{stack}-semantic-probe-key", probe.client_name, "sk-probe-", opts=opts).key
            if semantic_probe_runs(config)
            else None,
            gate_metrics=None
            if config.smoke.metrics_url
            else GeneratedKey(
                f"{stack}-smoke-metrics-key", GATE_METRICS_CLIENT, "sk-gate-metrics-", opts=opts
            ).key,
        )


def _outputs(
    config: StackConfig,
    serving: ServingSpec,
    served: dict[str, Any],
    home: Replica,
    front: NginxFront,
    monitoring: PrometheusScrape,
    smoke: SmokeTest,
) -> dict[str, Any]:
    """The stack outputs every stack has (``deploy`` adds those of the probe, replicas, promotion)."""
    served_fingerprint = fingerprint(served)
    outputs: dict[str, Any] = {
        "endpoint": front.url,
        # vLLM's /metrics through the front, for glm:metricsKeys bearer tokens only.
        "metricsEndpoint": front.metrics_url,
        "frontFingerprint": front.fingerprint,
        "servedModelName": serving.served_name,
        "vllmCommandLine": command_line(serving.argv),
        # The same argv as a list (make debug runs it), and its flags by name (the probe reads
        # --max-num-seqs there): nothing parses the command line back.
        "vllmArgs": serving.argv,
        "vllmFlags": serving.flags,
        "imageRef": home.image.ref,
        "curl": front.url.apply(lambda url: _curl(url, serving.served_name)),
        "prometheusUrl": monitoring.url,
        "cacheVolume": home.volume.cache_volume_name,
        "smoke": smoke.results,
        "fingerprint": served_fingerprint,
        # Published only by an update whose gate passed: what a promotion may take.
        "verified": pulumi.Output.all(smoke.results, home.image.verified_ref).apply(
            lambda gate_and_ref: {
                "fingerprint": served_fingerprint,
                "servedModel": served,
                "imageRef": gate_and_ref[1],
                # What `make rollback` puts back into the stack's config.
                "config": config.replica_values,
            }
        ),
    }
    if config.rehearsing:
        # Stated in the outputs too, so that nobody mistakes this stack's gate for the model's.
        outputs["rehearsal"] = {"hardware": config.hardware, "replaced": config.rehearsal_replaced()}
    return outputs


def _curl(url: str, served_name: str) -> str:
    """A command to paste: every value shell-quoted, the body built as JSON (never by hand)."""
    body = json.dumps(
        {"model": served_name, "messages": [{"role": "user", "content": "What is 13*17?"}]},
        separators=(",", ":"),
    )
    return (
        f"curl -s {shlex.quote(url + '/chat/completions')} "
        '-H "Authorization: Bearer $GLM_API_KEY" '
        f"-H 'Content-Type: application/json' -d {shlex.quote(body)}"
    )
