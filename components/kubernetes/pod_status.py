"""What a roll's pods say: still coming, ready, or failed with the failing container's own words.

Pure functions over the Kubernetes API's objects as ``kubectl get -o json`` prints them (core/v1
``PodStatus``, apps/v1 ``DeploymentStatus``); components/kubernetes/roll.py polls them while a roll runs.
A pod has failed when one of its containers has, in a way the kubelet will not heal by waiting:

- it exited: a main container that terminated (vLLM serves until stopped), or an init container
  (the preflight) with a non-zero exit code; its ``terminated.message`` holds the container's last
  log lines (``terminationMessagePolicy: FallbackToLogsOnError`` on every container of the pod);
- it restarts in a loop (``CrashLoopBackOff``: quoted from ``lastState.terminated``);
- it cannot start (its image cannot be pulled, its config refers to a missing Secret, ...);
- the pod itself failed (evicted).

A pod that has not started reads from its events as well (components/kubernetes/pod_events.py): a
volume that will not mount, a pod no node takes once no old pod is stopping, an image the node
cannot get, a sandbox that cannot be made; each quoted with the config key behind it.

Anything else is still coming: scheduling (maxSurge 0: the new pod waits for the old one's cards),
pulling, a weights load of many minutes, a readiness gate not yet passed. The roll's deadline
covers those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from components.kubernetes.pod_events import pods_failure
from components.kubernetes.workload import TEMPLATE_ANNOTATION

State = Literal["coming", "ready", "failed"]
COMING: Final = "coming"
READY: Final = "ready"
FAILED: Final = "failed"
FAILING_WAITS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
"""``state.waiting.reason`` values that only a change of the pod's spec (or of the node) ends."""
QUOTED_LINES = 12
"""The last lines of a container's message quoted: vLLM's error is at its end (argparse's
``vllm serve: error: ...``, a traceback's last frame), the preflight's problems are all of it."""


@dataclass(frozen=True)
class Verdict:
    state: State
    detail: str
    """For a failure: which pod, which container, how, and its own message quoted."""
    settles: bool = False
    """A failure that counts only once it has lasted a few seconds (a pod no node takes: the
    scheduler tries again a moment after an old pod's cards are free)."""


def quoted(message: str) -> str:
    """A container's message as the operator reads it: its last ``QUOTED_LINES`` lines, indented.

    >>> quoted("a\\nb\\n")
    '\\n    | a\\n    | b'
    """
    lines = message.rstrip().splitlines()[-QUOTED_LINES:]
    return "".join(f"\n    | {line}" for line in lines)


def _exit(terminated: dict[str, Any]) -> str:
    code = terminated.get("exitCode")
    reason = terminated.get("reason") or ""
    how = f"exited {code}" if code is not None else "terminated"
    if terminated.get("signal"):
        how += f" (signal {terminated['signal']})"
    return f"{how}{f', {reason}' if reason and reason not in ('Error', 'Completed') else ''}"


def _container_failure(status: dict[str, Any], init: bool) -> str | None:
    """How one container failed (its own message quoted), or None while it may still come up."""
    kind = "init container" if init else "container"
    name = status.get("name", "?")
    state = status.get("state") or {}
    terminated = state.get("terminated")
    if terminated is not None and (not init or terminated.get("exitCode") != 0):
        return f"{kind} {name} {_exit(terminated)}{quoted(terminated.get('message') or '')}"
    waiting = state.get("waiting") or {}
    reason = waiting.get("reason")
    if reason not in FAILING_WAITS:
        return None
    last = (status.get("lastState") or {}).get("terminated")
    if reason == "CrashLoopBackOff" and last is not None:
        restarts = status.get("restartCount", 0)
        return f"{kind} {name} restarts in a loop ({restarts} restarts; last {_exit(last)}){quoted(last.get('message') or '')}"
    return f"{kind} {name} cannot start: {reason}{quoted(waiting.get('message') or '')}"


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def pod_verdict(pod: dict[str, Any]) -> Verdict:
    """One pod of the new template: ready, failed (naming the container and quoting it), or coming."""
    name = pod.get("metadata", {}).get("name", "?")
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        why = ": ".join(x for x in (status.get("reason"), status.get("message")) if x)
        return Verdict(FAILED, f"pod {name} failed{': ' + why if why else ''}")
    for init, key in ((True, "initContainerStatuses"), (False, "containerStatuses")):
        for container in status.get(key) or []:
            failure = _container_failure(container, init)
            if failure is not None:
                return Verdict(FAILED, f"pod {name}: {failure}")
    if _condition(pod, "Ready").get("status") == "True":
        return Verdict(READY, f"pod {name} ready")
    return Verdict(COMING, f"pod {name}: {_progress(pod)}")


