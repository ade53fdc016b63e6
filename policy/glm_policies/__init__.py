"""The glm-serving rules as pure functions over plain data: no engine, no gRPC, no pulumi import.

Each rule takes a ``Resource`` (the analyzer's view of one resource: type, logical name, inputs as
the engine sends them, in camelCase) and returns the violation messages, ``[]`` when it passes.
A rule that needs a value the engine does not know yet (an Output during preview) raises
``Undecidable``; ``glm_analyzer`` turns that into "not applicable" with the reason, so a preview
never crashes and never passes a resource silently.

Messages name the resource, the input, the value, and the fix. They never quote nginx.conf: it
holds the API keys.

The package is imported two ways: as ``glm_policies`` by the pack (the engine runs ``policy/`` as
a program) and as ``policy.glm_policies`` by the program's config; hence relative imports inside.

* ``resource``: what a rule sees (``Resource``, ``normalize``, ``UNKNOWN``) and what a resource is;
* ``exposure``: rules 1, 2, 7 and 8, what the network can reach;
* ``images``: rule 3, pinned images, and the stacks where it is advisory;
* ``storage``: rules 4, 5 and 6, /dev/shm, read-only weights, kept volumes;
* ``kubernetes``: rules 9 to 12, the Kubernetes objects (Services, pods, cards);
* here: ``RULES``, the table ``glm_analyzer`` builds the pack from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .exposure import (
    GUARD_LABEL,
    NGINX_CONF,
    PLAIN_HTTP_LABEL,
    PUBLIC_BIND_LABEL,
    RELOADED_CONF,
    TLS_LABEL,
    binds_all_interfaces,
    front_requires_api_key,
    front_tls_on_public_bind,
    is_loopback,
    no_public_serving_port,
    published_port_needs_credential,
)
from .images import (
    DEFAULT_RELAXED_STACK_SUFFIXES,
    DEFAULT_RELAXED_STACKS,
    image_refs,
    images_pinned,
    is_relaxed_stack,
    stack_of,
    unpinned_reason,
)
from .kubernetes import (
    ACCELERATOR_ANNOTATION,
    CARD_RESOURCES,
    NO_CARDS,
    k8s_gpu_requests,
    k8s_node_port_opted_in,
    k8s_pod_least_privilege,
    k8s_pod_not_privileged,
    k8s_serving_service_private,
)
from .resource import (
    CONTAINER,
    DYNAMIC,
    FRONT_LABEL,
    FRONT_SUFFIX,
    IMAGE,
    REMOTE_IMAGE,
    SERVING_LABEL,
    SERVING_SUFFIX,
    UNKNOWN,
    VOLUME,
    Resource,
    Undecidable,
    flag_value,
    is_front,
    is_labelled_front,
    is_serving,
    labels,
    normalize,
)
from .storage import (
    DEFAULT_RETAINED_VOLUME_SUFFIXES,
    DOCKER_DEFAULT_SHM_MB,
    shm_for_tensor_parallel,
    tensor_parallel_size,
    volumes_retained,
    weights_mounts,
    weights_read_only,
)

__all__ = [
    "ACCELERATOR_ANNOTATION",
    "CARD_RESOURCES",
    "CONTAINER",
    "DEFAULT_RELAXED_STACKS",
    "DEFAULT_RELAXED_STACK_SUFFIXES",
    "DEFAULT_RETAINED_VOLUME_SUFFIXES",
    "DOCKER_DEFAULT_SHM_MB",
    "DYNAMIC",
    "FRONT_LABEL",
    "FRONT_SUFFIX",
    "GUARD_LABEL",
    "IMAGE",
    "NGINX_CONF",
    "NO_CARDS",
    "PLAIN_HTTP_LABEL",
    "PUBLIC_BIND_LABEL",
    "RELOADED_CONF",
    "REMOTE_IMAGE",
    "RULES",
    "SERVING_LABEL",
    "SERVING_SUFFIX",
    "TLS_LABEL",
    "UNKNOWN",
    "VOLUME",
    "Resource",
    "Rule",
    "Undecidable",
    "binds_all_interfaces",
    "flag_value",
    "front_requires_api_key",
    "front_tls_on_public_bind",
    "image_refs",
    "images_pinned",
    "is_front",
    "is_labelled_front",
    "is_loopback",
    "is_relaxed_stack",
    "is_serving",
    "k8s_gpu_requests",
    "k8s_node_port_opted_in",
    "k8s_pod_least_privilege",
    "k8s_pod_not_privileged",
    "k8s_serving_service_private",
    "labels",
    "no_public_serving_port",
    "normalize",
    "published_port_needs_credential",
    "shm_for_tensor_parallel",
    "stack_of",
    "tensor_parallel_size",
    "unpinned_reason",
    "volumes_retained",
    "weights_mounts",
    "weights_read_only",
]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    check: Callable[[Resource, Mapping[str, Any]], list[str]]
    advisory_on_relaxed_stacks: bool = False
    config_schema: Mapping[str, Any] = field(default_factory=dict)


_STRING_LIST = {"type": "array", "items": {"type": "string"}}

RULES: tuple[Rule, ...] = (
    Rule(
        "no-public-serving-port",
        "No port on all interfaces except the Nginx front's API port; no port at all from vLLM.",
        no_public_serving_port,
    ),
    Rule(
        "front-requires-api-key",
        "The Nginx front's nginx.conf checks the API key (map $http_authorization) and returns 401.",
        front_requires_api_key,
    ),
    Rule(
        "images-pinned",
        "Images are pinned: no :latest, no untagged image, no floating nightly tag.",
        images_pinned,
        advisory_on_relaxed_stacks=True,
        config_schema={"relaxedStacks": _STRING_LIST, "relaxedStackSuffixes": _STRING_LIST},
    ),
    Rule(
        "shm-for-tensor-parallel",
        "Tensor parallel > 1 runs with shmSize > 64 MB or ipcMode host.",
        shm_for_tensor_parallel,
    ),
    Rule(
        "weights-read-only",
        "The vLLM container mounts the model weights read-only.",
        weights_read_only,
    ),
    Rule(
        "volumes-retained",
        "Docker volumes are protected or retained on delete.",
        volumes_retained,
        config_schema={"retainedVolumeSuffixes": _STRING_LIST},
    ),
    Rule(
        "front-tls-on-public-bind",
        "The Nginx front serves TLS when it binds beyond loopback, unless the stack opted in to plain HTTP.",
        front_tls_on_public_bind,
    ),
    Rule(
        "published-port-needs-credential",
        "A port published beyond loopback belongs to a container that checks a key (the front, a replica "
        "guard), unless the stack opted in (glm:monitoring.allowPublicBind).",
        published_port_needs_credential,
    ),
    Rule(
        "k8s-serving-service-private",
        "The Service in front of the vLLM pods is ClusterIP: no NodePort, load balancer or external IP.",
        k8s_serving_service_private,
    ),
    Rule(
        "k8s-node-port-opted-in",
        "A NodePort or LoadBalancer Service is a public bind: the front's serves TLS or carries the "
        "plain-HTTP opt-in, any other the public-bind opt-in.",
        k8s_node_port_opted_in,
    ),
    Rule(
        "k8s-pod-not-privileged",
        "No pod on the node's network, PID or IPC namespace, and no privileged container.",
        k8s_pod_not_privileged,
    ),
    Rule(
        "k8s-gpu-requests",
        "The vLLM pods of a hardware profile request and limit one card per tensor-parallel rank.",
        k8s_gpu_requests,
    ),
    Rule(
        "k8s-pod-least-privilege",
        "No pod mounts the service-account token by default; every container runs as a fixed non-root "
        "UID, cannot gain privileges, drops every capability and has a read-only root file system.",
        k8s_pod_least_privilege,
    ),
)
"""The pack's rules, in the order of docs/policy.md."""
