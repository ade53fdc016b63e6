"""The stack on Kubernetes (``glm:target.kubernetes``): the same profile, the same ``ServingSpec``.

The wiring, as ``deploy_docker`` (components/docker/deployment.py) is for Docker hosts, one component per
concern: the images, built where the Docker hosts build them and loaded onto the nodes
(components/kubernetes/images.py); in one namespace, the JIT cache's claim and the serving pods behind a
ClusterIP Service that lists only pods whose in-pod gate passed (components/kubernetes/serving.py), each
pod's guard (components/kubernetes/guard.py); the nginx front (components/kubernetes/front.py); Prometheus
(components/kubernetes/monitoring.py); the smoke gate through the front, which blocks ``pulumi up`` as
on Docker hosts; and the semantic probe (components/kubernetes/semantic_probe.py). The namespace and the JIT
cache's claim (and its volume) are kept on destroy, as the weights are: the next ``up`` adopts
them (server-side apply).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.config import (
    GATE_METRICS_CLIENT,
    FrontConfig,
    KubernetesTargetConfig,
    SemanticProbeConfig,
    SmokeConfig,
    StackConfig,
    semantic_probe_runs,
    usage_meter_runs,
)
from components.front_tls import front_tls
from components.gate.tls import EndpointTls
from components.kubernetes.front import (
    ROUTES_FILE,
    KubernetesFront,
    KubernetesFrontArgs,
    final_scrape_seconds,
    front_grace_seconds,
    upstream_conf,
)
from components.kubernetes.guard import GUARD_PORT, PodGuard, PodGuardArgs, pod_serving
from components.kubernetes.images import ClusterImages, ClusterImagesArgs, build_engine
from components.kubernetes.monitoring import KubernetesScrape, KubernetesScrapeArgs, alert_look_at
from components.kubernetes.pod_events import config_keys
from components.kubernetes.preflight import check_cluster, container_keys
from components.kubernetes.readiness import client_sequences
from components.kubernetes.semantic_probe import KubernetesSemanticProbe, KubernetesSemanticProbeArgs
from components.kubernetes.serving import JitCache, ServingPods, ServingPodsArgs
from components.kubernetes.teardown import PodsGone
from components.kubernetes.workload import PodConfig, grace_seconds
from components.render.nginx_meter import MeterRoute, meter_route
from components.render.prometheus_config import ScrapeSpec
from components.render.replica_guard import SCRAPER
from components.secrets import Secrets, StackKeys
from components.serving.spec import ServingSpec, command_line, curl_command, render_serving
from components.verification.promotion import fingerprint, served_model
from components.verification.semantic_probe_spec import SemanticProbeSpec
from components.verification.smoke_gate import SmokeTest, SmokeTestArgs


def _with_keys(
    users: pulumi.Input[dict[str, str]], extra: dict[str, pulumi.Input[str] | None]
) -> pulumi.Output[dict[str, str]]:
    """``users`` plus the stack's own clients' keys (those that are not None), secret."""
    named = {name: key for name, key in extra.items() if key is not None}
    merged = pulumi.Output.all(users, *named.values()).apply(
        lambda a: {**a[0], **dict(zip(named, a[1:], strict=True))}
    )
    return pulumi.Output.secret(merged)


def deploy_kubernetes(config: StackConfig, secrets: Secrets, stack: str) -> dict[str, Any]:
    """Create the stack's objects on the cluster and return the stack outputs."""
    k8s_target = config.target.kubernetes
    assert k8s_target is not None
    check_cluster(config)  # what the API server knows would stall `up`: refused before anything is created
    unbound = render_serving(config)
    serving = pod_serving(unbound)  # vLLM on the pod's loopback, behind its guard
    images = _cluster_images(config, k8s_target, stack)
    pod = PodConfig.of(config)
    # destroy waits for the slowest pod to stop: a serving pod, or a front pod handing on its counts.
    front_grace = front_grace_seconds(
        usage_meter_runs(config), final_scrape_seconds(config.monitoring.scrape_interval)
    )
    in_ns = _in_namespace(k8s_target, stack, max(grace_seconds(pod, k8s_target), front_grace))
    cache = JitCache(f"{stack}-jit-cache", k8s_target, stack, opts=in_ns)
    guard = PodGuard(stack, PodGuardArgs(config.front, serving.port, k8s_target, stack), opts=in_ns)
    named = config_keys(config, container_keys(config))  # what the roll's failures name
    pods = ServingPods(
        f"{stack}-vllm", _pods_args(pod, serving, k8s_target, stack, images, guard, cache, named), opts=in_ns
    )
    probe = config.semantic_probe if semantic_probe_runs(config) else None
    scrape = _scrape_args(config, k8s_target, stack, images, guard, probe, pods)
    monitoring = KubernetesScrape(stack, scrape, opts=in_ns)
    keys = StackKeys.create(probe, config.smoke, stack, after=[])
    front = KubernetesFront(
        f"{stack}-front",
        _front_args(
            config.front,
            k8s_target,
            stack,
            serving,
            pods,
            secrets,
            keys,
            guard,
            images,
            # The meter picks each request's pod from those its `routes` lister sees, and shares each
            # pod's sequences but the one its readiness check asks with (docs/scaling.md).
            dataclasses.replace(
                meter_route(config, k8s_target.replicas),
                slots_per_replica=client_sequences(config.serving.max_num_seqs),
                pods_file=ROUTES_FILE,
            )
            if usage_meter_runs(config)
            else None,
            config.monitoring.scrape_interval,
            monitoring.address,
        ),
        opts=in_ns,
    )
    front_trust = front_tls(config.front, stack)
    smoke = SmokeTest(
        f"{stack}-smoke",
        _front_gate_args(config.smoke, serving, k8s_target, secrets, images, keys, front_trust, pods, front),
        opts=pulumi.ResourceOptions(depends_on=[pods, front, monitoring]),
    )
    if probe is not None and keys.probe is not None:
        # Its failures name kubectl's commands, as the gate's do.
        spec = SemanticProbeSpec.of(config, serving, front_trust, pods.look_at)
        _semantic_probe(spec, k8s_target, stack, images, front, keys.probe, guard, smoke, in_ns)
    # The served model, not where it listens: the fingerprint a Docker stack of the profile has.
    served = served_model(unbound, config.serving_image, secrets.serving_env_names)
    # Secret: `ops smoke` sends the gate's own key, never a user's.
    return _outputs(k8s_target, serving, served, smoke) | {"gateApiKey": keys.gate}


