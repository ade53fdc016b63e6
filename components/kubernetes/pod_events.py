"""What a rolling pod's events say that its containers cannot: a volume that will not mount, a pod
no node takes, an image the node cannot get, a sandbox the runtime cannot make.

The roll's watch (components/kubernetes/roll.py) read only the pods' container states, so a pod
stuck before its containers exist (``Init:0/1``, ``ContainerCreating``, ``Pending``) waited out the
whole deadline and then said ``ProgressDeadlineExceeded``, while ``kubectl describe pod`` showed the
cause from the first second (issue 52: ``FailedMount … hostPath type check failed``, 300 s). Pure
functions over core/v1 Events as ``kubectl get events -o json`` prints them; each failure quotes the
event and names the config key behind it (:func:`config_keys`, computed by the program and handed
to the watch as plain text).
"""

from __future__ import annotations

import re
from typing import Any

from components.config import StackConfig
from policy.glm_policies import CARD_RESOURCES

IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"})
"""Image failures: an event's reason (``ErrImageNeverPull``) or, under the kubelet's ``Failed`` and
``BackOff`` reasons, its message (``Error: ErrImagePull``, ``Back-off pulling image …``)."""
SANDBOX_REPEATS = 2
"""A sandbox the runtime failed to make this many times: the kubelet retries a first failure (a
network set-up racing a deletion), not a cause that lasts."""
MOUNT_REPEATS = 3
"""A mount failure other than a missing hostPath (:data:`DETERMINISTIC_MOUNT`) counts once the kubelet
has met it this many times (the event's ``count``). CI on the one-node cluster, 2026-12-06, twice:
``error processing PVC …: no relationship found between node and this object`` at a pod's first
second, while the node's authorizer caught up with the new pod. Waiting a fixed time for it was not
enough (the event outlived its cause while the sandbox was made: ``up`` failed at 8 s); a repeat is
the kubelet saying it again."""
_VOLUME = re.compile(r'volume "([^"]+)"')
_CLAIM = re.compile(r'persistentvolumeclaim "([^"]+)" not found')
_CONTAINER = re.compile(r"spec\.(?:initContainers|containers)\{([^}]+)\}")


def config_keys(config: StackConfig, containers: dict[str, str]) -> dict[str, str]:
    """``volume:<name>``, ``container:<name>``, ``claim:<name>`` and ``cards`` → the config key
    behind it and the fix, as the watch's failures print them. ``containers``: the pods' container
    names → the key of the image each runs."""
    k8s = config.target.kubernetes
    assert k8s is not None
    weights = (
        f"glm:target.kubernetes.weightsClaim={k8s.weights_claim!r}. Fix: create that claim in namespace "
        f"{k8s.namespace}, holding the weights, or unset the key to read glm:model.hostDir on the node"
        if k8s.weights_claim
        else f"glm:model.hostDir={config.model.host_dir!r}, the weights' folder on the pod's node (a hostPath). "
        "Fix: put the weights there on every node that may run the pod, or set glm:model.hostDir to "
        "where they are, or glm:target.kubernetes.weightsClaim to a claim that holds them (the "
        "project's one-node cluster sees the host's /var/lib/glm53-local only if it existed when the "
        "cluster started: make k8s-stop, then make up STACK=local-k8s again)"
    )
    cache = (
        f"glm:target.kubernetes.cacheHostPath={k8s.cache_host_path!r} (the JIT cache's folder on the node). "
        "Fix: a folder the node can create, or unset the key to use the default StorageClass"
        if k8s.cache_host_path
        else f"glm:target.kubernetes.cacheClaim={k8s.cache_claim!r}. Fix: a claim the cluster can bind "
        "(a default StorageClass), or glm:target.kubernetes.cacheHostPath on a one-node cluster"
    )
    keys = {"volume:weights": weights, "volume:jit-cache": cache, f"claim:{k8s.cache_claim}": cache}
    if k8s.weights_claim:
        keys[f"claim:{k8s.weights_claim}"] = weights
    for i, mount in enumerate(config.serving_mounts):
        keys[f"volume:mount-{i}"] = (
            f"glm:container.mounts[{i}] (source {mount.source!r}, a hostPath on the node). Fix: create it "
            "on every node that may run the pod, or remove the mount"
        )
    loaded = (
        f"glm:target.kubernetes.imageLoadCommand={k8s.image_load_command!r} loads it onto the nodes"
        if k8s.image_load_command
        else f"glm:target.kubernetes.imagePullPolicy={k8s.image_pull_policy}: the nodes pull it themselves"
    )
    for name, key in containers.items():
        keys[f"container:{name}"] = (
            f"{key} ({loaded}). Fix: an image the nodes can get: pushed where they pull from, or loaded with "
            "glm:target.kubernetes.imageLoadCommand under imagePullPolicy Never"
        )
    keys["cards"] = (
        f"glm:container.accelerators ({len(config.container.accelerators)} card(s) a pod). Fix: the "
        "accelerator's device plugin on the nodes, fewer cards, or free cards"
    )
    return keys


