"""The rules of ``glm:target.kubernetes`` across sections (``KUBERNETES_CHECKS``, run with
``rules.CHECKS``, and ``KUBERNETES_ADVISORIES``).

What the Docker path checks on its binds, checked on the cluster's own forms: a NodePort listens on
every node's addresses, whatever ``bindAddress`` says: it is a public bind, and takes the opt-ins a
public ``bindAddress`` takes. The Docker path's bind rules stand aside on the cluster (they would
name a ``bindAddress`` it does not read, and ask of a ClusterIP what only a public bind needs).

And nothing a stack sets is silently lost: a key the Docker path honours and the Kubernetes path
does not read is refused, naming what the cluster does instead and the fix, or, where the cluster
does that job itself and a Docker stack's file should deploy as it is, warned about. "Set" is a
value other than the one the stack gets without it, its profile's (``PROFILES[...].defaults``,
the seeds' values, which docs/scaling.md maps) or else the model's default; the usage meter's
switch, on by default for Docker hosts and off on the cluster, is set when the stack writes it.
"""

from __future__ import annotations

from typing import Any

from components.config.sections import StackSections
from components.config.target import OLD_IMAGE_PLACEHOLDER
from components.config.values import fix_command
from components.profiles import PROFILES
from components.template import placeholders

K8S = "glm:target.kubernetes"
NOT_READ = "is not read on Kubernetes"


def _check_front_node_port(c: StackSections) -> str | None:
    k8s = c.target.kubernetes
    if k8s is None or k8s.front_node_port is None or c.front.tls or c.front.allow_plain_http:
        return None
    return (
        f"{K8S}.frontNodePort={k8s.front_node_port} serves the API over plain HTTP on every node's "
        "addresses (a NodePort is a public bind, whatever glm:front.bindAddress says): API keys and "
        f"prompts cross the network in clear. Fix: unset {K8S}.frontNodePort (a ClusterIP Service) "
        "and put an ingress or load balancer that terminates TLS in front of it, or accept it "
        "explicitly with glm:front.allowPlainHttp: true (every preview then warns)."
    )


def _check_prometheus_node_port(c: StackSections) -> str | None:
    k8s = c.target.kubernetes
    if k8s is None or k8s.prometheus_node_port is None or c.monitoring.allow_public_bind:
        return None
    return (
        f"{K8S}.prometheusNodePort={k8s.prometheus_node_port} publishes Prometheus on every node's "
        "addresses (a NodePort is a public bind, whatever glm:monitoring.bindAddress says): it has no "
        "authentication, so anyone who reaches a node reads every metric and queries its API. Fix: "
        f"unset {K8S}.prometheusNodePort and reach it with `kubectl port-forward -n {k8s.namespace} "
        "svc/glm53-prometheus 9090`, or accept it explicitly with glm:monitoring.allowPublicBind: true "
        "(every preview then warns)."
    )


def _check_front_tls(c: StackSections) -> str | None:
    """A TLS front is asked over TLS: the smoke gate goes to ``frontUrl``."""
    k8s = c.target.kubernetes
    if k8s is None or not c.front.tls or k8s.front_url.startswith("https://"):
        return None
    return (
        f"{K8S}.frontUrl={k8s.front_url!r} with glm:front.tls=true: the front serves TLS, and the "
        "smoke gate would ask it in plain HTTP. Fix: https://<node or load balancer>:<port>/v1 (the "
        "gate verifies glm:front.tlsName there, trusting glm:front.tlsCaCertificate)."
    )


def _check_image_load_command(c: StackSections) -> str | None:
    """The load command names the image as ``{{image}}`` and nothing else the stack could fill."""
    k8s = c.target.kubernetes
    if k8s is None or k8s.image_load_template is None:
        return None
    unknown = sorted(placeholders(k8s.image_load_template) - {"image"})
    if not unknown:
        return None
    return (
        f"{K8S}.imageLoadCommand={k8s.image_load_command!r} names "
        + ", ".join(f"{{{{{name}}}}}" for name in unknown)
        + ": the stack fills only {{image}} (each image's reference, quoted for the shell). Fix: "
        "e.g. `docker push {{image}}` or `scripts/k8s/cluster.sh import {{image}}`."
    )


