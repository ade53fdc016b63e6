"""Kubernetes, the first hour (issue 52), below the real cluster: the ready stack's file under
mocks, what the program hands the roll's watch to name, the builds' platform, the cluster's
preflight (components/kubernetes/preflight.py) and the pods' events (components/kubernetes/pod_events.py).

The API objects are recorded from the project's one-node cluster (tests/fixtures/k8s-first-hour/,
its README says how); where that cluster cannot show a case (it has no device plugin, no RBAC
limits on its admin), the test says which recorded field it changes. The e2e side is
tests/test_k8s_first_hour_engine.py.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from components.config import build_stack_config
from components.kubernetes.pod_events import event_failure, pods_failure
from components.kubernetes.pod_status import FAILED, roll_verdict
from components.kubernetes.preflight import ClusterFacts, ClusterNeeds, cluster_problems, read_cluster
from tests.conftest import Deployment, run_program, stack_config, unwrap
from tests.k8s_rendered import DEPLOYMENT

FIXTURES = Path(__file__).parent / "fixtures" / "k8s-first-hour"
WATCH = "pulumi-python:dynamic:Resource"


def recorded(name: str) -> Any:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def ready_stack() -> Deployment:
    return run_program("local-k8s")


# ---- the ready stack's file ---------------------------------------------------------------------


def test_the_ready_stack_targets_the_projects_own_cluster(ready_stack: Deployment) -> None:
    k8s = stack_config("local-k8s")["glm:target"]["kubernetes"]
    # scripts/k8s/cluster.sh: the host kubeconfig under the cache's pki, NodePorts 30080-30089
    # forwarded on loopback, the host's /var/lib/glm53-local bound into the node.
    assert k8s["kubeconfig"] == "~/.cache/glm53-k8s/pki/admin-host.kubeconfig"
    assert k8s["imageLoadCommand"] == "scripts/k8s/cluster.sh import {{image}}"
    assert k8s["cacheHostPath"].startswith("/var/lib/glm53-local/")
    assert ready_stack.outputs["endpoint"] == "http://127.0.0.1:30080/v1"
    pod = unwrap(ready_stack.one(DEPLOYMENT, "-vllm").inputs)["spec"]["template"]["spec"]
    weights = next(v for v in pod["volumes"] if v["name"] == "weights")
    assert weights["hostPath"]["path"].startswith("/var/lib/glm53-local/")  # what make up writes
    assert {c["imagePullPolicy"] for c in pod["containers"]} == {"Never"}


def test_the_ready_stack_ends_like_make_up(ready_stack: Deployment) -> None:
    """scripts/gate_note.py asks the served name and prints the curl: the cluster's outputs have both."""
    outputs = ready_stack.outputs
    assert outputs["servedModelName"] == "glm-5.3-flash"
    assert outputs["curl"].startswith("curl -s http://127.0.0.1:30080/v1/chat/completions ")
    assert '"Authorization: Bearer $GLM_API_KEY"' in outputs["curl"]


def test_the_cluster_stacks_builds_state_their_platform(ready_stack: Deployment) -> None:
    """The Docker provider printed "consider explicitly setting the `platform` field" for the serving
    and the gate images on every cluster up: the builder is this machine's engine, whose platform
    the program knows (HostConfig.build_platform), as the Docker path's builds say it."""
    builds = [unwrap(r.inputs)["build"] for r in ready_stack.of_type("docker:index/image:Image")]
    assert len(builds) == 2
    expected = build_stack_config({"hardware": "local"}).target.hosts[0].build_platform
    assert [b.get("platform") for b in builds] == [expected, expected]


def test_the_watch_names_the_keys_behind_the_pods_volumes_and_images(ready_stack: Deployment) -> None:
    keys = unwrap(ready_stack.one(WATCH, "-vllm-roll").inputs)["keys"]
    assert keys["volume:weights"].startswith("glm:model.hostDir='/var/lib/glm53-local/models'")
    assert keys["volume:jit-cache"].startswith(
        "glm:target.kubernetes.cacheHostPath='/var/lib/glm53-local/k8s-jit-cache'"
    )
    assert keys["container:guard"].startswith("glm:front.image='glm53-local/nginx:bookworm'")
    assert keys["container:vllm"].startswith("glm:image.build")
    assert "imageLoadCommand='scripts/k8s/cluster.sh import {{image}}'" in keys["container:vllm"]