def _involved(event: dict[str, Any]) -> dict[str, Any]:
    return event.get("involvedObject") or event.get("regarding") or {}


def _said(event: dict[str, Any]) -> str:
    message = str(event.get("message") or event.get("note") or "").strip()
    return f"{event.get('reason')}: {message}"


def _key(keys: dict[str, str], what: str) -> str:
    return keys.get(what, "")


def _named(text: str, key: str) -> str:
    return f"{text}\n    That is {key}." if key else text


def event_failure(event: dict[str, Any], keys: dict[str, str], *, old_pods_left: bool) -> str | None:
    """How one pod event says the pod cannot come up (the event quoted, the key named), or None.

    ``old_pods_left``: a pod of an earlier template is still stopping and holds its node's cards
    (``maxSurge: 0``), so a pod that no node takes may only be waiting for it."""
    if event.get("type") == "Normal":
        return None
    reason = str(event.get("reason") or "")
    message = str(event.get("message") or event.get("note") or "")
    said = _said(event)
    if reason == "FailedMount":
        if (
            not any(text in message for text in DETERMINISTIC_MOUNT)
            and int(event.get("count") or 1) < MOUNT_REPEATS
        ):
            return None
        volume = _VOLUME.search(message)
        what = f"volume {volume.group(1)}" if volume else "a volume"
        return _named(
            f"cannot mount {what}: {said}", _key(keys, f"volume:{volume.group(1)}" if volume else "")
        )
    if reason == "FailedScheduling":
        claim = _CLAIM.search(message)
        if claim:
            return _named(f"is never scheduled: {said}", _key(keys, f"claim:{claim.group(1)}"))
        if old_pods_left or "unbound immediate PersistentVolumeClaims" in message:
            return None  # the old pods' cards, or a claim a provisioner is binding: still coming
        short_of_cards = any(f"Insufficient {r}" in message for r in CARD_RESOURCES.values())
        return _named(f"no node takes it: {said}", _key(keys, "cards") if short_of_cards else "")
    image_failure = reason in IMAGE_REASONS or (
        reason in ("Failed", "BackOff")
        and any(r in message for r in (*IMAGE_REASONS, "pulling image", "pull image"))
    )
    if image_failure:
        container = _CONTAINER.search(str(_involved(event).get("fieldPath") or ""))
        name = container.group(1) if container else "?"
        return _named(f"container {name} cannot get its image: {said}", _key(keys, f"container:{name}"))
    if reason == "FailedCreatePodSandBox" and int(event.get("count") or 1) >= SANDBOX_REPEATS:
        return (
            f"its sandbox cannot be made (the node's container runtime or network plugin): {said}\n"
            "    Look: kubectl describe node (its runtime and CNI), the kubelet's log."
        )
    return None


def still_stands(event: dict[str, Any], pod: dict[str, Any]) -> bool:
    """Whether what ``event`` says still holds for ``pod`` as it is now (events outlive their cause:
    the kubelet retries a pull or a mount, the scheduler a placement): a pod not scheduled yet, for a
    ``FailedScheduling``; its container still waiting on its image, for an image failure; no
    container of the pod started yet, for anything else."""
    status = pod.get("status") or {}
    containers = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    reason = event.get("reason")
    if reason == "FailedScheduling":
        return not (pod.get("spec") or {}).get("nodeName")
    container = _CONTAINER.search(str(_involved(event).get("fieldPath") or ""))
    if container is not None:
        waiting = next(
            (
                (c.get("state") or {}).get("waiting") or {}
                for c in containers
                if c.get("name") == container.group(1)
            ),
            {},
        )
        return waiting.get("reason") in IMAGE_REASONS
    return not any(
        (c.get("state") or {}).get("running") or (c.get("state") or {}).get("terminated") for c in containers
    )


DETERMINISTIC_MOUNT = ("hostPath type check failed",)
"""A mount failure that no retry of the kubelet's changes (a folder that is not there): at once."""


def _settles(event: dict[str, Any]) -> bool:
    """Whether the event must last a while to count: a pod no node takes (the scheduler tries again
    a moment after an old pod is gone)."""
    return event.get("reason") == "FailedScheduling"


def pods_failure(
    events: list[dict[str, Any]], pods: list[dict[str, Any]], keys: dict[str, str], *, old_pods_left: bool
) -> tuple[str, bool] | None:
    """The newest event of ``pods`` that says one cannot come up and still holds (:func:`still_stands`),
    as ``pod NAME <how>``, and whether it must last a while to count (a pod no node takes: the
    scheduler tries again a moment after an old pod is gone)."""
    by_name = {p.get("metadata", {}).get("name"): p for p in pods}
    ordered = sorted(
        events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""), reverse=True
    )
    for event in ordered:
        involved = _involved(event)
        pod = by_name.get(involved.get("name"))
        if involved.get("kind") != "Pod" or pod is None or not still_stands(event, pod):
            continue
        failure = event_failure(event, keys, old_pods_left=old_pods_left)
        if failure is not None:
            return f"pod {involved['name']} {failure}", _settles(event)
    return None