def _warn_image_load_placeholder(c: StackSections) -> str | None:
    k8s = c.target.kubernetes
    command = k8s.image_load_command if k8s is not None else None
    if k8s is None or command is None or not OLD_IMAGE_PLACEHOLDER.search(command):
        return None
    return (
        f"{K8S}.imageLoadCommand={command!r}: {{image}} is the old spelling of its placeholder "
        "(still read as the image). Fix: {{image}}, the placeholder style of every template of the "
        f"stack: {K8S}.imageLoadCommand: {k8s.image_load_template!r}."
    )


def _warn_front_node_port(c: StackSections) -> str | None:
    k8s = c.target.kubernetes
    if k8s is None or k8s.front_node_port is None or c.front.tls or not c.front.allow_plain_http:
        return None
    return (
        f"glm:front.allowPlainHttp=true: the API on every node's port {k8s.front_node_port} "
        f"({K8S}.frontNodePort) is plain HTTP, so API keys and prompts cross the network in clear. "
        "Put a TLS ingress or load balancer in front of a ClusterIP Service and remove the opt-in."
    )


def _warn_prometheus_node_port(c: StackSections) -> str | None:
    k8s = c.target.kubernetes
    if k8s is None or k8s.prometheus_node_port is None or not c.monitoring.allow_public_bind:
        return None
    return (
        f"glm:monitoring.allowPublicBind=true: Prometheus on every node's port {k8s.prometheus_node_port} "
        f"({K8S}.prometheusNodePort) answers anyone who reaches a node, without authentication. "
        "Unset the NodePort (kubectl port-forward reaches it) and remove the opt-in."
    )


# ---- keys the Docker path honours and the Kubernetes path does not read --------------------------


def _name(model: Any, key: str) -> str:
    """The field of ``model`` (a class) whose ``glm:`` key is ``key`` (camelCase)."""
    return next(name for name, field in model.model_fields.items() if (field.alias or name) == key)


def _value(c: StackSections, path: str) -> Any:
    """``glm:<path>``'s value, ``path`` as ``section.key`` (``container.networkMode``)."""
    section, key = path.split(".")
    model = getattr(c, _name(type(c), section))
    return getattr(model, _name(type(model), key))


def _unset_value(c: StackSections, path: str) -> Any:
    """What ``glm:<path>`` is when the stack does not set it: its profile's value, else the default."""
    section, key = path.split(".")
    profile = PROFILES[c.hardware].defaults.get(section) or {}
    if key in profile:
        return profile[key]
    model = type(getattr(c, _name(type(c), section)))
    return model.model_fields[_name(model, key)].get_default(call_default_factory=True)


def set_on_kubernetes(c: StackSections, path: str) -> bool:
    """The stack runs on Kubernetes and sets ``glm:<path>`` to other than what it gets unset.

    >>> from components.config import build_stack_config
    >>> k8s = {"hosts": [{"name": "b", "dockerHost": "unix:///var/run/docker.sock"}],
    ...        "kubernetes": {"namespace": "glm", "frontUrl": "http://lb:8080/v1"}}
    >>> local = build_stack_config({"hardware": "local", "target": k8s, "front": {"port": 8443}})
    >>> set_on_kubernetes(local, "front.port"), set_on_kubernetes(local, "front.bindAddress")
    (True, False)
    """
    return c.target.kubernetes is not None and _value(c, path) != _unset_value(c, path)


