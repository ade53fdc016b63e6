"""The serving pods on Kubernetes, rendered from the same ``ServingSpec`` the Docker hosts run.
Kept whole past 400 lines: one pod's three containers, volumes and spec, read together.

Pure functions that return Kubernetes objects as the API writes them (camelCase dicts), so tests
assert on exactly what the API server receives: ``components/kubernetes/deployment.py`` hands them to
pulumi-kubernetes unchanged. What differs from a Docker host, and why:

- cards: a resource limit (``nvidia.com/gpu`` / ``huawei.com/Ascend910``) for as many cards as
  ``glm:container.accelerators`` lists; the device plugin picks them, so the Docker form's
  ``CUDA_VISIBLE_DEVICES``/``ASCEND_RT_VISIBLE_DEVICES`` pinning is left out;
- ``/dev/shm``: a memory ``emptyDir`` with ``glm:container.shmSize`` as its size limit (Docker's
  ``--shm-size``); weights read-only (hostPath ``model.hostDir`` or a claim); the JIT cache on a
  claim that outlives the stack;
- stop: a preStop pause (the Service stops routing first), then vLLM's ``--shutdown-timeout``
  drain, inside ``terminationGracePeriodSeconds``; a roll never needs a spare box (``maxSurge: 0``);
- readiness is the gate, not ``/health``: a sidecar in the pod runs the gate's own checks
  (``python -m components.gate``: the served name and length, 13x17 → 221, a tool call, the KV
  pool) against its pod's vLLM, so the Service sends a pod traffic only once it answers right
  (its command line: components/kubernetes/readiness.py);
- the GPU preflight (components/host/preflight.sh, the Docker hosts' file) runs in the pod, an init
  container with vLLM's cards, weights and /dev/shm: a refusal stops the pod before vLLM starts;
- vLLM listens on the pod's loopback (``--host=127.0.0.1``): the pod's one port is its guard's
  (components/kubernetes/guard.py), which asks for the stack's credential as a Docker replica's guard does;
- least privilege (components/kubernetes/pod_security.py): no service-account token, a fixed UID
  that is not root, no capability, a read-only root file system; vLLM writes its caches to the
  claim (``cache_env``) and the rest to ``/tmp`` and ``$HOME``, two ``emptyDir`` volumes
  (``VLLM_SCRATCH``).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from components.config import (
    CACHE_MOUNT_PATH,
    SHUTDOWN_MARGIN_SECONDS,
    VISIBILITY_ENV,
    FrontConfig,
    KubernetesTargetConfig,
    ModelConfig,
    MonitoringConfig,
    PreflightConfig,
    SmokeConfig,
    StackConfig,
)
from components.gate.messages import LookAt
from components.kubernetes.pod_security import (
    GATE_SCRATCH,
    GUARD_SCRATCH,
    VLLM_SCRATCH,
    VLLM_USER_ENV,
    restricted,
)
from components.kubernetes.readiness import (
    GATE_KEY_ENV,
    VERDICT_DIR,
    VERDICT_PROBE_TIMEOUT_SECONDS,
    VERDICT_VOLUME,
    readiness_command,
    verdict_probe,
)
from components.profiles import HardwareFacts
from components.render.preflight import pod_preflight_script
from components.serving.spec import ServingSpec, health_probe
from policy.glm_policies import (
    ACCELERATOR_ANNOTATION,
    CARD_RESOURCES,
    NO_CARDS,
    PLAIN_HTTP_LABEL,
    PUBLIC_BIND_LABEL,
    TLS_LABEL,
)

STARTUP_PERIOD_SECONDS = 10
LIVENESS_PERIOD_SECONDS = 20
LIVENESS_FAILURES = 6
LIVENESS_TIMEOUT_SECONDS = 30
"""Liveness kills a dead engine, never a slow node: two minutes of failed checks, each allowed 30 s.
At 10 s / 3 failures / 10 s, the check's own Python start, starved of CPU on a loaded node, timed
out on healthy pods and the kubelet killed their vLLM mid-roll (stop 43, load 24: 27 of 269 requests
reset); GPUStack's probe restarting instances at peak load is the same failure (SPEC section 7)."""
SERVING_CONTAINER = "vllm"
GATE_CONTAINER = "gate"
PREFLIGHT_CONTAINER = "preflight"
NODE_NAME_ENV = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
"""The pod's node, from the downward API: the preflight's lines name it."""
GUARD_PORT_NAME = "guard"
"""The pod's one published port: the guard sidecar's (components/kubernetes/guard.py), never vLLM's."""
TEMPLATE_ANNOTATION = "glm53/template"
"""The pod template's digest, on the template itself: which pods a roll brings (components/kubernetes/roll.py)."""
ON_ERROR_LOGS = {"terminationMessagePolicy": "FallbackToLogsOnError"}
"""On every container: one that fails without writing its termination message gets its last log
lines there (vLLM's argparse error, the preflight's problems), which the roll's watch quotes."""
HEALTH_TIMEOUT_SECONDS = 10
"""The exec health check's limit: a Python start and one ``/health`` request (5 s at most)."""


