"""The stack on Kubernetes (``glm:target.kubernetes``): the same profile, the same ``ServingSpec``.

The images are built where the Docker hosts build them (``glm:target.hosts[0]``'s engine) and
handed to the cluster by ``glm:target.kubernetes.imageLoadCommand`` (a push, or an import into the
nodes' containerd). Then, in one namespace: the serving Deployment (components/k8s_workload.py)
behind a ClusterIP Service that lists only pods whose in-pod gate passed; the nginx front (the same
template, keys in a Secret) behind the Service clients use; and the smoke gate through that Service,
which blocks ``pulumi up`` as on Docker hosts. The namespace and the JIT cache's claim (and its
volume) are kept on destroy, as the weights are: the next ``up`` adopts them (server-side apply).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_docker as docker
import pulumi_kubernetes as k8s

from components import k8s_workload as workload
from components.config import GATE_METRICS_CLIENT, KubernetesTargetConfig, StackConfig, semantic_probe_runs
from components.front_tls import front_tls
from components.k8s_front import deploy_front, upstream_conf
from components.k8s_guard import GUARD_PORT, GUARD_VOLUME, deploy_guard, guard_container, pod_serving
from components.k8s_monitoring import deploy_monitoring
from components.k8s_probe import deploy_probe, probe_service
from components.prometheus_config import ScrapeSpec
from components.promotion import fingerprint, served_model
from components.replica_guard import SCRAPER, guard_credentials
from components.secrets import GeneratedKey, Secrets
from components.semantic_probe.resource import SemanticProbeSpec, build_context
from components.serving_image import ServingImage
from components.smoke_test import SmokeTest, SmokeTestArgs
from components.target import docker_ssh_opts
from components.vllm_server import ServingSpec, command_line, render_serving


@dataclass(frozen=True)
class _Images:
    serving: pulumi.Output[str]
    gate: pulumi.Output[str]
    loaded: list[pulumi.Resource]
    """The load commands: the pods start only once their images are on the nodes."""


def _load(
    name: str, k8s_target: KubernetesTargetConfig, image: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> command.local.Command | None:
    if k8s_target.image_load_command is None:
        return None
    template = k8s_target.image_load_command
    run = pulumi.Output.from_input(image).apply(lambda ref: template.format(image=shlex.quote(ref)))
    return command.local.Command(name, create=run, triggers=[image], opts=opts)


def _images(config: StackConfig, stack: str, k8s_target: KubernetesTargetConfig) -> _Images:
    """The serving image and the gate sidecar's (the semantic probe's image: the gate package and
    its Python packages), built on the first host's Docker engine; the front's image as named."""
    host = config.target.hosts[0]
    provider = docker.Provider(
        f"{stack}-build-docker",
        host=host.docker_host,
        ssh_opts=docker_ssh_opts(host) if host.docker_host.startswith("ssh://") else None,
    )
    on_docker = pulumi.ResourceOptions(providers=[provider])
    if config.serving_image.to_build is not None:
        serving = ServingImage(f"{stack}-image", config.serving_image, opts=on_docker).ref
    else:
        assert config.serving_image.reference is not None
        serving = pulumi.Output.from_input(config.serving_image.reference)
    context, tag = build_context()
    gate = docker.Image(
        f"{stack}-gate-image",
        image_name=tag,
        build=docker.DockerBuildArgs(
            context=context,
            dockerfile=f"{context}/Dockerfile",
            args={"BASE_IMAGE": config.semantic_probe.base_image},
            builder_version=docker.BuilderVersion.BUILDER_BUILD_KIT,
        ),
        skip_push=True,
        opts=on_docker,
    ).image_name
    loads = [
        _load(f"{stack}-load-{role}", k8s_target, ref, on_docker)
        for role, ref in (
            ("serving", serving),
            ("gate", gate),
            ("front", config.front.image),
            ("prometheus", config.monitoring.image),
        )
    ]
    return _Images(serving, gate, [c for c in loads if c is not None])


ROLLOUT_MARGIN_SECONDS = 120


def _cache_claim(
    stack: str, k8s_target: KubernetesTargetConfig, opts: pulumi.ResourceOptions
) -> k8s.core.v1.PersistentVolumeClaim:
    """The JIT cache's claim (and, on one-node clusters, its hostPath volume): kept on destroy."""
    kept = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True))
    volume_spec = workload.cache_volume_spec(k8s_target, stack)
    volume_name = f"{k8s_target.namespace}-{k8s_target.cache_claim}" if volume_spec else None
    depends: list[pulumi.Resource] = []
    if volume_spec is not None:
        depends.append(
            k8s.core.v1.PersistentVolume(
                f"{stack}-jit-cache-volume", metadata={"name": volume_name}, spec=volume_spec, opts=kept
            )
        )
    return k8s.core.v1.PersistentVolumeClaim(
        f"{stack}-jit-cache",
        metadata={"namespace": k8s_target.namespace, "name": k8s_target.cache_claim},
        spec=workload.cache_claim_spec(k8s_target, volume_name),
        # Bound later, by the first pod: do not wait for it here.
        opts=pulumi.ResourceOptions.merge(kept, pulumi.ResourceOptions(depends_on=depends)),
    )