# ---- the cluster's preflight ----------------------------------------------------------------------


def needs(**changes: Any) -> ClusterNeeds:
    """The docs' example on the one-node cluster (docs/scaling.md, issue 52): no cacheHostPath."""
    values: dict[str, Any] = {
        "namespace": "glm53-docs",
        "cache_claim": "glm53-jit-cache",
        "cache_host_path": None,
        "weights_claim": None,
        "cards": {},
        "images": {"glm53-local/nginx:bookworm": "glm:front.image='glm53-local/nginx:bookworm'"},
        "pull_policy": "Never",
        "load_command": "scripts/k8s/cluster.sh import {{image}}",
        **changes,
    }
    return ClusterNeeds(**values)


def one_node(**changes: Any) -> ClusterFacts:
    """The one-node cluster as ``kubectl get nodes,storageclasses -o json`` read it: no StorageClass."""
    values: dict[str, Any] = {
        "nodes": recorded("nodes")["items"],
        "storage_classes": recorded("storageclasses")["items"],
        **changes,
    }
    return ClusterFacts(**values)


def test_the_docs_example_without_cache_host_path_is_refused_naming_the_key() -> None:
    [problem] = cluster_problems(needs(), one_node())
    assert problem.startswith(
        "the JIT cache's claim glm53-docs/glm53-jit-cache (glm:target.kubernetes.cacheClaim) would wait"
    )
    assert "no default StorageClass (it has: none at all)" in problem
    assert (
        "Fix: on a one-node cluster, `scripts/pulumi.sh config set --path "
        "'glm:target.kubernetes.cacheHostPath' /var/lib/glm53-local/k8s-jit-cache -s <stack>`"
    ) in problem


def test_a_cache_host_path_a_claim_of_ones_own_or_a_default_class_binds_the_cache() -> None:
    assert cluster_problems(needs(cache_host_path="/var/lib/glm53-local/k8s-jit-cache"), one_node()) == []
    claim = {"metadata": {"name": "glm53-jit-cache"}, "status": {"phase": "Bound"}}
    assert cluster_problems(needs(), one_node(namespace={"metadata": {}}, claims=[claim])) == []
    default = {
        "metadata": {
            "name": "local-path",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        }
    }
    assert cluster_problems(needs(), one_node(storage_classes=[default])) == []


