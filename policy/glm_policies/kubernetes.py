"""Rules 9 to 13: the Kubernetes objects (``glm:target.kubernetes``). vLLM's Service stays inside
the cluster; a NodePort or load balancer is a public bind and carries the stack's opt-in; no pod
is privileged or on the node's network; the serving pods of a hardware profile request its cards;
every pod runs with least privilege (no token it does not use, not root, no capability).

The program marks what the rules need on the objects, as it labels Docker containers: the opt-ins
as Service annotations (the Docker labels' keys), the accelerator as a pod-template annotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .exposure import PLAIN_HTTP_LABEL, PUBLIC_BIND_LABEL, TLS_LABEL
from .resource import UNKNOWN, Resource, Undecidable, flag_value

SERVICE = "kubernetes:core/v1:Service"
POD = "kubernetes:core/v1:Pod"
WORKLOADS = {
    "kubernetes:apps/v1:Deployment": ("spec", "template", "spec"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template", "spec"),
    "kubernetes:batch/v1:Job": ("spec", "template", "spec"),
    "kubernetes:batch/v1:CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    POD: ("spec",),
}
"""Where each kind keeps its pod spec."""
NAME_LABEL = "app.kubernetes.io/name"
SERVING_APP = "glm53-vllm"
"""The serving pods' ``app.kubernetes.io/name`` (components/kubernetes/workload.py ``labels``)."""
FRONT_APP = "glm53-front"
PUBLIC_TYPES = ("NodePort", "LoadBalancer")
ACCELERATOR_ANNOTATION = "glm53/accelerator"
"""On the serving pods' template: the profile's accelerator kind, ``none`` where no card is used
(the local simulator, a rehearsal)."""
CARD_RESOURCES = {"nvidia": "nvidia.com/gpu", "ascend": "huawei.com/Ascend910"}
"""The device plugins' resource names per accelerator kind."""
NO_CARDS = "none"


def _at(resource: Resource, value: Any, *path: str) -> Any:
    """``value[path...]``, None where a level is missing; ``Undecidable`` where one is unknown."""
    for key in path:
        if value is UNKNOWN:
            raise Undecidable(f"{resource.name}: `{'.'.join(path)}` is not known until the update runs")
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    if value is UNKNOWN:
        raise Undecidable(f"{resource.name}: `{'.'.join(path)}` is not known until the update runs")
    return value


def _service(resource: Resource) -> tuple[Mapping[str, Any], str, bool] | None:
    """(spec, its type, whether it selects the serving pods) of a Service; None for anything else."""
    if resource.type != SERVICE:
        return None
    spec = _at(resource, resource.props, "spec") or {}
    selector = _at(resource, spec, "selector") or {}
    name = _at(resource, resource.props, "metadata", "name")
    serving = selector.get(NAME_LABEL) == SERVING_APP or name == SERVING_APP
    return spec, _at(resource, spec, "type") or "ClusterIP", serving


def _published(resource: Resource, spec: Mapping[str, Any], kind: str) -> list[str]:
    """How a Service reaches beyond the cluster: its type, node ports, external IPs."""
    found = [f"type {kind}"] if kind in PUBLIC_TYPES else []
    found += [
        f"nodePort {int(p['nodePort'])}" for p in _at(resource, spec, "ports") or [] if p.get("nodePort")
    ]
    found += [
        f"externalIPs {', '.join(map(str, ips))}" for ips in [_at(resource, spec, "externalIPs")] if ips
    ]
    return found


# --- 9. k8s-serving-service-private -------------------------------------------------------------