def _check_weights_download(c: StackSections) -> str | None:
    k8s = c.target.kubernetes
    if k8s is None or not c.model.download.enabled:
        return None
    where = (
        f"the claim {K8S}.weightsClaim={k8s.weights_claim!r}"
        if k8s.weights_claim
        else f"the node's {c.model.host_path} (glm:model.hostDir, a hostPath)"
    )
    return (
        f"glm:model.download.enabled=true {NOT_READ}: no pod downloads {c.model.download.repo}; the "
        f"serving pods mount {where} read-only as it is, and their preflight, counting on the "
        "download, does not check that the weights are there. Fix: fill it first (the hub CLI on the "
        "node, or a Job that writes into the claim), then "
        + fix_command("config rm --path 'glm:model.download.enabled'")
        + " (the preflight then checks the weights in place)."
    )


def _check_promote_from(c: StackSections) -> str | None:
    if c.target.kubernetes is None or not c.promote_from:
        return None
    return (
        f"glm:promoteFrom={c.promote_from!r} {NOT_READ}: the stack would serve the glm:image it builds "
        "or pulls itself, never compared with what the source stack's gate verified. Fix: "
        + fix_command("config rm glm:promoteFrom")
        + ", and pin the source's image yourself: glm:image.reference set to the imageRef of its "
        f"`verified` output (`scripts/pulumi.sh stack output verified -s {c.promote_from}`), loaded "
        f"onto the nodes ({K8S}.imageLoadCommand) or pullable by them."
    )


def _check_devices(c: StackSections) -> str | None:
    if not set_on_kubernetes(c, "container.devices"):
        return None
    return (
        f"glm:container.devices={list(c.container.devices)} {NOT_READ}: a pod gets device nodes "
        "from the cluster's device plugins only (the cards, as many as glm:container.accelerators "
        "lists), and a device node mounted as a hostPath is unusable outside a privileged pod, which "
        "the policy pack refuses (k8s-pod-not-privileged). Fix: "
        + fix_command("config rm --path 'glm:container.devices'")
        + ", and have a device plugin on the nodes provide the device."
    )


def _check_privileged(c: StackSections) -> str | None:
    if not set_on_kubernetes(c, "container.privileged") or not c.container.privileged:
        return None
    return (
        f"glm:container.privileged=true {NOT_READ}: no serving pod is privileged (the policy pack "
        "refuses one: k8s-pod-not-privileged), so what it gives on a Docker host (every device and "
        "capability) is not there. Fix: "
        + fix_command("config rm --path 'glm:container.privileged'")
        + "; the cards come from the device plugin (glm:container.accelerators)."
    )


def _check_network_mode(c: StackSections) -> str | None:
    if not set_on_kubernetes(c, "container.networkMode") or c.container.network_mode != "host":
        return None
    return (
        f"glm:container.networkMode=host {NOT_READ}: a pod never uses its node's network (the policy "
        "pack refuses hostNetwork: k8s-pod-not-privileged); vLLM listens on its pod's loopback behind "
        "the pod's guard, which the front reaches over the pod network. Fix: "
        + fix_command("config rm --path 'glm:container.networkMode'")
        + " (bridge), and glm:serving.host with it."
    )


def _check_ipc_mode(c: StackSections) -> str | None:
    if not set_on_kubernetes(c, "container.ipcMode") or c.container.ipc_mode != "host":
        return None
    shm = c.container.shm_size or "none: the runtime's 64 MB"
    return (
        f"glm:container.ipcMode=host {NOT_READ}: a pod never joins its node's IPC namespace (the "
        "policy pack refuses hostIPC: k8s-pod-not-privileged), so vLLM's workers exchange tensors "
        f"through the pod's own /dev/shm (glm:container.shmSize: {shm}). Fix: "
        + fix_command("config rm --path 'glm:container.ipcMode'")
        + ", and set glm:container.shmSize (e.g. "
        + fix_command("config set --path 'glm:container.shmSize' 64g")
        + "): the pod's /dev/shm is a memory emptyDir of that size."
    )