LISTENING_TIMEOUT_SECONDS = 10
"""How long the kubelet waits for an nginx pod (the front, a guard) to accept its probe's connection."""


def listening_probe(port: str) -> dict[str, Any]:
    """Readiness of an nginx pod (the front, a guard): it accepts connections on ``port``, whatever is
    behind it. The front's ``/healthz`` goes through to the serving pods, so as its readiness it took
    the front out of its Service (the stack's one door) whenever no serving pod was Ready or one was
    slow. Clients then met refused and reset connections instead of the front's 503 with
    ``Retry-After`` that says why. CI, 2026-12-04: 144 of 276 requests reset during a wrong-answer
    roll on a loaded node. Whether a serving pod should get traffic is its gate's verdict."""
    return {"tcpSocket": {"port": port}, "periodSeconds": 2, "timeoutSeconds": LISTENING_TIMEOUT_SECONDS}


@dataclass(frozen=True)
class PodConfig:
    """What the serving pods read of the stack's config (:meth:`of`), besides the rendered
    ``ServingSpec`` and ``glm:target.kubernetes``."""

    model: ModelConfig
    """The weights: where they are on the node and in the pod; what the preflight checks."""
    smoke: SmokeConfig
    """The steps and ``chat_template_kwargs`` of the pods' readiness (the gate's own checks)."""
    preflight: PreflightConfig
    """``glm:preflight``: whether the init container runs, and its limits."""
    facts: HardwareFacts
    hardware: str
    """The profile (``glm:hardware``): the preflight checks its card."""
    accelerators: tuple[int, ...]
    """``glm:container.accelerators``: as many cards as it lists."""
    gpu_memory_utilization: float
    rehearsing: bool
    """The simulator in place of vLLM: no cards."""
    shutdown_timeout: int | None
    """vLLM's ``--shutdown-timeout`` drain, inside the pods' grace period."""
    guard_image: str
    """The front's nginx image: the guard sidecar runs it (components/kubernetes/guard.py)."""

    @classmethod
    def of(cls, config: StackConfig) -> PodConfig:
        return cls(
            model=config.model,
            smoke=config.smoke,
            preflight=config.preflight,
            facts=config.facts,
            hardware=config.hardware,
            accelerators=tuple(config.container.accelerators),
            gpu_memory_utilization=config.serving.gpu_memory_utilization,
            rehearsing=config.rehearsing,
            shutdown_timeout=config.shutdown_timeout,
            guard_image=config.front.image,
        )


def labels(stack: str, role: str) -> dict[str, str]:
    """The selector labels of one role (``vllm``, ``front``, ``prometheus``) of one stack."""
    return {"app.kubernetes.io/name": f"glm53-{role}", "app.kubernetes.io/instance": stack}