def k8s_serving_service_private(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """The Service in front of the vLLM pods is a ClusterIP Service: nothing outside the cluster
    reaches it (inside, the pods' guards ask for the stack's credential)."""
    found = _service(resource)
    if found is None or not found[2]:
        return []
    published = _published(resource, found[0], found[1])
    if not published:
        return []
    return [
        f"{resource.name} (the vLLM Service) has {', '.join(published)}: vLLM's pods are reached from "
        "beyond the cluster, past the front's keys, limits and route allow-list. Fix: a ClusterIP "
        "Service (components/kubernetes/workload.serving_service_spec); clients reach vLLM through the front."
    ]


# --- 10. k8s-node-port-opted-in -----------------------------------------------------------------


def k8s_node_port_opted_in(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """A NodePort or load balancer is a public bind: the front's needs TLS or the plain-HTTP opt-in,
    any other the public-bind opt-in (the Docker labels' keys, as Service annotations)."""
    found = _service(resource)
    if found is None or found[2]:
        return []  # vLLM's is rule 9's
    spec, kind, _ = found
    published = _published(resource, spec, kind)
    if not published:
        return []
    annotations = _at(resource, resource.props, "metadata", "annotations") or {}
    selector = _at(resource, spec, "selector") or {}
    if selector.get(NAME_LABEL) == FRONT_APP:
        if annotations.get(TLS_LABEL) == "on" or annotations.get(PLAIN_HTTP_LABEL[0]) == PLAIN_HTTP_LABEL[1]:
            return []
        return [
            f"{resource.name} (the front's Service) has {', '.join(published)} and serves plain HTTP: API "
            "keys and prompts cross the network in clear on every node. Fix: a ClusterIP Service behind "
            "a TLS ingress or load balancer (unset glm:target.kubernetes.frontNodePort), or an explicit "
            f"glm:front.allowPlainHttp: true (annotation {PLAIN_HTTP_LABEL[0]}={PLAIN_HTTP_LABEL[1]})."
        ]
    if annotations.get(PUBLIC_BIND_LABEL[0]) == PUBLIC_BIND_LABEL[1]:
        return []
    return [
        f"{resource.name} has {', '.join(published)} with no credential in front of it: anyone who "
        "reaches a node uses it. Fix: a ClusterIP Service (kubectl port-forward reaches it; unset "
        "glm:target.kubernetes.prometheusNodePort), or for Prometheus an explicit "
        f"glm:monitoring.allowPublicBind: true (annotation {PUBLIC_BIND_LABEL[0]}={PUBLIC_BIND_LABEL[1]})."
    ]


# --- 11. k8s-pod-not-privileged -----------------------------------------------------------------


def _pod(resource: Resource) -> Mapping[str, Any] | None:
    path = WORKLOADS.get(resource.type)
    return None if path is None else (_at(resource, resource.props, *path) or {})


def _containers(resource: Resource, pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        found += [c for c in _at(resource, pod, key) or [] if c is not UNKNOWN]
    return found


def k8s_pod_not_privileged(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """No pod on the node's network, PID or IPC namespace; no privileged container."""
    pod = _pod(resource)
    if pod is None:
        return []
    shared = [key for key in ("hostNetwork", "hostPID", "hostIPC") if _at(resource, pod, key) is True]
    privileged = [
        str(c.get("name"))
        for c in _containers(resource, pod)
        if _at(resource, c, "securityContext", "privileged") is True
    ]
    if not shared and not privileged:
        return []
    what = [f"{key}: true" for key in shared] + [f"container {name} privileged" for name in privileged]
    return [
        f"{resource.name} runs with {', '.join(what)}: the pod can reach the node's interfaces, processes "
        "or devices, past the guards and the NetworkPolicy. Fix: remove them; the cards come from the "
        "device plugin's resources (nvidia.com/gpu, huawei.com/Ascend910), not from privilege."
    ]


# --- 12. k8s-gpu-requests -----------------------------------------------------------------------


def _count(value: Any) -> int | None:
    try:
        return int(float(str(value)))
    except ValueError:
        return None


def k8s_gpu_requests(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """The vLLM container of a hardware profile requests (and limits) one card per tensor-parallel
    rank, as the device plugin names them; ``ACCELERATOR_ANNOTATION: none`` uses none."""
    pod = _pod(resource)
    if pod is None:
        return []
    serving = [c for c in _containers(resource, pod) if list(c.get("command") or [])[:2] == ["vllm", "serve"]]
    if not serving:
        return []
    template = (
        _at(resource, resource.props, *WORKLOADS[resource.type][:-1])
        if resource.type != POD
        else resource.props
    )
    annotations = _at(resource, template, "metadata", "annotations") or {}
    kind = annotations.get(ACCELERATOR_ANNOTATION)
    if kind == NO_CARDS:
        return []
    if kind not in CARD_RESOURCES:
        return [
            f"{resource.name} runs vLLM without the annotation {ACCELERATOR_ANNOTATION} "
            f"({', '.join([*CARD_RESOURCES, NO_CARDS])}; found {kind!r}): whether it needs cards cannot be "
            "told. Fix: render the pods with components/kubernetes/workload.serving_deployment_spec."
        ]
    card = CARD_RESOURCES[kind]
    violations = []
    for container in serving:
        args = [str(a) for a in _at(resource, container, "args") or [] if a is not UNKNOWN]
        tp = _count(flag_value(args, "--tensor-parallel-size", "-tp") or 1) or 1
        resources = _at(resource, container, "resources") or {}
        have = {k: _count((resources.get(k) or {}).get(card)) for k in ("requests", "limits")}
        if have != {"requests": tp, "limits": tp}:
            violations.append(
                f"{resource.name} (container {container.get('name')}, {kind}): --tensor-parallel-size={tp} "
                f"needs {tp} {card}, but it requests {have['requests'] or 0} and limits {have['limits'] or 0}: "
                "the scheduler may place it where the cards are not, and vLLM fails at start. Fix: "
                f'resources.requests and limits {card}: "{tp}" (glm:container.accelerators lists the cards).'
            )
    return violations


# --- 13. k8s-pod-least-privilege ----------------------------------------------------------------

ALLOWED_CAPABILITIES = ("NET_BIND_SERVICE",)
"""The one capability a container may add back (a port below 1024; the stack's pods use none)."""


def _effective(resource: Resource, pod: Mapping[str, Any], container: Mapping[str, Any], key: str) -> Any:
    """``securityContext.key`` of ``container``, else the pod's (what the kubelet applies)."""
    own = _at(resource, container, "securityContext", key)
    return own if own is not None else _at(resource, pod, "securityContext", key)


def _container_problems(resource: Resource, pod: Mapping[str, Any], c: Mapping[str, Any]) -> list[str]:
    found = []
    if _effective(resource, pod, c, "runAsNonRoot") is not True:
        found.append("runAsNonRoot is not true")
    uid = _effective(resource, pod, c, "runAsUser")
    if uid is None or _count(uid) in (None, 0):
        found.append("no fixed non-root runAsUser" if uid is None else f"runAsUser {uid}")
    if _at(resource, c, "securityContext", "allowPrivilegeEscalation") is not False:
        found.append("allowPrivilegeEscalation is not false")
    capabilities = _at(resource, c, "securityContext", "capabilities") or {}
    if "ALL" not in [str(d).upper() for d in capabilities.get("drop") or []]:
        found.append("capabilities.drop lacks ALL")
    added = [str(a) for a in capabilities.get("add") or [] if str(a).upper() not in ALLOWED_CAPABILITIES]
    if added:
        found.append(f"capabilities.add {', '.join(added)}")
    if _at(resource, c, "securityContext", "readOnlyRootFilesystem") is not True:
        found.append("readOnlyRootFilesystem is not true")
    return found


def k8s_pod_least_privilege(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """No service-account token mounted by default (``automountServiceAccountToken: false``; a
    container that calls the API server mounts a projected token itself); every container runs as a
    fixed non-root UID, cannot gain privileges, drops every capability and has a read-only root file
    system."""
    pod = _pod(resource)
    if pod is None:
        return []
    violations = []
    if _at(resource, pod, "automountServiceAccountToken") is not False:
        violations.append(
            f"{resource.name} mounts the service-account token in every container "
            "(automountServiceAccountToken is not false): a process that never calls the API server "
            "holds a credential for it. Fix: automountServiceAccountToken: false on the pod, and a "
            "projected serviceAccountToken volume in the one container that calls the API "
            "(components/kubernetes/pod_security.py restricted, api_token_volume)."
        )
    for c in _containers(resource, pod):
        problems = _container_problems(resource, pod, c)
        if problems:
            violations.append(
                f"{resource.name} (container {c.get('name')}): {', '.join(problems)}: a compromised "
                "process there would have more than it needs. Fix: securityContext runAsNonRoot: true "
                "and a fixed runAsUser other than 0, allowPrivilegeEscalation: false, capabilities.drop "
                "[ALL], readOnlyRootFilesystem: true with an emptyDir where the process writes "
                "(components/kubernetes/pod_security.py)."
            )
    return violations
