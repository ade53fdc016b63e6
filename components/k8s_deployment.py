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

import hashlib
import json
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
from components.k8s_guard import GUARD_PORT, GUARD_VOLUME, deploy_guard, guard_container, pod_serving
from components.k8s_monitoring import deploy_monitoring
from components.k8s_probe import deploy_probe, probe_service
from components.nginx_conf import CONF_FILE, CONTAINER_PORT, NEXT_UPSTREAM_TRIES, render_front_files
from components.prometheus_config import ScrapeSpec
from components.promotion import fingerprint, served_model
from components.replica_guard import guard_credentials
from components.secrets import GeneratedKey, Secrets
from components.semantic_probe.resource import SemanticProbeSpec, build_context
from components.serving_image import ServingImage
from components.smoke_test import SmokeTest, SmokeTestArgs
from components.target import docker_ssh_opts
from components.vllm_server import ServingSpec, command_line, render_serving

FRONT_DIR = "/etc/glm53-front"
"""Where the front's release (nginx.conf, the key maps, the upstream) is mounted in its pod."""
FRONT_ROTATION_DIR = f"{FRONT_DIR}/rotation"
FRONT_DRAIN_SECONDS = 5
FRONT_QUIT = (
    f"sleep {FRONT_DRAIN_SECONDS}; nginx -c {FRONT_DIR}/{CONF_FILE} -s quit; "
    "while [ -e /tmp/nginx.pid ]; do sleep 1; done"
)
"""The front's preStop: out of its Service first, then nginx's graceful quit (SIGTERM is a fast one)."""


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
KEEPALIVE_TIME_SECONDS = 2
"""How long nginx reuses one connection to the Service: shorter than the serving pods' preStop
pause, so no request rides an old connection into a pod that has begun to drain."""


def _upstream_conf(cluster_ip: str, port: int) -> str:
    """The front's upstream: the serving Service, which lists only pods that passed their gate.

    A Service is one address whatever its pods do, and behind it a connection reaches one pod (the
    node's rules pick it when the connection opens): so the address is never marked failed
    (``max_fails=0``: one failure is one pod stopping, not the Service), it is listed once per
    retry nginx may make (a retry is a new connection, which reaches a Ready pod), and each
    connection lives at most ``KEEPALIVE_TIME_SECONDS``, less than the preStop pause.
    """
    server = f"        server {cluster_ip}:{port} max_fails=0;\n"
    return server * NEXT_UPSTREAM_TRIES + f"        keepalive_time {KEEPALIVE_TIME_SECONDS}s;\n"


def _front_files(
    config: StackConfig,
    keys: pulumi.Output[dict[str, str]],
    metrics_keys: pulumi.Output[dict[str, str]],
    guard_files: pulumi.Output[dict[str, str]],
) -> pulumi.Output[dict[str, str]]:
    """The release, with the replica key the pods' guards ask for (components/k8s_guard.py)."""

    def render(args: list[Any]) -> dict[str, str]:
        return render_front_files(
            config.front, dict(args[0]), dict(args[1]), rotation_dir=FRONT_ROTATION_DIR, replica_files=args[2]
        )

    return pulumi.Output.secret(pulumi.Output.all(keys, metrics_keys, guard_files).apply(render))