def deploy_kubernetes(config: StackConfig, secrets: Secrets, stack: str) -> dict[str, Any]:
    """Create the stack's objects on the cluster and return the stack outputs."""
    k8s_target = config.target.kubernetes
    assert k8s_target is not None
    unbound: ServingSpec = render_serving(config)
    serving = pod_serving(unbound)  # vLLM on the pod's loopback, behind its guard
    images = _images(config, stack, k8s_target)
    provider = k8s.Provider(
        f"{stack}-k8s",
        kubeconfig=os.path.expanduser(k8s_target.kubeconfig) if k8s_target.kubeconfig else None,
        context=k8s_target.context,
    )
    on_k8s = pulumi.ResourceOptions(provider=provider)
    namespace = k8s.core.v1.Namespace(
        f"{stack}-namespace",
        metadata={"name": k8s_target.namespace},
        # Kept on destroy with the cache claim in it (deleting a namespace deletes its claims).
        opts=pulumi.ResourceOptions.merge(on_k8s, pulumi.ResourceOptions(retain_on_delete=True)),
    )
    in_ns = pulumi.ResourceOptions.merge(on_k8s, pulumi.ResourceOptions(depends_on=[namespace]))
    claim = _cache_claim(stack, k8s_target, in_ns)
    # With TLS, one certificate for every pod's guard: the front and Prometheus verify its one name.
    credentials = guard_credentials(stack, [], tls=config.front.tls)
    guard = deploy_guard(stack, config.front, serving, k8s_target, credentials, in_ns)
    # A roll starts the pods one after the other, each allowed the gate's deadline; a pod that
    # never answers right fails `up` when this runs out (the old pods keep serving meanwhile).
    rollout = f"{serving.load_deadline_seconds * k8s_target.replicas + ROLLOUT_MARGIN_SECONDS}s"
    custom = pulumi.CustomTimeouts(create=rollout, update=rollout)
    pods = k8s.apps.v1.Deployment(
        f"{stack}-vllm",
        metadata={"namespace": k8s_target.namespace, "name": "glm53-vllm"},
        spec=pulumi.Output.all(images.serving, images.gate, guard.digest).apply(
            lambda refs: workload.serving_deployment_spec(
                config,
                serving,
                k8s_target,
                stack,
                refs[0],
                refs[1],
                (guard_container(k8s_target, config.front.image), GUARD_VOLUME, refs[2]),
            )
        ),
        opts=pulumi.ResourceOptions.merge(
            in_ns,
            pulumi.ResourceOptions(depends_on=[claim, guard.release, *images.loaded], custom_timeouts=custom),
        ),
    )
    service = k8s.core.v1.Service(
        f"{stack}-vllm-service",
        metadata={"namespace": k8s_target.namespace, "name": "glm53-vllm"},
        spec=workload.serving_service_spec(serving, stack),
        opts=in_ns,
    )
    probe_spec = (
        SemanticProbeSpec.of(config, serving, front_tls(config.front))
        if semantic_probe_runs(config)
        else None
    )
    probe_svc = probe_service(stack, probe_spec, k8s_target, in_ns) if probe_spec else None
    loaded = pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(depends_on=images.loaded))
    monitoring = deploy_monitoring(
        config,
        ScrapeSpec.of(config),
        stack,
        k8s_target,
        loaded,
        script_image=images.gate,
        port=GUARD_PORT,
        scrape_key=guard.scrape_key,
        probe_target=probe_svc.spec.cluster_ip.apply(lambda ip: f"{ip}:{config.semantic_probe.port}")
        if probe_svc
        else None,
    )
    probe_key = (
        GeneratedKey(f"{stack}-semantic-probe-key", config.semantic_probe.client_name, "sk-probe-").key
        if probe_spec
        else None
    )
    metrics_key = (
        None
        if config.smoke.metrics_url
        else GeneratedKey(f"{stack}-smoke-metrics-key", GATE_METRICS_CLIENT, "sk-gate-metrics-").key
    )

    def with_gate_key(args: list[Any]) -> dict[str, str]:
        # The guards' scrape key reads the front's /metrics too: the probe's kv_pool reads.
        return {**args[0], **({GATE_METRICS_CLIENT: args[1]} if args[1] else {}), SCRAPER: args[2]}

    users: pulumi.Input[dict[str, str]] = secrets.metrics_keys if secrets.metrics_keys is not None else {}
    metrics_keys: pulumi.Output[dict[str, str]] = pulumi.Output.secret(
        pulumi.Output.all(users, metrics_key, credentials.scrape_key).apply(with_gate_key)
    )
    upstream = service.spec.cluster_ip.apply(lambda ip: upstream_conf(ip, serving.port))
    front_keys = secrets.api_keys
    if probe_key is not None:
        front_keys = pulumi.Output.secret(
            pulumi.Output.all(secrets.api_keys, probe_key).apply(
                lambda a: {**a[0], config.semantic_probe.client_name: a[1]}
            )
        )
    front, front_service = deploy_front(
        config,
        stack,
        k8s_target,
        loaded,
        upstream,
        front_keys,
        metrics_keys,
        credentials.front_files(),
        secrets.tls_files,
    )
    api_key = secrets.api_keys.apply(lambda keys: keys[sorted(keys)[0]])
    front_url = k8s_target.front_url
    smoke = SmokeTest(
        f"{stack}-smoke",
        SmokeTestArgs(
            serving=serving,
            smoke=config.smoke,
            front_url=front_url,
            api_key=api_key,
            image_ref=images.serving,
            metrics_url=config.smoke.metrics_url or front_url.removesuffix("/v1") + "/metrics",
            metrics_key=metrics_key,
            tls=front_tls(config.front),
            # A new pod template (any serving change) or a new front re-runs the gate.
            container_id=pulumi.Output.all(pods.metadata.generation, front.metadata.generation).apply(
                lambda g: f"deployment-generation-{g[0]}-front-{g[1]}"
            ),
        ),
        opts=pulumi.ResourceOptions(depends_on=[pods, service, front, front_service, monitoring]),
    )
    if probe_spec is not None and probe_key is not None:
        # After the gate, as on Docker hosts: its first run meets a model that answers.
        deploy_probe(
            stack,
            probe_spec,
            k8s_target,
            pulumi.ResourceOptions.merge(loaded, pulumi.ResourceOptions(depends_on=[smoke])),
            image=images.gate,
            front_ip=front_service.spec.cluster_ip,
            api_key=probe_key,
            scrape_key=guard.scrape_key,
        )
    # The served model, not where it listens: the fingerprint a Docker stack of the profile has.
    served = served_model(unbound, config.serving_image, secrets.serving_env_names)
    return {
        "endpoint": front_url,
        "target": "kubernetes",
        "namespace": k8s_target.namespace,
        "replicas": k8s_target.replicas,
        "commandLine": command_line(serving.argv),
        "servedModelFingerprint": fingerprint(served),
        "smoke": smoke.results,
    }