def _cluster_images(config: StackConfig, k8s_target: KubernetesTargetConfig, stack: str) -> ClusterImages:
    """The images, built by the first host's Docker engine (as on Docker hosts), loaded onto the nodes."""
    return ClusterImages(
        stack,
        ClusterImagesArgs(
            serving_image=config.serving_image,
            gate_base_image=config.semantic_probe.base_image,
            front_image=config.front.image,
            prometheus_image=config.monitoring.image,
            load_command=k8s_target.image_load_template,
            build_platform=config.target.hosts[0].build_platform,
        ),
        opts=pulumi.ResourceOptions(providers=[build_engine(config.target.hosts[0], stack)]),
    )


def _in_namespace(k8s_target: KubernetesTargetConfig, stack: str, grace: int) -> pulumi.ResourceOptions:
    """The cluster's provider and the stack's namespace: what every object of the stack is created in;
    and ``PodsGone``, which ``destroy`` deletes after them all: it waits for the pods to stop."""
    cluster = k8s.Provider(
        f"{stack}-k8s",
        kubeconfig=os.path.expanduser(k8s_target.kubeconfig) if k8s_target.kubeconfig else None,
        context=k8s_target.context,
    )
    namespace = k8s.core.v1.Namespace(
        f"{stack}-namespace",
        metadata={"name": k8s_target.namespace},
        # Kept on destroy with the cache claim in it (deleting a namespace deletes its claims).
        opts=pulumi.ResourceOptions(provider=cluster, retain_on_delete=True),
    )
    gone = PodsGone(f"{stack}-pods-gone", k8s_target, stack, grace)
    return pulumi.ResourceOptions(providers=[cluster], depends_on=[namespace, gone])


def _pods_args(
    pod: PodConfig,
    serving: ServingSpec,
    k8s_target: KubernetesTargetConfig,
    stack: str,
    images: ClusterImages,
    guard: PodGuard,
    cache: JitCache,
    keys: dict[str, str],
) -> ServingPodsArgs:
    return ServingPodsArgs(
        stack=stack,
        pod=pod,
        serving=serving,
        k8s_target=k8s_target,
        serving_image=images.serving,
        gate_image=images.gate,
        guard=guard,
        cache=cache,
        after=images.loaded,
        keys=keys,
    )


def _scrape_args(
    config: StackConfig,
    k8s_target: KubernetesTargetConfig,
    stack: str,
    images: ClusterImages,
    guard: PodGuard,
    probe: SemanticProbeConfig | None,
    pods: ServingPods,
) -> KubernetesScrapeArgs:
    """Prometheus' args: its alerts name kubectl's commands in the namespace, the serving pods' as
    their gates' failures do (``pods.look_at``), and the probe's log."""
    return KubernetesScrapeArgs(
        spec=ScrapeSpec.of(config, alert_look_at(pods.look_at, k8s_target.namespace, stack)),
        monitoring=config.monitoring,
        tls=config.front.tls,
        k8s_target=k8s_target,
        stack=stack,
        script_image=images.gate,
        guard=guard,
        probe_port=probe.port if probe else None,
        after=images.loaded,
    )


