"""The cluster's preflight: before anything of a Kubernetes stack is created, what the API server
already knows would make ``up`` wait out a deadline, refused with the config key and the fix.

Without it the first ``up`` on a cluster without a provisioner waited 300 s on the JIT cache's claim
and said only that the claim had not become live (issue 52). Read with ``kubectl`` (the stack's
kubeconfig and context, as the roll's watch reads, components/kubernetes/roll.py), decided by
:func:`cluster_problems`, a pure function over the objects as ``kubectl get -o json`` prints them:

- the JIT cache's claim has nothing to bind it: no ``cacheHostPath``, no claim of that name in the
  namespace already, and no default StorageClass;
- the namespace does not exist and this kubeconfig may not create it, or it is being deleted;
- ``weightsClaim`` names a claim the namespace does not hold;
- no node offers the cards the profile requests (the device plugin's resource, ``nvidia.com/gpu``);
- ``imagePullPolicy: Never`` with no ``imageLoadCommand``, and an image no node holds.

What only the node knows (a hostPath folder, a pull from a registry, the pod's sandbox) is read from
the pods' events while they roll (components/kubernetes/pod_events.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.config import StackConfig
from components.config.values import fix_command, named
from components.kubernetes.guard import GUARD_CONTAINER
from components.kubernetes.workload import (
    GATE_CONTAINER,
    PREFLIGHT_CONTAINER,
    SERVING_CONTAINER,
    PodConfig,
    card_limits,
)
from components.serving.image import build_tag
from components.verification.semantic_probe_image import build_context

K8S = "glm:target.kubernetes"
KUBECTL_TIMEOUT_SECONDS = 20
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
NODE_IMAGES_LISTED = 50
"""The kubelet lists at most this many images in a node's status (``nodeStatusMaxImages``): a node
listing as many may hold more, so an image missing from its list is not known to be missing."""
DESTROYING = "GLM_DESTROY_DRAIN"
"""Set by ``scripts/pulumi.sh destroy`` (components/docker/drain_hook.py's ``DESTROY_DRAIN``, which
the Kubernetes target may not import): the program runs for a destroy, which needs no preflight."""
ONE_NODE_CACHE = "/var/lib/glm53-local/k8s-jit-cache"
"""The project's one-node cluster sees the host's /var/lib/glm53-local (scripts/k8s/cluster.sh)."""


@dataclass(frozen=True)
class ClusterNeeds:
    """What the stack will ask of the cluster, as plain values (:meth:`of`)."""

    namespace: str
    cache_claim: str
    cache_host_path: str | None
    weights_claim: str | None
    cards: dict[str, int]
    """The device plugin's resource and how many each pod requests (none in a rehearsal)."""
    images: dict[str, str]
    """Each image the pods run, with the config key it comes from."""
    pull_policy: str
    load_command: str | None
    kubeconfig: str | None = None
    context: str | None = None

    @classmethod
    def of(cls, config: StackConfig) -> ClusterNeeds:
        k8s = config.target.kubernetes
        assert k8s is not None
        return cls(
            namespace=k8s.namespace,
            cache_claim=k8s.cache_claim,
            cache_host_path=k8s.cache_host_path,
            weights_claim=k8s.weights_claim,
            cards={r: int(n) for r, n in card_limits(PodConfig.of(config)).items()},
            images=image_keys(config),
            pull_policy=k8s.image_pull_policy,
            load_command=k8s.image_load_template,
            kubeconfig=os.path.expanduser(k8s.kubeconfig) if k8s.kubeconfig else None,
            context=k8s.context,
        )


def _images(config: StackConfig) -> dict[str, tuple[str, str]]:
    """Each image the stack runs on the cluster, by role: its reference and the key that names it."""
    image = config.serving_image
    build = image.to_build
    serving = (
        (build_tag(build.repository, build.context), "glm:image.build (built on glm:target.hosts[0])")
        if build is not None
        else (str(image.reference), f"glm:image.reference={image.reference!r}")
    )
    gate = (
        f"the gate sidecar's image, built on glm:semanticProbe.baseImage={config.semantic_probe.base_image!r}"
    )
    return {
        "serving": serving,
        "gate": (build_context()[1], gate),
        "front": (config.front.image, f"glm:front.image={config.front.image!r}"),
        "prometheus": (config.monitoring.image, f"glm:monitoring.image={config.monitoring.image!r}"),
    }


