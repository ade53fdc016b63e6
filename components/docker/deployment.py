"""The deployment of a stack on Docker hosts: which components, in which order, wired how."""

from __future__ import annotations

from typing import Any

import pulumi

from components.change_cost import (
    front_replacement_notice,
    monitoring_replacement_notice,
    serving_replacement_notice,
    warn_when_replaced,
)
from components.config import (
    GATE_METRICS_CLIENT,
    HostConfig,
    SmokeConfig,
    StackConfig,
    semantic_probe_runs,
    usage_meter_runs,
)
from components.docker import rotation
from components.docker.drain_hook import drain_hook
from components.docker.nginx_front import STOP_GRACE_SECONDS, NginxFront, NginxFrontArgs, front_container_name
from components.docker.preflight import Preflight
from components.docker.prometheus_scrape import PrometheusScrape, ScrapeSpec
from components.docker.replicas import Replica, Roll, guarded_scrape, host_base, roll, serving_container
from components.docker.semantic_probe import SemanticProbe, SemanticProbeArgs
from components.docker.target import exec_ssh
from components.front_tls import front_tls
from components.gate.tls import EndpointTls
from components.profiles import HardwareFacts
from components.render.nginx_meter import meter_route
from components.secrets import Secrets, StackKeys
from components.serving.replica_credentials import GuardCredentials, guard_credentials
from components.serving.spec import ServingSpec, command_line, curl_command, render_serving
from components.verification.promotion import fingerprint, promoted_image, served_model
from components.verification.semantic_probe_spec import ProbeReplica, SemanticProbeSpec
from components.verification.smoke_gate import SmokeTest, SmokeTestArgs


def _with_key(
    keys: pulumi.Output[dict[str, str]] | None, client_name: str | None, key: pulumi.Output[str] | None
) -> pulumi.Output[dict[str, str]] | None:
    """The users' keys plus one the stack generated, under its own name (config loading refuses a
    user key of that name), secret like the keys themselves."""
    if key is None or client_name is None:
        return keys
    users = keys if keys is not None else pulumi.Output.from_input({})
    merged = pulumi.Output.all(users, key).apply(lambda both: {**both[0], client_name: both[1]})
    return pulumi.Output.secret(merged)


def deploy_docker(config: StackConfig, secrets: Secrets, stack: str) -> dict[str, Any]:
    """Create every resource of a stack on its Docker hosts and return the stack outputs."""
    # Rendered once: the serving containers run it, the gates quote it, the fingerprint hashes it.
    serving = render_serving(config)
    served = served_model(serving, config.serving_image, secrets.serving_env_names)
    promoted = promoted_image(config.promote_from, served) if config.promote_from else None
    # The front's host first, then the others in list order: the order of a first load and a roll.
    hosts = [config.target.host, *config.target.replica_hosts]
    bases = [host_base(config, secrets, stack, host, promoted) for host in hosts]
    # Only once the hosts passed preflight: a refused host leaves nothing in the state.
    preflights = [b.preflight for b in bases if b.preflight]
    probe = config.semantic_probe if semantic_probe_runs(config) else None
    keys = StackKeys.create(probe, config.smoke, stack, after=preflights)
    plan = _roll_plan(config, serving, secrets, keys.gate, stack, hosts, preflights)
    first = serving_container(plan, bases[0], after=[])
    front = NginxFront(
        f"{stack}-front",
        _front_args(config, secrets, keys, plan.guards, first.network_name, len(hosts)),
        opts=pulumi.ResourceOptions(providers=[bases[0].provider], depends_on=preflights),
    )
    replicas = roll(plan, bases, first, front)
    _warn_when_replaced(config.hardware, config.facts, plan.grace_seconds, replicas, front)
    monitoring = _monitoring(ScrapeSpec.of(config), stack, replicas, plan.guards)
    warn_when_replaced(monitoring.container, monitoring_replacement_notice())
    # A TLS front's certificate names neither the gate's way in nor the probe's: both verify its name.
    front_trust = front_tls(config.front, stack)
    smoke = SmokeTest(
        f"{stack}-smoke",
        _front_gate_args(config.smoke, plan, config.target.host, front, replicas, keys, front_trust),
        opts=pulumi.ResourceOptions(depends_on=[*[r.gate for r in replicas], front, monitoring]),
    )
    spec = SemanticProbeSpec.of(config, serving, front_trust)
    prober = _semantic_probe(spec, stack, plan, replicas, front, keys.probe, smoke, preflights)
    outputs = _outputs(config, serving, served, replicas[0], front, monitoring, smoke)
    return outputs | _fleet_outputs(config.promote_from, promoted, plan, replicas, prober, keys)


def _roll_plan(
    config: StackConfig,
    serving: ServingSpec,
    secrets: Secrets,
    gate_key: pulumi.Output[str],
    stack: str,
    hosts: list[HostConfig],
    preflights: list[Preflight],
) -> Roll:
    """What every replica of the roll shares (components/docker/replicas.py)."""
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
    grace = config.container.stop_grace_seconds
    return Roll(
        serving=serving,
        secrets=secrets,
        smoke=config.smoke,
        front=config.front,
        grace_seconds=grace,
        front_on=front_on,
        drain=drain_hook(front_on, grace),
        api_key=gate_key,
        guards=guards,
    )


