"""The policy pack's Kubernetes rules (9 to 12, policy/glm_policies/kubernetes.py), as
tests/test_policy.py tests the others: each rule on engine-shaped inputs (camelCase, numbers as
floats, unknowns as the engine's markers), a passing and a violating case at least; through
pulumi-policy's own analyzer servicer; and every profile's stack on Kubernetes, rendered under
mocks, against the whole pack.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import profile_stacks, run_program
from tests.k8s_rendered import k8s_target, plain_http_accepted
from tests.policy_pack import UNKNOWN_STRING, gp, resource

SERVICE = "kubernetes:core/v1:Service"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
VLLM = {"app.kubernetes.io/name": "glm53-vllm", "app.kubernetes.io/instance": "a800"}
FRONT = {"app.kubernetes.io/name": "glm53-front", "app.kubernetes.io/instance": "a800"}
PROMETHEUS = {"app.kubernetes.io/name": "glm53-prometheus", "app.kubernetes.io/instance": "a800"}


def service(logical: str, selector: dict[str, str], annotations: dict[str, str] | None = None, **spec: Any):
    metadata: dict[str, Any] = {"namespace": "glm53", "name": selector["app.kubernetes.io/name"]}
    if annotations is not None:
        metadata["annotations"] = annotations
    ports = [{"name": "http", "port": 8000.0, "targetPort": "guard"}]
    return resource(SERVICE, logical, metadata=metadata, spec={"selector": selector, "ports": ports, **spec})


NODE_PORT = {"type": "NodePort", "ports": [{"name": "http", "port": 8080.0, "nodePort": 30080.0}]}


# --- 9. k8s-serving-service-private -------------------------------------------------------------


def test_a_cluster_ip_vllm_service_passes() -> None:
    assert gp.k8s_serving_service_private(service("a800-vllm-service", VLLM), {}) == []


@pytest.mark.parametrize(
    ("spec", "found"),
    [
        (NODE_PORT, "type NodePort, nodePort 30080"),
        ({"type": "LoadBalancer"}, "type LoadBalancer"),
        ({"externalIPs": ["203.0.113.7"]}, "externalIPs 203.0.113.7"),
    ],
    ids=["node-port", "load-balancer", "external-ip"],
)
def test_a_vllm_service_reachable_from_outside_is_refused(spec: dict[str, Any], found: str) -> None:
    [message] = gp.k8s_serving_service_private(service("a800-vllm-service", VLLM, **spec), {})
    assert f"a800-vllm-service (the vLLM Service) has {found}" in message
    assert "Fix: a ClusterIP Service" in message


def test_the_vllm_service_is_found_by_its_name_too() -> None:
    named = resource(
        SERVICE, "a800-api", metadata={"name": "glm53-vllm"}, spec={"selector": {"app": "x"}, **NODE_PORT}
    )
    assert gp.k8s_serving_service_private(named, {})


def test_an_unknown_service_type_is_undecidable() -> None:
    with pytest.raises(gp.Undecidable):
        gp.k8s_serving_service_private(service("a800-vllm-service", VLLM, type=UNKNOWN_STRING), {})


# --- 10. k8s-node-port-opted-in -----------------------------------------------------------------


def test_node_ports_without_the_opt_in_are_refused() -> None:
    [front] = gp.k8s_node_port_opted_in(service("a800-front-service", FRONT, **NODE_PORT), {})
    assert (
        "a800-front-service (the front's Service) has type NodePort, nodePort 30080 and serves plain HTTP"
        in front
    )
    assert "glm:front.allowPlainHttp: true (annotation glm53.plain-http=accepted)" in front
    [prometheus] = gp.k8s_node_port_opted_in(service("a800-prometheus-service", PROMETHEUS, **NODE_PORT), {})
    assert (
        "a800-prometheus-service has type NodePort, nodePort 30080 with no credential in front of it"
        in prometheus
    )
    assert "glm:monitoring.allowPublicBind: true (annotation glm53.public-bind=accepted)" in prometheus


@pytest.mark.parametrize(
    "res",
    [
        service("a800-front-service", FRONT, {"glm53.plain-http": "accepted"}, **NODE_PORT),
        service("a800-front-service", FRONT, {"glm53.tls": "on"}, **NODE_PORT),
        service("a800-prometheus-service", PROMETHEUS, {"glm53.public-bind": "accepted"}, **NODE_PORT),
        service("a800-front-service", FRONT),
        service("a800-vllm-service", VLLM, **NODE_PORT),  # rule 9's
    ],
    ids=["front-opted-in", "front-tls", "prometheus-opted-in", "cluster-ip", "vllm"],
)
def test_opted_in_cluster_ip_or_vllm_pass(res) -> None:
    assert gp.k8s_node_port_opted_in(res, {}) == []


def test_one_opt_in_does_not_open_another_service() -> None:
    """The front's plain-HTTP opt-in is not Prometheus' public bind."""
    crossed = service("a800-prometheus-service", PROMETHEUS, {"glm53.plain-http": "accepted"}, **NODE_PORT)
    assert gp.k8s_node_port_opted_in(crossed, {})


# --- 11. k8s-pod-not-privileged -----------------------------------------------------------------


def deployment(pod: dict[str, Any], annotations: dict[str, str] | None = None, logical: str = "a800-vllm"):
    template = {"metadata": {"labels": VLLM, "annotations": annotations or {}}, "spec": pod}
    return resource(
        DEPLOYMENT, logical, metadata={"name": "glm53-vllm"}, spec={"replicas": 2.0, "template": template}
    )


def vllm_container(tp: int = 8, cards: float | None = 8.0, card: str = "nvidia.com/gpu") -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "vllm",
        "command": ["vllm", "serve"],
        "args": ["/models/GLM-5.3-Flash", "--host=127.0.0.1", "--port=8000", f"--tensor-parallel-size={tp}"],
    }
    if cards is not None:
        container["resources"] = {"limits": {card: str(int(cards))}, "requests": {card: cards}}
    return container


def test_a_plain_pod_passes() -> None:
    assert gp.k8s_pod_not_privileged(deployment({"containers": [vllm_container()]}), {}) == []


@pytest.mark.parametrize(
    ("pod", "found"),
    [
        ({"hostNetwork": True}, "hostNetwork: true"),
        ({"hostPID": True, "hostIPC": True}, "hostPID: true, hostIPC: true"),
        (
            {"initContainers": [{"name": "setup", "securityContext": {"privileged": True}}]},
            "container setup privileged",
        ),
    ],
    ids=["host-network", "host-pid-ipc", "privileged"],
)
def test_host_namespaces_and_privileged_containers_are_refused(pod: dict[str, Any], found: str) -> None:
    [message] = gp.k8s_pod_not_privileged(deployment({"containers": [vllm_container()], **pod}), {})
    assert f"a800-vllm runs with {found}" in message


def test_a_bare_pod_is_checked_too() -> None:
    pod = resource("kubernetes:core/v1:Pod", "debug", spec={"hostNetwork": True, "containers": []})
    assert gp.k8s_pod_not_privileged(pod, {})


# --- 12. k8s-gpu-requests -----------------------------------------------------------------------


def test_one_card_per_rank_passes() -> None:
    nvidia = deployment({"containers": [vllm_container()]}, {"glm53/accelerator": "nvidia"})
    assert gp.k8s_gpu_requests(nvidia, {}) == []
    ascend = deployment(
        {"containers": [vllm_container(card="huawei.com/Ascend910")]}, {"glm53/accelerator": "ascend"}
    )
    assert gp.k8s_gpu_requests(ascend, {}) == []
    simulator = deployment({"containers": [vllm_container(cards=None)]}, {"glm53/accelerator": "none"})
    assert gp.k8s_gpu_requests(simulator, {}) == []


@pytest.mark.parametrize(
    ("container", "found"),
    [
        (vllm_container(cards=None), "needs 8 nvidia.com/gpu, but it requests 0 and limits 0"),
        (vllm_container(cards=4.0), "needs 8 nvidia.com/gpu, but it requests 4 and limits 4"),
        (vllm_container(card="huawei.com/Ascend910"), "needs 8 nvidia.com/gpu, but it requests 0"),
    ],
    ids=["none", "too-few", "other-kind"],
)
def test_a_hardware_profile_without_its_cards_is_refused(container: dict[str, Any], found: str) -> None:
    [message] = gp.k8s_gpu_requests(
        deployment({"containers": [container]}, {"glm53/accelerator": "nvidia"}), {}
    )
    assert f"a800-vllm (container vllm, nvidia): --tensor-parallel-size=8 {found}" in message


def test_vllm_without_the_accelerator_annotation_is_refused() -> None:
    [message] = gp.k8s_gpu_requests(deployment({"containers": [vllm_container()]}), {})
    assert "runs vLLM without the annotation glm53/accelerator" in message
    other = deployment({"containers": [{"name": "nginx", "command": ["nginx"]}]}, logical="a800-front")
    assert gp.k8s_gpu_requests(other, {}) == []  # no vLLM, nothing to request


# --- 13. k8s-pod-least-privilege ----------------------------------------------------------------

RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 10001.0, "runAsGroup": 10001.0, "fsGroup": 10001.0}
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
}


def restricted_pod(container: dict[str, Any] | None = None, **pod: Any) -> Any:
    """A Deployment whose pod follows the rule; ``container`` replaces its one container's
    ``securityContext``, ``pod`` its own keys."""
    c = {**vllm_container(), "securityContext": RESTRICTED if container is None else container}
    spec = {
        "automountServiceAccountToken": False,
        "securityContext": RESTRICTED_POD,
        "containers": [c],
        **pod,
    }
    return deployment(spec)


def test_a_restricted_pod_passes() -> None:
    assert gp.k8s_pod_least_privilege(restricted_pod(), {}) == []
    # The container's own user, the one capability it may add back.
    own = {
        **RESTRICTED,
        "runAsNonRoot": True,
        "runAsUser": 2000.0,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
    }
    assert gp.k8s_pod_least_privilege(restricted_pod(own, securityContext={}), {}) == []


def test_a_pod_that_mounts_the_token_by_default_is_refused() -> None:
    for pod in ({"automountServiceAccountToken": True}, {"automountServiceAccountToken": None}):
        [message] = gp.k8s_pod_least_privilege(restricted_pod(**pod), {})
        assert "a800-vllm mounts the service-account token in every container" in message
        assert "Fix: automountServiceAccountToken: false" in message


@pytest.mark.parametrize(
    ("container", "pod", "found"),
    [
        ({**RESTRICTED, "runAsNonRoot": False}, {}, "runAsNonRoot is not true"),
        (RESTRICTED, {"securityContext": {"runAsUser": 10001.0}}, "runAsNonRoot is not true"),
        (RESTRICTED, {"securityContext": {"runAsNonRoot": True}}, "no fixed non-root runAsUser"),
        ({**RESTRICTED, "runAsUser": 0.0}, {}, "runAsUser 0.0"),
        ({**RESTRICTED, "allowPrivilegeEscalation": True}, {}, "allowPrivilegeEscalation is not false"),
        ({k: v for k, v in RESTRICTED.items() if k != "allowPrivilegeEscalation"}, {}, "allowPrivilegeEscalation is not false"),
        ({**RESTRICTED, "capabilities": {"drop": ["NET_RAW"]}}, {}, "capabilities.drop lacks ALL"),
        ({**RESTRICTED, "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}, {}, "capabilities.add SYS_ADMIN"),
        ({**RESTRICTED, "readOnlyRootFilesystem": False}, {}, "readOnlyRootFilesystem is not true"),
        (None, {"initContainers": [{"name": "setup"}]}, "allowPrivilegeEscalation is not false"),
    ],
    ids=["root-allowed", "no-run-as-non-root", "no-uid", "uid-0", "escalation", "escalation-unset",
         "capabilities-kept", "capability-added", "writable-root", "init-container"],
)  # fmt: skip
def test_each_broken_rule_is_refused(
    container: dict[str, Any] | None, pod: dict[str, Any], found: str
) -> None:
    [message] = gp.k8s_pod_least_privilege(restricted_pod(container, **pod), {})
    assert found in message and "Fix: securityContext runAsNonRoot: true" in message


def test_a_pod_without_any_security_context_names_every_problem() -> None:
    [token, container] = gp.k8s_pod_least_privilege(deployment({"containers": [vllm_container()]}), {})
    assert "mounts the service-account token" in token
    assert "(container vllm): runAsNonRoot is not true, no fixed non-root runAsUser, " in container
    assert "capabilities.drop lacks ALL, readOnlyRootFilesystem is not true" in container


# --- through the analyzer, and the committed stacks ---------------------------------------------


def test_a_node_port_without_the_opt_in_is_a_mandatory_violation(analyze) -> None:
    res = service("a800-prometheus-service", PROMETHEUS, **NODE_PORT)
    diagnostics, _ = analyze(SERVICE, res.name, {"metadata": res.props["metadata"], "spec": {
        "type": "NodePort", "selector": PROMETHEUS, "ports": [{"port": 9090, "nodePort": 30090}],
    }})  # fmt: skip
    assert list(diagnostics) == [("k8s-node-port-opted-in", "MANDATORY")]


@pytest.mark.parametrize("stack", profile_stacks())
def test_every_stack_on_kubernetes_passes_the_pack(stack: str) -> None:
    target = k8s_target(frontNodePort=30080)
    deployment_ = run_program(stack, {"glm:target": target, **plain_http_accepted(stack)})
    rules = [r for r in gp.RULES if r.name != "volumes-retained"]
    resources = [
        gp.Resource(
            r.type, r.name, gp.normalize(r.inputs), urn=f"urn:pulumi:{stack}::glm::{r.type}::{r.name}"
        )
        for r in deployment_.resources
    ]
    assert [(rule.name, m) for res in resources for rule in rules for m in rule.check(res, {})] == []
    # Not vacuous: the rules found what they are about.
    [vllm] = [r for r in resources if r.type == DEPLOYMENT and r.name.endswith("-vllm")]
    annotation = vllm.props["spec"]["template"]["metadata"]["annotations"]["glm53/accelerator"]
    assert annotation == {"a800": "nvidia", "rtx5090": "nvidia", "ascend": "ascend"}.get(stack, "none")
    if annotation != "none":
        # Without its cards' request the same Deployment is refused.
        pod = vllm.props["spec"]["template"]["spec"]
        bare = [{k: v for k, v in c.items() if k != "resources"} for c in pod["containers"]]
        template = {**vllm.props["spec"]["template"], "spec": {**pod, "containers": bare}}
        stripped = gp.Resource(
            vllm.type, vllm.name, {**vllm.props, "spec": {**vllm.props["spec"], "template": template}}
        )
        assert gp.k8s_gpu_requests(stripped, {})
    # Least privilege is checked on each rendered pod: without its security context it is refused.
    for workload in (r for r in resources if r.type == DEPLOYMENT):
        pod = workload.props["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, workload.name
        loose = {**pod, "containers": [{**c, "securityContext": {}} for c in pod["containers"]]}
        template = {**workload.props["spec"]["template"], "spec": loose}
        bare_pod = gp.Resource(
            workload.type,
            workload.name,
            {**workload.props, "spec": {**workload.props["spec"], "template": template}},
        )
        assert gp.k8s_pod_least_privilege(bare_pod, {}), workload.name
    front = next(r for r in resources if r.type == SERVICE and r.name.endswith("-front-service"))
    assert front.props["spec"]["type"] == "NodePort" and front.props["metadata"]["annotations"]