def image_keys(config: StackConfig) -> dict[str, str]:
    """Each image reference the stack's pods run → the key that names it."""
    return dict(_images(config).values())


def container_keys(config: StackConfig) -> dict[str, str]:
    """The serving pods' containers → the key that names the image each runs (their events name it)."""
    images = _images(config)
    return {
        SERVING_CONTAINER: images["serving"][1],
        PREFLIGHT_CONTAINER: images["serving"][1],
        GATE_CONTAINER: images["gate"][1],
        GUARD_CONTAINER: images["front"][1],
    }


@dataclass(frozen=True)
class ClusterFacts:
    """What the API server said (``kubectl get … -o json``'s items). None: this kubeconfig may not
    read them (a user with rights in one namespace may not list nodes): their checks stand aside."""

    nodes: list[dict[str, Any]] | None
    storage_classes: list[dict[str, Any]] | None = field(default_factory=list)
    namespace: dict[str, Any] | None = None
    """The stack's namespace, None where it does not exist yet (or may not be read)."""
    may_create_namespace: bool = True
    """Where the namespace does not exist (or may not be read): whether it may be created."""
    claims: list[dict[str, Any]] | None = field(default_factory=list)
    """The namespace's PersistentVolumeClaims."""


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", "?"))


def _default_class(classes: list[dict[str, Any]]) -> str | None:
    for c in classes:
        annotations = (c.get("metadata") or {}).get("annotations") or {}
        if any(annotations.get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS):
            return _name(c)
    return None