def _front_args(
    config: StackConfig,
    secrets: Secrets,
    keys: StackKeys,
    guards: GuardCredentials | None,
    network_name: pulumi.Output[str],
    host_count: int,
) -> NginxFrontArgs:
    """The front on the front host's network, taking the users' keys and the stack's own clients'."""
    return NginxFrontArgs(
        front=config.front,
        host=config.target.host,
        container=config.container,
        network_name=network_name,
        api_keys=_with_key(
            _with_key(secrets.api_keys, GATE_METRICS_CLIENT, keys.gate), keys.probe_client, keys.probe
        )
        or secrets.api_keys,
        tls_files=secrets.tls_files,
        metrics_keys=_with_key(secrets.metrics_keys, GATE_METRICS_CLIENT, keys.gate_metrics),
        replica_files=guards.front_files() if guards else None,
        meter=meter_route(config, host_count) if usage_meter_runs(config) else None,
    )


def _warn_when_replaced(
    hardware: str, facts: HardwareFacts, grace_seconds: int, replicas: list[Replica], front: NginxFront
) -> None:
    """What replacing each serving container, and the front, costs: said in the preview."""
    for replica in replicas:
        warn_when_replaced(
            replica.server.container,
            serving_replacement_notice(
                hardware, facts, [r.host.name for r in replicas], replica.host.name, grace_seconds
            ),
        )
    warn_when_replaced(front.container, front_replacement_notice(STOP_GRACE_SECONDS))


def _monitoring(
    spec: ScrapeSpec, stack: str, replicas: list[Replica], guards: GuardCredentials | None
) -> PrometheusScrape:
    """Prometheus on the front's host: every replica (by host name), or the one."""
    home = replicas[0]
    return PrometheusScrape(
        f"{stack}-monitoring",
        spec,
        network_name=home.server.network_name,
        target={r.host.name: r.upstream for r in replicas} if len(replicas) > 1 else home.upstream,
        opts=pulumi.ResourceOptions(providers=[home.provider], depends_on=[home.server]),
        guarded=guarded_scrape(guards),
    )


def _front_gate_args(
    smoke: SmokeConfig,
    plan: Roll,
    host: HostConfig,
    front: NginxFront,
    replicas: list[Replica],
    keys: StackKeys,
    tls: EndpointTls | None,
) -> SmokeTestArgs:
    """The gate through the front, as clients reach the model."""
    return SmokeTestArgs(
        serving=plan.serving,
        smoke=smoke,
        front_url=front.url,
        api_key=plan.api_key,
        image_ref=replicas[0].image.ref,
        metrics_url=smoke.metrics_url or front.metrics_url,
        metrics_key=keys.gate_metrics,
        front_fingerprint=front.fingerprint,
        tls=tls,
        host=host,  # the gate follows the front host's serving container while it waits
        # Several replicas: any one replaced re-runs the front's gate.
        container_id=pulumi.Output.all(*[r.server.container.id for r in replicas]).apply(",".join),
    )


def _semantic_probe(
    spec: SemanticProbeSpec,
    stack: str,
    plan: Roll,
    replicas: list[Replica],
    front: NginxFront,
    api_key: pulumi.Output[str] | None,
    smoke: SmokeTest,
    preflights: list[Preflight],
) -> SemanticProbe | None:
    """The probe on the front's host, asking the front and every replica directly; None when it
    does not run (no key was made for it)."""
    if api_key is None:
        return None
    home, guards = replicas[0], plan.guards
    return SemanticProbe(
        f"{stack}-semantic-probe",
        SemanticProbeArgs(
            spec=spec,
            network_name=home.server.network_name,
            front_host=front.hostname,  # the probe starts after the gate, which waits for the front
            upstream=home.server.upstream,
            api_key=api_key,
            # Every replica directly too, by the address the front uses: so a result names its host.
            replicas=tuple(ProbeReplica(r.host.name, r.upstream, r.guarded) for r in replicas),
            replica_key=guards.key if guards else None,
            scrape_key=guards.scrape_key if guards else None,
            requests_volume=front.requests_volume if spec.probe.eject_replicas else None,
            replica_certificate=guards.certificate.certificate if guards and guards.certificate else None,
            # Its container starts once the gate passed; its image builds while the gates run.
            started_after=(smoke,),
            build_platform=home.host.build_platform,
        ),
        # Only once the hosts passed preflight: a refused host leaves nothing in the state.
        opts=pulumi.ResourceOptions(providers=[home.provider], depends_on=preflights),
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
    """The stack outputs every stack has (:func:`_fleet_outputs` adds the drain's, the probe's, several
    replicas', a promotion's)."""
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
        "vllmFlags": serving.shown_flags,
        "imageRef": home.image.ref,
        "curl": front.url.apply(lambda url: curl_command(url, serving.served_name)),
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


def _fleet_outputs(
    promote_from: str | None,
    promoted: pulumi.Output[str] | None,
    plan: Roll,
    replicas: list[Replica],
    probe: SemanticProbe | None,
    keys: StackKeys,
) -> dict[str, Any]:
    """The outputs of the drain, the probe, the gate's metrics key, several replicas, a promotion."""
    # What the drain needs when `make destroy` meets a config the program refuses (drain_hook.py).
    outputs: dict[str, Any] = {"drain": {"front": plan.front_on, "graceSeconds": plan.grace_seconds}}
    if probe is not None:
        outputs["semanticProbe"] = probe.container_name
    # Secret: `ops smoke` reads these values, not the whole decrypted state.
    outputs["gateApiKey"] = keys.gate
    if keys.gate_metrics is not None:
        outputs["gateMetricsKey"] = keys.gate_metrics
    if len(replicas) > 1:
        outputs["replicas"] = {r.host.name: r.gate.results for r in replicas}
    if promoted is not None:
        outputs["promotedFrom"] = promoted.apply(lambda ref: {"stack": promote_from, "imageRef": ref})
    return outputs