def _progress(pod: dict[str, Any]) -> str:
    """Where a pod that is still coming stands, in a few words."""
    status = pod.get("status") or {}
    scheduled = _condition(pod, "PodScheduled")
    if scheduled.get("status") == "False":
        return f"not scheduled: {scheduled.get('reason', '')} {scheduled.get('message', '')}".strip()
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting")
            if waiting:
                return f"{container.get('name')} waiting ({waiting.get('reason', '')})"
    if status.get("containerStatuses"):
        return "running, not Ready yet (loading, or its gate not passed yet)"
    return status.get("phase", "Pending")


def _of_template(pod: dict[str, Any], template: str) -> bool:
    return (pod.get("metadata", {}).get("annotations") or {}).get(TEMPLATE_ANNOTATION) == template


def _of_these_pods(condition: dict[str, Any], new: list[dict[str, Any]], deployment: str) -> bool:
    """Whether a ``ProgressDeadlineExceeded`` names the ReplicaSet of this template's pods: after a
    failed roll the condition keeps naming the failed ReplicaSet for a while after the next roll
    began (the cluster, 2026-12-06: a restore failed at 1 s on it). No pod of this template yet:
    not this roll's either."""
    named = re.search(r'ReplicaSet "([^"]+)"', str(condition.get("message") or ""))
    if named is None:
        return bool(new)
    sets = set()
    for pod in new:
        meta = pod.get("metadata") or {}
        template_hash = (meta.get("labels") or {}).get("pod-template-hash")
        sets.add(
            f"{deployment}-{template_hash}" if template_hash else str(meta.get("name", "")).rsplit("-", 1)[0]
        )
    return named.group(1) in sets


def pending(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods not started yet (phase ``Pending``): what their events may say that they cannot."""
    return [p for p in pods if (p.get("status") or {}).get("phase", "Pending") == "Pending"]


def roll_verdict(
    deployment: dict[str, Any],
    pods: list[dict[str, Any]],
    template: str,
    events: list[dict[str, Any]] | None = None,
    keys: dict[str, str] | None = None,
) -> Verdict:
    """The roll of ``deployment`` to the pod template whose ``glm53/template`` annotation is
    ``template``: failed when one of its pods failed (its containers, or its events: ``events`` in
    the namespace, ``keys`` naming the config behind a volume, an image or the cards) or the
    Deployment gave up, ready when the Deployment says rolled out (``kubectl rollout status``'s
    rule), else coming."""
    new = [
        p for p in pods if _of_template(p, template) and not p.get("metadata", {}).get("deletionTimestamp")
    ]
    stopping = any(
        not _of_template(p, template) and p.get("metadata", {}).get("deletionTimestamp") for p in pods
    )
    said = pods_failure(events or [], pending(new), keys or {}, old_pods_left=stopping)
    if said is not None:
        return Verdict(FAILED, said[0], settles=said[1])
    verdicts = [pod_verdict(p) for p in sorted(new, key=lambda p: p["metadata"].get("name", ""))]
    failed = [v for v in verdicts if v.state == FAILED]
    if failed:
        return failed[0]
    name = deployment.get("metadata", {}).get("name", "?")
    status = deployment.get("status") or {}
    observed = status.get("observedGeneration", 0) >= deployment.get("metadata", {}).get("generation", 0)
    # The conditions speak of the template the controller last saw: until it has seen this one, a
    # ProgressDeadlineExceeded is the previous roll's (the CI run of 2026-12-06: the restore after a
    # wrong-answer roll failed at 0 s on the failed roll's condition).
    progressing, replica_failure = (
        _condition(deployment, "Progressing"),
        _condition(deployment, "ReplicaFailure"),
    )
    gave_up = (
        None
        if not observed
        else progressing
        if progressing.get("reason") == "ProgressDeadlineExceeded" and _of_these_pods(progressing, new, name)
        else replica_failure
        if replica_failure.get("status") == "True"
        else None
    )
    if gave_up is not None:
        pods_say = "; ".join(v.detail for v in verdicts) or "no pod of the new template"
        return Verdict(
            FAILED, f"Deployment {name}: {gave_up.get('reason')}: {gave_up.get('message', '')} ({pods_say})"
        )
    wanted = (deployment.get("spec") or {}).get("replicas", 1)
    updated, available = status.get("updatedReplicas", 0), status.get("availableReplicas", 0)
    progress = f"{sum(v.state == READY for v in verdicts)} of {wanted} new pods ready"
    if observed and updated >= wanted and status.get("replicas", 0) <= updated and available >= updated:
        return Verdict(READY, f"Deployment {name} rolled out: {progress}")
    coming = [v.detail for v in verdicts if v.state == COMING]
    return Verdict(COMING, "; ".join([progress, *coming]))