def _quantity(value: Any) -> int:
    """A device count as the API writes it (``"8"``); anything else counts as none."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def normalised_image(ref: str) -> str:
    """An image reference as containerd and the kubelet list it.

    >>> normalised_image("glm53-local/nginx:bookworm"), normalised_image("nginx:1.27")
    ('docker.io/glm53-local/nginx:bookworm', 'docker.io/library/nginx:1.27')
    >>> normalised_image("registry.example.internal:5000/glm/vllm:1")
    'registry.example.internal:5000/glm/vllm:1'
    """
    first, _, rest = ref.partition("/")
    if not rest:
        return f"docker.io/library/{ref}"
    if "." in first or ":" in first or first == "localhost":
        return ref
    return f"docker.io/{ref}"


def _cache_problem(needs: ClusterNeeds, facts: ClusterFacts) -> str | None:
    if facts.storage_classes is None or facts.claims is None:
        return None
    if needs.cache_host_path is not None or any(_name(c) == needs.cache_claim for c in facts.claims):
        return None
    if _default_class(facts.storage_classes) is not None:
        return None
    classes = ", ".join(_name(c) for c in facts.storage_classes) or "none at all"
    return (
        f"the JIT cache's claim {needs.namespace}/{needs.cache_claim} ({K8S}.cacheClaim) would wait for a "
        f"volume until `up`'s deadline: the cluster has no default StorageClass (it has: {classes}), "
        f"{K8S}.cacheHostPath is unset and the namespace holds no such claim. Fix: on a one-node cluster, "
        + fix_command(f"config set --path '{K8S}.cacheHostPath' {ONE_NODE_CACHE}")
        + " (a hostPath volume kept on destroy); elsewhere create the claim yourself (kubectl -n "
        f"{needs.namespace} apply a PersistentVolumeClaim named {needs.cache_claim}) or mark a StorageClass "
        'default (storageclass.kubernetes.io/is-default-class: "true").'
    )


def _namespace_problem(needs: ClusterNeeds, facts: ClusterFacts) -> str | None:
    ns = needs.namespace
    if facts.namespace is None and not facts.may_create_namespace:
        return (
            f"{K8S}.namespace={ns!r} does not exist, and this kubeconfig may not create namespaces "
            "(kubectl auth can-i create namespaces: no). Fix: have a cluster admin run `kubectl create "
            f"namespace {ns}` and grant this kubeconfig's user edit rights in it, or set {K8S}.namespace "
            "to a namespace it may use."
        )
    if facts.namespace is not None and (facts.namespace.get("status") or {}).get("phase") == "Terminating":
        return (
            f"{K8S}.namespace={ns!r} is being deleted (phase Terminating): what `up` creates there would "
            f"go with it. Fix: wait until `kubectl get namespace {ns}` finds none, or set {K8S}.namespace "
            "to another."
        )
    return None


def _weights_claim_problem(needs: ClusterNeeds, facts: ClusterFacts) -> str | None:
    claim = needs.weights_claim
    if claim is None or facts.claims is None or any(_name(c) == claim for c in facts.claims):
        return None
    return (
        f"{K8S}.weightsClaim={claim!r} is not a claim of namespace {needs.namespace}: the serving pods "
        f"would never be scheduled. Fix: create that PersistentVolumeClaim there, holding the weights, or "
        + fix_command(f"config rm --path '{K8S}.weightsClaim'")
        + " (the weights then come from the node's glm:model.hostDir)."
    )


def _cards_problem(needs: ClusterNeeds, facts: ClusterFacts) -> str | None:
    if facts.nodes is None:
        return None
    for resource, wanted in needs.cards.items():
        offered = {
            _name(n): _quantity(((n.get("status") or {}).get("allocatable") or {}).get(resource, 0))
            for n in facts.nodes
        }
        most = max(offered.values(), default=0)
        if most >= wanted:
            continue
        if most == 0:
            seen = f"no node offers {resource}: no device plugin advertises it ({len(offered)} node(s) read)"
        else:
            best = max(offered, key=lambda n: offered[n])
            seen = f"the most any node offers is {most} (node {best})"
        return (
            f"glm:container.accelerators lists {wanted} card(s), which each serving pod requests as "
            f"{resource}: {seen}, so no pod could ever be scheduled. Fix: install the accelerator's device "
            f"plugin on the nodes with the cards (`kubectl get nodes -o "
            f"jsonpath='{{.items[*].status.allocatable}}'` then lists {resource}), or list at most "
            f"{most} card(s) in glm:container.accelerators."
        )
    return None


def _image_problems(needs: ClusterNeeds, facts: ClusterFacts) -> list[str]:
    if needs.pull_policy != "Never" or needs.load_command is not None or not facts.nodes:  # None or none
        return []
    listed = [(n.get("status") or {}).get("images") or [] for n in facts.nodes]
    if any(len(images) >= NODE_IMAGES_LISTED for images in listed):
        return []  # a node may hold more than it lists: absence is not known
    held = {name for images in listed for image in images for name in image.get("names") or []}
    return [
        f"{K8S}.imagePullPolicy=Never and {ref} ({key}) is on no node, and {K8S}.imageLoadCommand is "
        "unset: the pods would never start (ErrImageNeverPull). Fix: "
        + fix_command(
            f"config set --path '{K8S}.imageLoadCommand' 'scripts/k8s/cluster.sh import {{{{image}}}}'"
        )
        + " on the project's one-node cluster (`docker push {{image}}` with a registry the nodes pull "
        f"from, and {K8S}.imagePullPolicy IfNotPresent, elsewhere)."
        for ref, key in needs.images.items()
        if normalised_image(ref) not in held and ref not in held
    ]


def cluster_problems(needs: ClusterNeeds, facts: ClusterFacts) -> list[str]:
    """Every reason the cluster would make ``up`` wait out a deadline, each with its key and fix."""
    found = [
        _namespace_problem(needs, facts),
        _cache_problem(needs, facts),
        _weights_claim_problem(needs, facts),
        _cards_problem(needs, facts),
    ]
    return [p for p in found if p is not None] + _image_problems(needs, facts)


class Unreachable(Exception):
    """kubectl could not read the cluster: the message says why."""


def _kubectl(needs: ClusterNeeds, *args: str, namespaced: bool = False) -> subprocess.CompletedProcess[str]:
    argv = ["kubectl"]
    if needs.kubeconfig:
        argv += ["--kubeconfig", needs.kubeconfig]
    if needs.context:
        argv += ["--context", needs.context]
    if namespaced:
        argv += ["--namespace", needs.namespace]
    return subprocess.run(
        [*argv, *args], capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_SECONDS, check=False
    )


def _read(needs: ClusterNeeds, *args: str, namespaced: bool = False) -> Any:
    """``kubectl get ARGS -o json``'s object; None where this kubeconfig may not read it (Forbidden)."""
    done = _kubectl(needs, "get", *args, "--output", "json", namespaced=namespaced)
    if done.returncode != 0 and "Forbidden" in done.stderr:
        return None
    if done.returncode != 0:
        raise Unreachable(f"kubectl get {' '.join(args)}: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout) if done.stdout.strip() else {}


def _items(needs: ClusterNeeds, *args: str, namespaced: bool = False) -> list[dict[str, Any]] | None:
    found = _read(needs, *args, namespaced=namespaced)
    return None if found is None else list(found.get("items") or [])


def read_cluster(needs: ClusterNeeds) -> ClusterFacts:
    """What :func:`cluster_problems` reads, from the API server (four or five short kubectl calls)."""
    nodes = _items(needs, "nodes")
    classes = _items(needs, "storageclasses") if needs.cache_host_path is None else []
    namespace = _read(needs, "namespace", needs.namespace, "--ignore-not-found")
    may_create = True
    if namespace == {}:  # absent: `auth can-i` answers "yes" (exit 0) or "no" (exit 1)
        may_create = _kubectl(needs, "auth", "can-i", "create", "namespaces").stdout.strip() == "yes"
        claims: list[dict[str, Any]] | None = []
    else:  # there, or not readable by this kubeconfig (its claims may still be)
        claims = _items(needs, "persistentvolumeclaims", namespaced=True)
    return ClusterFacts(nodes, classes, namespace or None, may_create, claims)


def _under_mocks() -> bool:
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import MockMonitor

    return isinstance(settings.get_monitor(), MockMonitor)


def check_cluster(config: StackConfig) -> None:
    """Refuse the stack (exit 32, as a refused config is) when the cluster would make ``up`` wait
    for a cause it already knows. In a preview, a cluster that cannot be read is a warning (the
    review goes on without it); in an ``up``, a refusal. Not under mocks (no cluster) nor in
    ``make destroy`` (which must remove the stack whatever the cluster now says)."""
    if _under_mocks() or DESTROYING in os.environ:
        return
    needs = ClusterNeeds.of(config)
    where = f"({K8S}.kubeconfig={needs.kubeconfig or '$KUBECONFIG or ~/.kube/config'}, context {needs.context or 'its current one'})"
    try:
        if shutil.which("kubectl") is None:
            raise Unreachable(
                "kubectl is not on PATH: the preflight and the roll's watch read the cluster with it. Fix: "
                "install kubectl (the one-node cluster's: export PATH=$(scripts/k8s/build.sh --check):$PATH)"
            )
        problems = cluster_problems(needs, read_cluster(needs))
    except (Unreachable, subprocess.TimeoutExpired, ValueError) as err:
        problems = [
            f"the cluster {where} could not be read: {err}. Fix: start it (the project's one-node cluster: "
            f"make k8s-start), or point {K8S}.kubeconfig and .context at one that answers."
        ]
        if pulumi.runtime.is_dry_run():
            pulumi.log.warn(f"{problems[0]} The preview goes on without the cluster's preflight.")
            return
    if problems:
        said = "the cluster's preflight refuses the stack, before anything is created:\n" + "\n".join(
            problems
        )
        pulumi.log.error(named(said, pulumi.get_stack()))
        raise SystemExit(32)