def label_selector(stack: str, role: str) -> str:
    """:func:`labels` as kubectl's ``-l`` and the API's ``labelSelector`` take them."""
    return ",".join(f"{k}={v}" for k, v in labels(stack, role).items())


def accelerator(pod: PodConfig) -> str:
    """The cards' kind the pods request (``nvidia``, ``ascend``), or ``none`` (the simulator)."""
    kind = pod.facts.accelerator
    return NO_CARDS if pod.rehearsing or kind not in CARD_RESOURCES else kind


def card_limits(pod: PodConfig) -> dict[str, str]:
    """``{"nvidia.com/gpu": "8"}`` for eight listed cards; nothing in a rehearsal (no accelerator)."""
    kind = accelerator(pod)
    return {} if kind == NO_CARDS else {CARD_RESOURCES[kind]: str(len(pod.accelerators))}


def opt_in(accepted: bool, label: tuple[str, str]) -> dict[str, str]:
    """The Service annotation that records a public bind's opt-in (the Docker label's key), for the
    policy pack's k8s-node-port-opted-in."""
    return {label[0]: label[1]} if accepted else {}


def front_annotations(front: FrontConfig) -> dict[str, str]:
    """On the front's Service: ``glm53.tls: on`` with ``glm:front.tls``, else the plain-HTTP opt-in."""
    if front.tls:
        return {TLS_LABEL: "on"}
    return opt_in(front.allow_plain_http, PLAIN_HTTP_LABEL)


def prometheus_annotations(monitoring: MonitoringConfig) -> dict[str, str]:
    """``glm:monitoring.allowPublicBind`` on Prometheus' Service."""
    return opt_in(monitoring.allow_public_bind, PUBLIC_BIND_LABEL)


def pod_env(serving: ServingSpec) -> list[dict[str, str]]:
    """The serving env less the Docker form's card pinning (the device plugin assigns the cards)."""
    return [{"name": k, "value": v} for k, v in sorted(serving.env.items()) if k not in VISIBILITY_ENV]


def grace_seconds(pod: PodConfig, k8s: KubernetesTargetConfig) -> int:
    """preStop pause + vLLM's drain (``--shutdown-timeout``) + a margin: SIGKILL never cuts a drain."""
    return k8s.pre_stop_seconds + (pod.shutdown_timeout or 0) + SHUTDOWN_MARGIN_SECONDS


def _volumes(model: ModelConfig, serving: ServingSpec, k8s: KubernetesTargetConfig) -> list[dict[str, Any]]:
    weights: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": k8s.weights_claim, "readOnly": True}}
        if k8s.weights_claim
        else {"hostPath": {"path": model.host_dir, "type": "Directory"}}
    )
    volumes = [
        {"name": "weights", **weights},
        {"name": "jit-cache", "persistentVolumeClaim": {"claimName": k8s.cache_claim}},
    ]
    if serving.container.shm_size_mb is not None:
        volumes.append(
            {
                "name": "dshm",
                "emptyDir": {"medium": "Memory", "sizeLimit": f"{serving.container.shm_size_mb}Mi"},
            }
        )
    volumes += [{"name": f"mount-{i}", "hostPath": {"path": m.source}} for i, m in enumerate(serving.mounts)]
    return volumes + [volume for volume, _ in VLLM_SCRATCH]


def _mounts(model: ModelConfig, serving: ServingSpec) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"name": "weights", "mountPath": model.mount_path, "readOnly": True},
        {"name": "jit-cache", "mountPath": CACHE_MOUNT_PATH},
    ]
    if serving.container.shm_size_mb is not None:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    mounts += [mount for _, mount in VLLM_SCRATCH]
    mounts += [
        {"name": f"mount-{i}", "mountPath": m.target, "readOnly": m.read_only}
        for i, m in enumerate(serving.mounts)
    ]
    return mounts