def test_cards_no_node_offers_are_refused_naming_the_accelerators() -> None:
    """The one-node cluster has no device plugin: its node offers no nvidia.com/gpu (recorded)."""
    node = recorded("nodes")["items"][0]
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    cards = needs(cache_host_path="/srv/jit", cards={"nvidia.com/gpu": 8})
    [problem] = cluster_problems(cards, one_node())
    assert problem.startswith(
        "glm:container.accelerators lists 8 card(s), which each serving pod requests as nvidia.com/gpu: "
        "no node offers nvidia.com/gpu: no device plugin advertises it (1 node(s) read)"
    )
    assert "Fix: install the accelerator's device plugin" in problem
    # The recorded node with a device plugin's four cards (the field a plugin fills): too few.
    node = json.loads(json.dumps(node))
    node["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    [problem] = cluster_problems(cards, one_node(nodes=[node]))
    assert f"the most any node offers is 4 (node {node['metadata']['name']})" in problem
    assert "list at most 4 card(s) in glm:container.accelerators" in problem
    node["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    assert cluster_problems(cards, one_node(nodes=[node])) == []


def test_a_namespace_that_cannot_be_created_or_is_going_is_refused() -> None:
    where = needs(cache_host_path="/srv/jit")
    [problem] = cluster_problems(where, one_node(may_create_namespace=False))
    assert problem.startswith(
        "glm:target.kubernetes.namespace='glm53-docs' does not exist, and this kubeconfig may not create"
    )
    going = {"metadata": {"name": "glm53-docs"}, "status": {"phase": "Terminating"}}
    [problem] = cluster_problems(where, one_node(namespace=going))
    assert "is being deleted (phase Terminating)" in problem


def test_a_weights_claim_the_namespace_lacks_is_refused() -> None:
    [problem] = cluster_problems(needs(cache_host_path="/srv/jit", weights_claim="glm-weights"), one_node())
    assert problem.startswith("glm:target.kubernetes.weightsClaim='glm-weights' is not a claim of namespace")


def test_an_image_no_node_holds_under_pull_policy_never_is_refused() -> None:
    """The node lists what its containerd holds (recorded after scripts/k8s/cluster.sh import of
    the local nginx image); an image it does not hold, without a load command, never starts."""
    held = needs(cache_host_path="/srv/jit", load_command=None)
    assert cluster_problems(held, one_node()) == []
    missing = needs(
        cache_host_path="/srv/jit", load_command=None, images={"glm53-local/absent:1": "glm:front.image"}
    )
    [problem] = cluster_problems(missing, one_node())
    assert problem.startswith(
        "glm:target.kubernetes.imagePullPolicy=Never and glm53-local/absent:1 (glm:front.image) is on no node"
    )
    assert "'glm:target.kubernetes.imageLoadCommand' 'scripts/k8s/cluster.sh import {{image}}'" in problem


FORBIDDEN = "forbidden"


def fake_kubectl(folder: Path, answers: dict[str, Any]) -> None:
    """A ``kubectl`` on PATH answering ``get <what>`` from ``answers`` (None: NotFound, empty;
    ``FORBIDDEN``: the API server's refusal as kubectl prints it), and ``auth can-i`` with ``no``;
    every argv into ``calls``."""
    cases = []
    for what, answer in answers.items():
        if answer == FORBIDDEN:
            refusal = f'Error from server (Forbidden): {what} is forbidden: User "dev" cannot list resource'
            cases.append(f"  *\" get {what} \"*) echo '{refusal}' >&2; exit 1 ;;\n")
            continue
        (folder / f"{what}.json").write_text("" if answer is None else json.dumps(answer))
        cases.append(f'  *" get {what} "*) cat {folder}/{what}.json ;;\n')
    script = folder / "kubectl"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {folder}/calls\n'
        'case " $* " in\n' + "".join(cases) + '  *" auth can-i "*) echo no; exit 1 ;;\n'
        "  *) echo unexpected >&2; exit 1 ;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_the_preflight_reads_the_cluster_with_the_stacks_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_kubectl(
        tmp_path,
        {"nodes": recorded("nodes"), "storageclasses": recorded("storageclasses"), "namespace": None},
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    facts = read_cluster(needs(kubeconfig="/home/ops/.kube/one-node", context="glm53"))
    assert facts.namespace is None and facts.may_create_namespace is False
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == [
        "--kubeconfig /home/ops/.kube/one-node --context glm53 get nodes --output json",
        "--kubeconfig /home/ops/.kube/one-node --context glm53 get storageclasses --output json",
        "--kubeconfig /home/ops/.kube/one-node --context glm53 get namespace glm53-docs --ignore-not-found --output json",
        "--kubeconfig /home/ops/.kube/one-node --context glm53 auth can-i create namespaces",
    ]
    assert len(cluster_problems(needs(), facts)) == 2  # the namespace and the cache, at once


def test_what_a_namespaced_user_may_not_read_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubeconfig with rights in its namespace only may not list nodes, StorageClasses or
    namespaces: those checks stand aside (the roll's events still speak); its claims still count."""
    answers = {"nodes": FORBIDDEN, "storageclasses": FORBIDDEN, "namespace": FORBIDDEN,
               "persistentvolumeclaims": {"items": []}}  # fmt: skip
    fake_kubectl(tmp_path, answers)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    facts = read_cluster(needs(cards={"nvidia.com/gpu": 8}, load_command=None))
    assert (facts.nodes, facts.storage_classes, facts.claims) == (None, None, [])
    assert cluster_problems(needs(cards={"nvidia.com/gpu": 8}, load_command=None), facts) == []
    [problem] = cluster_problems(needs(weights_claim="glm-weights"), facts)
    assert problem.startswith("glm:target.kubernetes.weightsClaim='glm-weights' is not a claim")


# ---- the pods' events, recorded on the one-node cluster -------------------------------------------

KEYS = {
    "volume:weights": "glm:model.hostDir='/var/lib/glm53-local/missing-models'",
    "container:vllm": "glm:image.reference='registry.invalid/glm53/vllm:absent'",
    "claim:glm53-absent-claim": "glm:target.kubernetes.weightsClaim='glm53-absent-claim'",
    "cards": "glm:container.accelerators (8 card(s) a pod)",
}


def events(name: str) -> list[dict[str, Any]]:
    return list(recorded(f"events-{name}")["items"])


def first_failure(name: str, *, old_pods_left: bool = False) -> str:
    said = [event_failure(e, KEYS, old_pods_left=old_pods_left) for e in events(name)]
    found = [s for s in said if s]
    assert found, f"no event of {name} says the pod cannot come up: {[e['reason'] for e in events(name)]}"
    return found[0]


def test_a_missing_weights_folder_is_named_as_glm_model_host_dir() -> None:
    said = first_failure("failed-mount")
    assert said.startswith(
        'cannot mount volume weights: FailedMount: MountVolume.SetUp failed for volume "weights"'
    )
    assert "hostPath type check failed, /var/lib/glm53-local/missing-models is not a directory" in said
    assert said.endswith("That is glm:model.hostDir='/var/lib/glm53-local/missing-models'.")


def test_a_mount_failure_other_than_a_missing_folder_must_repeat_to_count() -> None:
    """CI on the one-node cluster, 2026-12-06: a serving pod's first second gave ``FailedMount …
    error processing PVC glm53-e2e/glm53-jit-cache: … no relationship found between node and this
    object`` (the node's authorizer had not yet seen the new pod), and ``up`` failed at 2 s, then
    at 8 s once it had to last 6 s (the event outlived its cause); the kubelet's next try mounted it.
    Such a failure counts once the kubelet met it MOUNT_REPEATS times; a missing hostPath at once."""
    from components.kubernetes.pod_events import pods_failure

    [missing] = [e for e in events("failed-mount") if e["reason"] == "FailedMount"][:1]
    transient = {
        **missing,
        "message": "Unable to attach or mount volumes: unmounted volumes=[guard jit-cache], unattached "
        "volumes=[], failed to process volumes=[jit-cache]: error processing PVC glm53-e2e/glm53-jit-cache: "
        'User "system:node:glm53-node" cannot get resource "persistentvolumeclaims" in API group "" in the '
        "namespace \"glm53-e2e\": node: no relationship found between node 'glm53-node' and this object",
    }
    name = missing["involvedObject"]["name"]
    pod = {"metadata": {"name": name}, "status": {"phase": "Pending"}}
    at_once = pods_failure([{**missing, "count": 1}], [pod], KEYS, old_pods_left=False)
    assert at_once is not None and at_once[1] is False
    for count in (1, 2):
        assert pods_failure([{**transient, "count": count}], [pod], KEYS, old_pods_left=False) is None
    repeated = pods_failure([{**transient, "count": 3}], [pod], KEYS, old_pods_left=False)
    assert repeated is not None and "error processing PVC" in repeated[0]


def test_an_image_the_node_cannot_get_is_named_with_its_key() -> None:
    said = first_failure("image-pull")
    assert said.startswith("container vllm cannot get its image: ")
    assert "registry.invalid/glm53/vllm:absent" in said
    assert said.endswith("That is glm:image.reference='registry.invalid/glm53/vllm:absent'.")


def test_an_image_absent_under_pull_policy_never_is_named() -> None:
    said = first_failure("never-pull")
    assert said.startswith("container vllm cannot get its image: ErrImageNeverPull: Container image")
    assert "is not present with pull policy of Never" in said


def test_a_pod_no_node_takes_fails_once_no_old_pod_is_stopping() -> None:
    said = first_failure("insufficient-gpu")
    assert said.startswith(
        "no node takes it: FailedScheduling: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu"
    )
    assert said.endswith("That is glm:container.accelerators (8 card(s) a pod).")
    # While a pod of the old template stops, its cards may be what the new one waits for.
    assert all(event_failure(e, KEYS, old_pods_left=True) is None for e in events("insufficient-gpu"))


def test_a_claim_that_does_not_exist_is_named() -> None:
    said = first_failure("missing-claim", old_pods_left=True)
    assert 'persistentvolumeclaim "glm53-absent-claim" not found' in said
    assert said.endswith("That is glm:target.kubernetes.weightsClaim='glm53-absent-claim'.")


def test_a_sandbox_the_runtime_cannot_make_fails_once_repeated() -> None:
    """Recorded with a RuntimeClass whose handler the node's containerd lacks: the kubelet retries,
    and the event's count says it lasts."""
    said = first_failure("sandbox")
    assert said.startswith("its sandbox cannot be made (the node's container runtime or network plugin): ")
    assert "FailedCreatePodSandBox: " in said
    [event] = [e for e in events("sandbox") if e["reason"] == "FailedCreatePodSandBox"]
    assert event["count"] >= 2
    assert event_failure({**event, "count": 1}, KEYS, old_pods_left=False) is None


def test_a_loading_pods_events_are_no_failure() -> None:
    """A pod that started as it should (scheduled, pulled, started): nothing in its events fails it."""
    assert [e for e in events("started") if event_failure(e, KEYS, old_pods_left=False)] == []


def test_the_roll_fails_on_the_new_pods_events_only_while_it_has_not_started() -> None:
    pod = recorded("pod-failed-mount")
    template = pod["metadata"]["annotations"]["glm53/template"]
    deployment = {"metadata": {"name": "glm53-vllm", "generation": 2}, "spec": {"replicas": 1}, "status": {}}
    verdict = roll_verdict(deployment, [pod], template, events("failed-mount"), KEYS)
    assert verdict.state == FAILED and not verdict.settles
    assert verdict.detail.startswith(
        f"pod {pod['metadata']['name']} cannot mount volume weights: FailedMount"
    )
    # Another template's pod: its events are not this roll's.
    assert roll_verdict(deployment, [pod], "0000000000000000", events("failed-mount"), KEYS).state != FAILED
    assert pods_failure(events("failed-mount"), [], KEYS, old_pods_left=False) is None


def test_an_event_whose_cause_is_gone_fails_nothing() -> None:
    """Events outlive their cause: the kubelet retried and the pod moved on. The recorded pods as
    they were when their events were read, then with what moving on changes."""
    for name in ("failed-mount", "image-pull", "never-pull", "insufficient-gpu", "missing-claim"):
        assert pods_failure(events(name), [recorded(f"pod-{name}")], KEYS, old_pods_left=False), name
    placed = recorded("pod-insufficient-gpu")
    placed["spec"]["nodeName"] = "glm53-node"  # what the scheduler writes when it places the pod
    assert pods_failure(events("insufficient-gpu"), [placed], KEYS, old_pods_left=False) is None
    pulled = recorded("pod-image-pull")
    pulled["status"]["containerStatuses"][0]["state"] = recorded("pod-started")["status"][
        "containerStatuses"
    ][0]["state"]
    assert pods_failure(events("image-pull"), [pulled], KEYS, old_pods_left=False) is None
    mounted = recorded("pod-failed-mount")
    mounted["status"]["containerStatuses"] = recorded("pod-started")["status"]["containerStatuses"]
    assert pods_failure(events("failed-mount"), [mounted], KEYS, old_pods_left=False) is None


def test_a_cluster_that_cannot_be_read_refuses_an_up_and_warns_a_preview(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server does not answer (kubectl's own words, as the one-node cluster's stopped
    forward answers): ``up`` is refused naming the kubeconfig and the start command; a preview (a
    review without cluster access) is warned and goes on."""
    import pulumi

    from components.kubernetes.preflight import check_cluster

    refused = (
        "The connection to the server 127.0.0.1:16443 was refused - did you specify the right host or port?"
    )
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f"#!/bin/sh\necho '{refused}' >&2\nexit 1\n")
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("GLM_DESTROY_DRAIN", raising=False)
    # The mocks this module's other tests set stay the runtime's: this one is a real run.
    monkeypatch.setattr("components.kubernetes.preflight._under_mocks", lambda: False)
    said: dict[str, list[str]] = {"error": [], "warn": []}
    monkeypatch.setattr(pulumi.log, "error", lambda m, *_, **__: said["error"].append(m))
    monkeypatch.setattr(pulumi.log, "warn", lambda m, *_, **__: said["warn"].append(m))
    config = build_stack_config(
        {key.removeprefix("glm:"): value for key, value in stack_config("local-k8s").items()}
    )
    monkeypatch.setattr(pulumi.runtime, "is_dry_run", lambda: False)
    with pytest.raises(SystemExit) as exited:
        check_cluster(config)
    assert exited.value.code == 32
    [error] = said["error"]
    assert "could not be read: kubectl get nodes: " + refused in error
    assert "glm:target.kubernetes.kubeconfig=" in error and "make k8s-start" in error
    monkeypatch.setattr(pulumi.runtime, "is_dry_run", lambda: True)
    check_cluster(config)
    assert said["warn"][0].endswith("The preview goes on without the cluster's preflight.")
