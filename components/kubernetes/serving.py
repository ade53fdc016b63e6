"""The serving pods on Kubernetes as components: the JIT cache's claim, and the Deployment of the
pods (vLLM, the gate sidecar, the guard) behind the ClusterIP Service the front uses.

What the pods are is rendered in components/kubernetes/workload.py (pure: the objects as the API server
receives them); these components hand it to pulumi-kubernetes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.config import KubernetesTargetConfig
from components.gate.messages import LookAt
from components.kubernetes import workload
from components.kubernetes.guard import GUARD_VOLUME, PodGuard, guard_container
from components.kubernetes.roll import RollWatch, RollWatchArgs
from components.kubernetes.state import moved_from_root
from components.serving.spec import ServingSpec

ROLLOUT_MARGIN_SECONDS = 120
SERVING_NAME = "glm53-vllm"
"""The serving Deployment's and Service's name in the namespace."""
SKIP_AWAIT = "pulumi.com/skipAwait"


def where_to_look(namespace: str, selector: str) -> LookAt:
    """What a gate's failure names on the cluster, kubectl in the stack's namespace: the serving
    containers' logs (every serving pod's, each line under its pod's name: ``logs deploy/`` would
    read one pod kubectl picks, perhaps not the failing one), the stack's pods (the front's among
    them), and the serving pods as they run (each one's argv, image and events: an old pod still
    serving shows there). ``selector``: the serving pods' labels, as ``-l`` takes them."""
    kubectl = f"kubectl -n {namespace}"
    return LookAt(
        logs=f"{kubectl} logs -l {selector} -c {workload.SERVING_CONTAINER} --prefix --tail=50",
        running=f"{kubectl} get pods",
        inspect=f"{kubectl} describe pods -l {selector}",
    )


class JitCache(pulumi.ComponentResource):
    """The JIT cache's claim (and, on one-node clusters, its hostPath volume): kept on destroy, as
    the Docker hosts' cache volume is; the next ``up`` adopts them (server-side apply)."""

    claim: k8s.core.v1.PersistentVolumeClaim

    def __init__(
        self,
        name: str,
        k8s_target: KubernetesTargetConfig,
        stack: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("glm:k8s_serving:JitCache", name, None, opts)
        kept = pulumi.ResourceOptions.merge(
            moved_from_root(self), pulumi.ResourceOptions(retain_on_delete=True)
        )
        volume_spec = workload.cache_volume_spec(k8s_target, stack)
        volume_name = f"{k8s_target.namespace}-{k8s_target.cache_claim}" if volume_spec else None
        depends: list[pulumi.Resource] = []
        if volume_spec is not None:
            depends.append(
                k8s.core.v1.PersistentVolume(
                    f"{name}-volume", metadata={"name": volume_name}, spec=volume_spec, opts=kept
                )
            )
        self.claim = k8s.core.v1.PersistentVolumeClaim(
            name,
            metadata={"namespace": k8s_target.namespace, "name": k8s_target.cache_claim},
            spec=workload.cache_claim_spec(k8s_target, volume_name),
            # Bound later, by the first pod: do not wait for it here.
            opts=pulumi.ResourceOptions.merge(kept, pulumi.ResourceOptions(depends_on=depends)),
        )
        self.register_outputs({})


@dataclass(frozen=True)
class ServingPodsArgs:
    """The pods' config and what they run (pass the cluster's provider in ``opts``)."""

    stack: str
    """The stack's name: the pods' labels (``app.kubernetes.io/instance``)."""
    pod: workload.PodConfig
    """What the pods read of the stack's config: its profile's cards, the weights, the smoke steps
    the pods' readiness runs, the preflight, vLLM's drain, the guard's image."""
    serving: ServingSpec
    """The rendered ``vllm serve`` (on the pod's loopback: ``pod_serving``)."""
    k8s_target: KubernetesTargetConfig
    """``glm:target.kubernetes``: namespace, replicas, pull policy, preStop, readiness period."""
    serving_image: pulumi.Input[str]
    """The serving image (components/kubernetes/images.py): vLLM's, and the preflight's."""
    gate_image: pulumi.Input[str]
    """The readiness sidecar's image (components/kubernetes/images.py)."""
    guard: PodGuard
    """The pods' guard: its release rolls the pods, and the pods start after it."""
    cache: JitCache
    """The JIT cache's claim the pods mount."""
    after: list[pulumi.Resource]
    """What the pods wait for besides: the images' loads onto the nodes."""
    keys: dict[str, str]
    """What the roll's watch names when a pod's events say it cannot come up (``RollWatchArgs.keys``)."""


class ServingPods(pulumi.ComponentResource):
    """``replicas`` serving pods, rolled one at a time, behind a Service that lists only the pods
    whose in-pod gate passed."""

    deployment: k8s.apps.v1.Deployment
    roll: RollWatch
    """Done when the pods of the current template are rolled out; ``up`` fails when one failed."""
    service: k8s.core.v1.Service
    """The pods' ClusterIP Service: the front's upstream."""
    look_at: LookAt
    """What a gate's failure names to see the pods (their readiness gate's, the front's gate's)."""

    def __init__(self, name: str, args: ServingPodsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("glm:k8s_serving:ServingPods", name, None, opts)
        pod, serving, k8s_target = args.pod, args.serving, args.k8s_target
        child = moved_from_root(self)
        selector = workload.label_selector(args.stack, "vllm")
        self.look_at = where_to_look(k8s_target.namespace, selector)

        def spec(refs: list[Any]) -> dict[str, Any]:
            guard = (guard_container(k8s_target, pod.guard_image), GUARD_VOLUME, refs[2])
            return workload.serving_deployment_spec(
                pod, serving, k8s_target, args.stack, refs[0], refs[1], guard, self.look_at
            )

        specs = pulumi.Output.all(args.serving_image, args.gate_image, args.guard.digest).apply(spec)
        self.deployment = k8s.apps.v1.Deployment(
            name,
            # Applied without pulumi-kubernetes' wait: the roll's watch below waits, and fails fast.
            metadata={
                "namespace": k8s_target.namespace,
                "name": SERVING_NAME,
                "annotations": {SKIP_AWAIT: "true"},
            },
            spec=specs,
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[args.cache, args.guard.release, *args.after])
            ),
        )
        # A roll starts the pods one after the other, each allowed the gate's deadline; a pod that
        # never answers right fails `up` when this runs out (the old pods keep serving meanwhile),
        # one that failed (its engine, its gate, the preflight) fails it at once.
        self.roll = RollWatch(
            f"{name}-roll",
            RollWatchArgs(
                kubeconfig=os.path.expanduser(k8s_target.kubeconfig) if k8s_target.kubeconfig else None,
                context=k8s_target.context,
                namespace=k8s_target.namespace,
                deployment=SERVING_NAME,
                selector=selector,
                template=specs.apply(
                    lambda s: s["template"]["metadata"]["annotations"][workload.TEMPLATE_ANNOTATION]
                ),
                generation=self.deployment.metadata.apply(lambda m: m.generation if m else None),
                deadline_seconds=serving.load_deadline_seconds * k8s_target.replicas + ROLLOUT_MARGIN_SECONDS,
                keys=args.keys,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.deployment]),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={"namespace": k8s_target.namespace, "name": SERVING_NAME},
            spec=workload.serving_service_spec(serving, args.stack),
            opts=child,
        )
        self.register_outputs({})