def secret_env_problem(c: StackSections, names: list[str]) -> str | None:
    """``glm:servingSecretEnv`` (the names only) on Kubernetes: checked with the secrets
    (``SecretInputs.problems_with``)."""
    if c.target.kubernetes is None or not names:
        return None
    return (
        f"glm:servingSecretEnv ({', '.join(sorted(names))}) {NOT_READ}: the serving pods get "
        "glm:serving.env and extraEnv only, so vLLM would start without these variables. Fix: "
        + fix_command("config rm glm:servingSecretEnv")
        + "; the pods mount the weights rather than download "
        "them (what HF_TOKEN is for), and a variable vLLM needs at run time cannot reach the pods "
        "yet: run such a stack on Docker hosts."
    )


DOCKER_HOST_KEYS = {
    "container.name": "the objects are named glm53-* in the stack's namespace "
    f"({K8S}.namespace), which keeps stacks apart",
    "container.networkSubnet": "pods take their addresses from the cluster's pod network (its CNI)",
    "container.restart": "a Deployment's pods always restart (restartPolicy Always); `kubectl logs "
    "--previous` shows a crashed run",
    "container.logMaxSize": "the kubelet rotates the containers' logs (its containerLogMaxSize)",
    "container.logMaxFiles": "the kubelet rotates the containers' logs (its containerLogMaxFiles)",
    "front.port": "the front's Service listens on 8080 (port `http`); clients reach it at "
    f"{K8S}.frontUrl (an ingress, a load balancer or {K8S}.frontNodePort)",
    "front.bindAddress": "the front's Service is a ClusterIP, which every pod of the cluster reaches, "
    f"or with {K8S}.frontNodePort every node's addresses",
    "monitoring.port": "Prometheus' Service listens on 9090 (`kubectl port-forward svc/glm53-prometheus "
    f"9090`, or {K8S}.prometheusNodePort)",
    "monitoring.bindAddress": "Prometheus' Service is a ClusterIP, which every pod of the cluster "
    f"reaches, or with {K8S}.prometheusNodePort every node's addresses",
    "image.keepLocally": "the nodes pull glm:image.reference themselves, and the kubelet's image "
    "garbage collection decides when it goes",
    "serving.host": "vLLM listens on its pod's loopback (--host=127.0.0.1) behind the pod's guard",
    "semanticProbe.ejectReplicas": "each pod's readiness (the gate's checks every "
    f"{K8S}.readinessPeriodSeconds) takes a failing pod out of the Service; the probe only alerts",
}
"""Docker hosts' settings that the cluster does for itself, with what it does instead: set, they
are warned about, not refused. None changes what is served, with which keys, or where it is
published (the NodePorts and their opt-ins are refused above): a Docker stack's file deploys on the
cluster as it is."""


def _shown(value: Any) -> str:
    """A value as the stack file writes it: ``false``, ``9``, ``'10.0.0.0/24'``."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _warn_docker_host_keys(c: StackSections) -> str | None:
    found = [
        f"glm:{path}={_shown(_value(c, path))} {NOT_READ}: {instead}. The cluster does this job itself, "
        "so the stack deploys; remove the key to silence this: "
        + fix_command(f"config rm --path 'glm:{path}'")
        + "."
        for path, instead in DOCKER_HOST_KEYS.items()
        if set_on_kubernetes(c, path) and not (path == "image.keepLocally" and c.image.to_build)
    ]
    return "\n".join(found) or None


KUBERNETES_CHECKS = [
    _check_front_tls,
    _check_front_node_port,
    _check_prometheus_node_port,
    _check_weights_download,
    _check_promote_from,
    _check_devices,
    _check_privileged,
    _check_network_mode,
    _check_ipc_mode,
    _check_image_load_command,
]
KUBERNETES_ADVISORIES = [
    _warn_front_node_port,
    _warn_prometheus_node_port,
    _warn_docker_host_keys,
    _warn_image_load_placeholder,
]