def _digest(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def _front(
    config: StackConfig,
    stack: str,
    k8s_target: KubernetesTargetConfig,
    opts: pulumi.ResourceOptions,
    upstream: pulumi.Output[str],
    keys: pulumi.Output[dict[str, str]],
    metrics_keys: pulumi.Output[dict[str, str]],
    guard_files: pulumi.Output[dict[str, str]],
) -> tuple[k8s.apps.v1.Deployment, k8s.core.v1.Service]:
    """nginx from the same template: nginx.conf and the upstream in a ConfigMap, the key maps in a
    Secret; a change of either rolls the front (their digest is a pod annotation)."""
    ns = k8s_target.namespace
    files = _front_files(config, keys, metrics_keys, guard_files)
    conf = files.apply(lambda f: {CONF_FILE: f[CONF_FILE]})
    secret_files = files.apply(lambda f: {k: v for k, v in f.items() if k != CONF_FILE})
    config_map = k8s.core.v1.ConfigMap(
        f"{stack}-front-config",
        metadata={"namespace": ns, "name": "glm53-front"},
        data=pulumi.Output.all(pulumi.Output.unsecret(conf), upstream).apply(
            lambda a: {**a[0], "upstream.conf": a[1]}
        ),
        opts=opts,
    )
    secret = k8s.core.v1.Secret(
        f"{stack}-front-keys",
        metadata={"namespace": ns, "name": "glm53-front-keys"},
        string_data=secret_files,
        opts=opts,
    )
    digest = pulumi.Output.unsecret(
        pulumi.Output.all(files, upstream).apply(lambda a: _digest({**a[0], "u": a[1]}))
    )
    selector = workload.labels(stack, "front")
    projected = {
        "sources": [
            {"configMap": {"name": "glm53-front", "items": [
                {"key": CONF_FILE, "path": CONF_FILE}, {"key": "upstream.conf", "path": "rotation/upstream.conf"},
            ]}},
            {"secret": {"name": "glm53-front-keys"}},
        ]
    }  # fmt: skip
    deployment = k8s.apps.v1.Deployment(
        f"{stack}-front",
        metadata={"namespace": ns, "name": "glm53-front"},
        spec={
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": selector, "annotations": {"glm53/release": digest}},
                "spec": {
                    "terminationGracePeriodSeconds": 60,
                    "containers": [{
                        "name": "nginx",
                        "image": config.front.image,
                        "imagePullPolicy": k8s_target.image_pull_policy,
                        "command": ["nginx", "-c", f"{FRONT_DIR}/{CONF_FILE}", "-e", "stderr", "-g", "daemon off;"],
                        "ports": [{"name": "http", "containerPort": CONTAINER_PORT}],
                        "volumeMounts": [{"name": "release", "mountPath": FRONT_DIR, "readOnly": True}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 2},
                        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", FRONT_QUIT]}}},
                    }],
                    "volumes": [{"name": "release", "projected": projected}],
                },
            },
        },
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[config_map, secret])),
    )  # fmt: skip
    port: dict[str, Any] = {"name": "http", "port": CONTAINER_PORT, "targetPort": "http"}
    if k8s_target.front_node_port is not None:
        port["nodePort"] = k8s_target.front_node_port
    service = k8s.core.v1.Service(
        f"{stack}-front-service",
        metadata={"namespace": ns, "name": "glm53-front", "annotations": workload.front_annotations(config)},
        spec={
            "type": "NodePort" if k8s_target.front_node_port is not None else "ClusterIP",
            "selector": selector,
            "ports": [port],
        },
        opts=opts,
    )
    return deployment, service


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
    credentials = guard_credentials(stack, [], tls=False)
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
    probe_spec = SemanticProbeSpec.of(config, serving) if semantic_probe_runs(config) else None
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
        return {**args[0], **({GATE_METRICS_CLIENT: args[1]} if args[1] else {})}

    users: pulumi.Input[dict[str, str]] = secrets.metrics_keys if secrets.metrics_keys is not None else {}
    metrics_keys: pulumi.Output[dict[str, str]] = pulumi.Output.secret(
        pulumi.Output.all(users, metrics_key).apply(with_gate_key)
    )
    upstream = service.spec.cluster_ip.apply(lambda ip: _upstream_conf(ip, serving.port))
    front_keys = secrets.api_keys
    if probe_key is not None:
        front_keys = pulumi.Output.secret(
            pulumi.Output.all(secrets.api_keys, probe_key).apply(
                lambda a: {**a[0], config.semantic_probe.client_name: a[1]}
            )
        )
    front, front_service = _front(
        config, stack, k8s_target, loaded, upstream, front_keys, metrics_keys, credentials.front_files()
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
            vllm_upstream=service.spec.cluster_ip.apply(lambda ip: f"{ip}:{serving.port}"),
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