def _front_args(
    front: FrontConfig,
    k8s_target: KubernetesTargetConfig,
    stack: str,
    serving: ServingSpec,
    pods: ServingPods,
    secrets: Secrets,
    keys: StackKeys,
    guard: PodGuard,
    images: ClusterImages,
    meter: MeterRoute | None,
    scrape_interval: str,
    prometheus: pulumi.Output[str] | None,
) -> KubernetesFrontArgs:
    """The front before the pods' Service, taking the users' keys and the stack's own clients'."""
    return KubernetesFrontArgs(
        front=front,
        k8s_target=k8s_target,
        stack=stack,
        upstream=pods.service.spec.cluster_ip.apply(lambda ip: upstream_conf(ip, serving.port)),
        api_keys=_with_keys(
            secrets.api_keys,
            {
                GATE_METRICS_CLIENT: keys.gate,
                **({keys.probe_client: keys.probe} if keys.probe_client else {}),
            },
        ),
        # The guards' scrape key reads the front's /metrics too: the probe's kv_pool reads.
        metrics_keys=_with_keys(
            secrets.metrics_keys if secrets.metrics_keys is not None else {},
            {GATE_METRICS_CLIENT: keys.gate_metrics, SCRAPER: guard.credentials.scrape_key},
        ),
        guard_files=guard.credentials.front_files(),
        tls_files=secrets.tls_files,
        after=images.loaded,
        meter=meter,
        prometheus=prometheus,
        scrape_seconds=final_scrape_seconds(scrape_interval),
        lister_image=images.gate,
        serving_port=GUARD_PORT,
    )


def _front_gate_args(
    smoke: SmokeConfig,
    serving: ServingSpec,
    k8s_target: KubernetesTargetConfig,
    secrets: Secrets,
    images: ClusterImages,
    keys: StackKeys,
    tls: EndpointTls | None,
    pods: ServingPods,
    front: KubernetesFront,
) -> SmokeTestArgs:
    """The gate through the front's Service, as clients reach the model."""
    front_url = k8s_target.front_url
    return SmokeTestArgs(
        serving=serving,
        smoke=smoke,
        front_url=front_url,
        api_key=keys.gate,
        image_ref=images.serving,
        metrics_url=smoke.metrics_url or front_url.removesuffix("/v1") + "/metrics",
        metrics_key=keys.gate_metrics,
        tls=tls,
        look_at=pods.look_at,
        # A new pod template (any serving change) or a new front re-runs the gate.
        container_id=pulumi.Output.all(
            pods.deployment.metadata.generation, front.deployment.metadata.generation
        ).apply(lambda g: f"deployment-generation-{g[0]}-front-{g[1]}"),
    )


def _semantic_probe(
    spec: SemanticProbeSpec,
    k8s_target: KubernetesTargetConfig,
    stack: str,
    images: ClusterImages,
    front: KubernetesFront,
    api_key: pulumi.Output[str],
    guard: PodGuard,
    smoke: SmokeTest,
    in_ns: pulumi.ResourceOptions,
) -> KubernetesSemanticProbe:
    """After the gate, as on Docker hosts: its first run meets a model that answers."""
    return KubernetesSemanticProbe(
        f"{stack}-semantic-probe",
        KubernetesSemanticProbeArgs(
            spec=spec,
            k8s_target=k8s_target,
            stack=stack,
            image=images.gate,
            front_ip=front.service.spec.cluster_ip,
            api_key=api_key,
            scrape_key=guard.scrape_key,
            started_after=[smoke, *images.loaded],
        ),
        opts=in_ns,
    )


def _outputs(
    k8s_target: KubernetesTargetConfig, serving: ServingSpec, served: dict[str, Any], smoke: SmokeTest
) -> dict[str, Any]:
    return {
        "endpoint": k8s_target.front_url,
        "servedModelName": serving.served_name,
        # What `make up` ends with, as on Docker hosts: a chat to paste, the key from $GLM_API_KEY.
        "curl": curl_command(k8s_target.front_url, serving.served_name),
        "target": "kubernetes",
        "namespace": k8s_target.namespace,
        "replicas": k8s_target.replicas,
        "commandLine": command_line(serving.argv),
        "servedModelFingerprint": fingerprint(served),
        "smoke": smoke.results,
    }