def serving_container(
    pod: PodConfig, serving: ServingSpec, k8s: KubernetesTargetConfig, image: str
) -> dict[str, Any]:
    """``vllm serve`` with the rendered argv: started once its load fits the gate's deadline
    (a startup probe that never kills a long load), restarted when ``/health`` says the engine died.
    The checks run in the container (Docker's health check): vLLM listens on the pod's loopback,
    where the kubelet's HTTP probes, sent to the pod's address, do not reach."""
    health = {"exec": {"command": health_probe(serving.port)[1:]}, "timeoutSeconds": HEALTH_TIMEOUT_SECONDS}
    limits = card_limits(pod)
    container: dict[str, Any] = {
        "name": SERVING_CONTAINER,
        "image": image,
        "imagePullPolicy": k8s.image_pull_policy,
        "command": ["vllm", "serve"],
        "args": serving.argv,
        "env": pod_env(serving) + VLLM_USER_ENV,
        "volumeMounts": _mounts(pod.model, serving),
        "startupProbe": {
            **health,
            "periodSeconds": STARTUP_PERIOD_SECONDS,
            "failureThreshold": math.ceil(serving.load_deadline_seconds / STARTUP_PERIOD_SECONDS),
        },
        "livenessProbe": {
            **health,
            "timeoutSeconds": LIVENESS_TIMEOUT_SECONDS,
            "periodSeconds": LIVENESS_PERIOD_SECONDS,
            "failureThreshold": LIVENESS_FAILURES,
        },
        "lifecycle": {"preStop": {"sleep": {"seconds": k8s.pre_stop_seconds}}},
        **ON_ERROR_LOGS,
    }
    if limits:
        container["resources"] = {"limits": limits, "requests": limits}
    return container


def preflight_container(
    pod: PodConfig, serving: ServingSpec, k8s: KubernetesTargetConfig, image: str
) -> dict[str, Any]:
    """The preflight on the pod's node before vLLM starts: components/host/preflight.sh, the file the
    Docker hosts run, in the serving image (bash, awk, python3; ``nvidia-smi`` from the container
    runtime, ``npu-smi`` among the profile's mounts), with vLLM's cards, weights, /dev/shm and
    mounts. A refusal exits 1 with one line per problem (node, config key, fix), which the kubelet
    keeps as its termination message for the roll's watch (components/kubernetes/roll.py) to quote."""
    limits = card_limits(pod)
    kind = accelerator(pod)
    script = pod_preflight_script(
        pod.preflight,
        pod.model,
        pod.facts,
        pod.hardware,
        kind,
        len(pod.accelerators) if limits else 0,
        pod.gpu_memory_utilization,
    )
    container: dict[str, Any] = {
        "name": PREFLIGHT_CONTAINER,
        "image": image,
        "imagePullPolicy": k8s.image_pull_policy,
        "command": ["bash", "-c", script],
        "env": [NODE_NAME_ENV, *VLLM_USER_ENV],
        "volumeMounts": _mounts(pod.model, serving),
        **ON_ERROR_LOGS,
    }
    if limits:
        # The same cards as vLLM's: the kubelet hands an init container's devices on to the pod's
        # containers, so the preflight looks at the very cards vLLM gets.
        container["resources"] = {"limits": limits, "requests": limits}
    return container


def gate_container(
    pod: PodConfig, serving: ServingSpec, k8s: KubernetesTargetConfig, image: str, look_at: LookAt
) -> dict[str, Any]:
    """The readiness sidecar: the gate's checks against its pod's vLLM every period, for the pod's
    life; its readiness probe reads their verdict (components/kubernetes/readiness.py)."""
    period = k8s.readiness_period_seconds
    return {
        "name": GATE_CONTAINER,
        "image": image,
        "imagePullPolicy": k8s.image_pull_policy,
        "command": readiness_command(serving, pod.smoke, look_at, period),
        "env": [{"name": GATE_KEY_ENV, "value": "in-pod-no-key"}],
        "volumeMounts": [{"name": VERDICT_VOLUME, "mountPath": VERDICT_DIR}, GATE_SCRATCH[1]],
        "readinessProbe": {
            "exec": {"command": verdict_probe(period, k8s.namespace)},
            "periodSeconds": period,
            "timeoutSeconds": VERDICT_PROBE_TIMEOUT_SECONDS,
            "failureThreshold": 1,
            "successThreshold": 1,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}},
        **ON_ERROR_LOGS,
    }


