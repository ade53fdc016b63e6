"""Least privilege on every pod the Kubernetes target renders (issue 49).

- No service-account token where no process calls the API server: every pod sets
  ``automountServiceAccountToken: false``. The callers, the listers (components/host/k8s_targets.py:
  Prometheus' ``targets`` and ``front-targets``, a front pod's ``routes``), get the token as a
  projected volume mounted in that container alone (:func:`api_token_volume`), not in ``prometheus``
  or ``nginx`` beside it, under an account that may only list the namespace's pods
  (:func:`lister_account`).
- Every container runs as :data:`RUN_AS_USER` (never root), may not gain privileges, holds no
  capability and has a read-only root file system; what a process writes goes to an ``emptyDir``
  at the path it writes (:func:`scratch`): nginx's pid and temp files in ``/tmp``, vLLM's
  ``/tmp`` and ``$HOME`` (docs/scaling.md, "Least privilege", says which and why).

The policy pack refuses a rendered pod that breaks these (``k8s-pod-least-privilege``,
policy/glm_policies/kubernetes.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

RUN_AS_USER = 10001
"""The UID (and GID) of every container of the stack: fixed, not root, in no image's passwd. A
claim the pods write (the JIT cache) is made theirs by ``fsGroup``; a hostPath cache must be
writable by it (``install -d -o 10001 -g 10001 DIR``: docs/scaling.md)."""
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where a pod's service-account token is mounted: absent from every container but the listers."""
LISTER_SCRIPT = Path(__file__).parents[1] / "host" / "k8s_targets.py"
"""What every lister runs (standard library only), mounted from a ConfigMap of its component."""
LISTER_SCRIPT_DIR = "/opt/glm53"
LISTER_VERBS = ["list"]
"""What a lister asks the API server (components/host/k8s_targets.py ``list_pods``: one list of the
namespace's pods, every few seconds); no ``watch``, no ``get``, no other resource."""
TOKEN_SECONDS = 3607
"""The projected token's lifetime, the kubelet's own default (it renews it before expiry)."""

POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS_USER,
    "runAsGroup": RUN_AS_USER,
    "fsGroup": RUN_AS_USER,
    # A claim already owned by the group is not walked again at every start (a large JIT cache).
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
}


def restricted(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` (a pod spec) with no token mounted, the pod's security context and each container's
    (init containers' too)."""
    spec = {**pod, "automountServiceAccountToken": False, "securityContext": POD_SECURITY}
    for key in ("initContainers", "containers"):
        if key in spec:
            spec[key] = [{**c, "securityContext": CONTAINER_SECURITY} for c in spec[key]]
    return spec


def scratch(name: str, path: str, size: str = "64Mi") -> tuple[dict[str, Any], dict[str, Any]]:
    """A writable ``emptyDir`` for a read-only root file system: (the pod's volume, the container's
    mount at ``path``). ``size`` bounds it (the node evicts a pod that writes more)."""
    return {"name": name, "emptyDir": {"sizeLimit": size}}, {"name": name, "mountPath": path}


def api_token_volume(name: str = "api-token") -> tuple[dict[str, Any], dict[str, Any]]:
    """The service-account token, the cluster's CA and the namespace, as the kubelet would mount
    them, for the one container that calls the API server: (the pod's volume, its read-only mount)."""
    volume = {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                    }
                },
            ]
        },
    }
    return volume, {"name": name, "mountPath": TOKEN_DIR, "readOnly": True}


# Where each process writes, beside the volumes it reads: an emptyDir each, sized.
VLLM_HOME = "/home/glm53"
VLLM_SCRATCH = (scratch("vllm-tmp", "/tmp", "8Gi"), scratch("vllm-home", VLLM_HOME, "8Gi"))
"""vLLM's writable paths beside the claim's caches, for the serving container and the preflight:
``/tmp`` (torch's and vLLM's temporary files, the engine's IPC sockets) and ``$HOME`` (what a
library keeps under ``~/.cache`` or ``~/.config`` that ``cache_env`` does not point at the claim:
FlashInfer's JIT, vLLM's usage-stats file). Lost with the pod, as they are with a container."""
VLLM_USER_ENV = [{"name": "HOME", "value": VLLM_HOME}, {"name": "USER", "value": "glm53"}]
"""The UID has no passwd entry in the image: ``HOME`` where vLLM may write, and ``USER`` for
``getpass.getuser()`` (torch's inductor names its cache folder after it and fails without one)."""
GATE_SCRATCH = scratch("gate-tmp", "/tmp")
GUARD_SCRATCH = scratch("guard-tmp", "/tmp", "1Gi")
"""The guard's nginx: its pid and the temp files of request bodies it buffers (``runtime_dir``)."""
FRONT_SCRATCH = scratch("tmp", "/tmp", "1Gi")
"""The front's nginx: its pid and the temp files of what it buffers (``runtime_dir``)."""
PROBE_SCRATCH = scratch("tmp", "/tmp")
"""The semantic probe: Python's temporary files."""


def lister_container(
    name: str, image: pulumi.Input[str], pull: str, argv: list[str], *, script: str, out: str, out_dir: str
) -> dict[str, Any]:
    """A lister: :data:`LISTER_SCRIPT` with ``argv``, from the ConfigMap volume ``script``, writing into
    the volume ``out`` mounted at ``out_dir``; the one container of its pod with the token."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": pull,
        "command": ["python3", f"{LISTER_SCRIPT_DIR}/{LISTER_SCRIPT.name}", *argv],
        "volumeMounts": [
            {"name": script, "mountPath": LISTER_SCRIPT_DIR, "readOnly": True},
            {"name": out, "mountPath": out_dir},
            api_token_volume()[1],  # the listers call the API server: the token is mounted in them only
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "96Mi"}},
    }


def lister_account(
    name: str, account: str, namespace: str, opts: pulumi.ResourceOptions
) -> k8s.core.v1.ServiceAccount:
    """A service account ``account`` that may list the namespace's pods, nothing else (its Role and
    RoleBinding, named ``account`` too; Pulumi names ``<name>-account``, ``-role``, ``-binding``)."""
    service_account = k8s.core.v1.ServiceAccount(
        f"{name}-account", metadata={"namespace": namespace, "name": account}, opts=opts
    )
    role = k8s.rbac.v1.Role(
        f"{name}-role",
        metadata={"namespace": namespace, "name": account},
        rules=[{"apiGroups": [""], "resources": ["pods"], "verbs": LISTER_VERBS}],
        opts=opts,
    )
    k8s.rbac.v1.RoleBinding(
        f"{name}-binding",
        metadata={"namespace": namespace, "name": account},
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        subjects=[{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[role, service_account])),
    )
    return service_account