def serving_deployment_spec(
    pod: PodConfig,
    serving: ServingSpec,
    k8s: KubernetesTargetConfig,
    stack: str,
    image: str,
    gate_image: str,
    guard: tuple[dict[str, Any], dict[str, Any], str],
    look_at: LookAt,
) -> dict[str, Any]:
    """The serving Deployment's spec: ``replicas`` pods, rolled one at a time without a spare box.
    ``guard`` is the guard sidecar, its volume and its release's digest (components/kubernetes/guard.py);
    ``look_at``, what the readiness gate's failures name (``ServingPods.look_at``)."""
    selector = labels(stack, "vllm")
    guard_container, guard_volume, guard_digest = guard
    template: dict[str, Any] = {
        # A new guard release (another key) rolls the pods.
        "metadata": {
            "labels": selector,
            # What the policy pack's k8s-gpu-requests checks the cards against.
            "annotations": {"glm53/guard": guard_digest, ACCELERATOR_ANNOTATION: accelerator(pod)},
        },
        "spec": restricted(
            {
                "terminationGracePeriodSeconds": grace_seconds(pod, k8s),
                "containers": [
                    serving_container(pod, serving, k8s, image),
                    gate_container(pod, serving, k8s, gate_image, look_at),
                    guard_container,
                ],
                "volumes": [
                    *_volumes(pod.model, serving, k8s),
                    guard_volume,
                    {"name": VERDICT_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                    GATE_SCRATCH[0],
                    GUARD_SCRATCH[0],
                ],
                **(
                    {"initContainers": [preflight_container(pod, serving, k8s, image)]}
                    if pod.preflight.enabled
                    else {}
                ),
            }
        ),
    }
    template["metadata"]["annotations"][TEMPLATE_ANNOTATION] = digest(template)
    return {
        "replicas": k8s.replicas,
        "selector": {"matchLabels": selector},
        # maxSurge 0: the old pod frees its cards before the new one needs them.
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        # A pod that never answers right stops the roll; the roll's watch fails `up` on it
        # (components/kubernetes/roll.py), or sooner on a pod that failed.
        "progressDeadlineSeconds": serving.load_deadline_seconds,
        "template": template,
    }


def digest(obj: Any) -> str:
    """16 hex digits of the JSON of ``obj`` (keys sorted): the same object, the same digest."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def serving_service_spec(serving: ServingSpec, stack: str) -> dict[str, Any]:
    """ClusterIP in front of the pods' guards: it lists only Ready pods, those that passed the gate."""
    return {
        "selector": labels(stack, "vllm"),
        "ports": [{"name": "http", "port": serving.port, "targetPort": GUARD_PORT_NAME}],
    }


def cache_volume_spec(k8s: KubernetesTargetConfig, stack: str) -> dict[str, Any] | None:
    """A hostPath PersistentVolume for the cache claim (one-node clusters), kept when released."""
    if k8s.cache_host_path is None:
        return None
    return {
        "capacity": {"storage": k8s.cache_size},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "hostPath": {"path": k8s.cache_host_path, "type": "DirectoryOrCreate"},
        # Only this stack's claim may bind it.
        "claimRef": {"namespace": k8s.namespace, "name": k8s.cache_claim},
    }


def cache_claim_spec(k8s: KubernetesTargetConfig, volume_name: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": k8s.cache_size}},
    }
    if volume_name is not None:
        spec |= {"storageClassName": "", "volumeName": volume_name}
    return spec
