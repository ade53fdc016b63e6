"""``destroy`` waits for the stack's pods (issue 49; components/kubernetes/teardown.py): the wait's
script run by ``/bin/sh`` against a stand-in kubectl, and its place in the stack (every component
depends on it, so the engine deletes it after every Deployment). The real cluster:
tests/test_k8s_engine.py's destroy test finds no pod once destroy returns."""

from __future__ import annotations

import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime.mocks import MockMonitor

from components.config import KubernetesTargetConfig
from components.kubernetes.teardown import pods_gone_script
from tests.conftest import unwrap
from tests.k8s_urns import KINDS

TARGET = KubernetesTargetConfig.model_validate(
    {"namespace": "glm53-test", "frontUrl": "http://127.0.0.1:30080/v1", "kubeconfig": "/etc/kube/config"}
)
STUB = """#!/bin/sh
echo "$*" >> "$STUB_DIR/calls"
case "$*" in
  *"get deployment"*) [ -e "$STUB_DIR/stands" ] && exit 0; echo 'Error from server (NotFound)' >&2; exit 1 ;;
  *"get pods"*)
    n=$(cat "$STUB_DIR/polls"); echo $((n - 1)) > "$STUB_DIR/polls"
    if [ "$n" -gt 0 ]; then echo pod/glm53-vllm-7d9-abcde; echo pod/glm53-front-5c4-fghij; fi
    exit 0 ;;
esac
exit 2
"""


def _run(script: str, tmp_path: Path, polls: int, stands: bool = False, kubectl: bool = True):
    stub = tmp_path / "bin"
    stub.mkdir(exist_ok=True)
    if kubectl:
        (stub / "kubectl").write_text(STUB)
        (stub / "kubectl").chmod(stat.S_IRWXU)
    (tmp_path / "polls").write_text(str(polls))
    if stands:
        (tmp_path / "stands").write_text("")
    # Only the stub's folder and the tools the script needs (no kubectl of the machine's).
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    for tool in ("date", "sleep", "cat"):
        link = tools / tool
        if not link.exists():
            link.symlink_to(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip())
    env = {"PATH": f"{stub}:{tools}", "STUB_DIR": str(tmp_path)}
    return subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def test_destroy_waits_until_no_pod_is_left(tmp_path: Path) -> None:
    done = _run(pods_gone_script(TARGET, "local", 40), tmp_path, polls=2)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "waiting for the stack's pods to stop: pod/glm53-vllm-7d9-abcde pod/glm53-front-5c4-fghij",
        "waiting for the stack's pods to stop: pod/glm53-vllm-7d9-abcde pod/glm53-front-5c4-fghij",
        "every pod of the stack has stopped",
    ]
    calls = (tmp_path / "calls").read_text().splitlines()
    base = "--kubeconfig /etc/kube/config --namespace glm53-test"
    assert calls[0] == f"{base} get deployment glm53-vllm -o jsonpath={{.metadata.deletionTimestamp}}"
    assert calls[1:] == [f"{base} get pods -l app.kubernetes.io/instance=local -o name"] * 3


def test_a_replacement_on_up_never_waits(tmp_path: Path) -> None:
    """The serving Deployment still stands: the pods serve, nothing is being destroyed."""
    done = _run(pods_gone_script(TARGET, "local", 40), tmp_path, polls=5, stands=True)
    assert done.returncode == 0
    assert (
        done.stdout
        == "deployment/glm53-vllm still stands (this is a replacement, not a destroy): nothing to wait for\n"
    )
    assert len((tmp_path / "calls").read_text().splitlines()) == 1


def test_the_wait_is_bounded_and_names_the_pods_and_the_command(tmp_path: Path) -> None:
    script = pods_gone_script(TARGET, "local", 200)
    assert "WAIT_SECONDS=260\n" in script  # the longest grace (200 s) and a minute
    done = _run(script.replace("WAIT_SECONDS=260\n", "WAIT_SECONDS=3\n"), tmp_path, polls=100)
    assert done.returncode == 1
    assert done.stderr == (
        "still running 3 s after their Deployments were deleted: pod/glm53-vllm-7d9-abcde "
        "pod/glm53-front-5c4-fghij. Watch them: kubectl --kubeconfig /etc/kube/config --namespace "
        "glm53-test get pods -l app.kubernetes.io/instance=local --watch\n"
    )
    assert 2 <= len(done.stdout.splitlines()) <= 3


def test_without_kubectl_it_says_so_and_does_not_wait(tmp_path: Path) -> None:
    done = _run(pods_gone_script(TARGET, "local", 40), tmp_path, polls=3, kubectl=False)
    assert done.returncode == 0
    assert done.stderr.startswith(
        "kubectl is not on PATH: destroy does not wait for the stack's pods to stop."
    )
    assert "kubectl --kubeconfig /etc/kube/config --namespace glm53-test get pods -l" in done.stderr


@contextmanager
def _dependencies() -> Iterator[dict[tuple[str, str], list[str]]]:
    """Each registered resource's (type, name) → the URNs it depends on."""
    seen: dict[tuple[str, str], list[str]] = {}
    original = MockMonitor.RegisterResource

    def register(self: MockMonitor, request: Any) -> Any:
        response = original(self, request)
        seen[(request.type, request.name)] = list(request.dependencies)
        return response

    MockMonitor.RegisterResource = register  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        MockMonitor.RegisterResource = original  # type: ignore[method-assign]


@pytest.mark.parametrize("kind", ["local-node-port", "local-tls-operator"])
def test_every_component_with_pods_is_deleted_before_the_wait(kind: str) -> None:
    with _dependencies() as seen:
        deployment = KINDS[kind]()
    [wait] = [r for r in deployment.resources if r.name == "local-pods-gone-wait"]
    assert "glm53-test" in wait.inputs["delete"] and wait.inputs["update"] == "true"
    assert ("glm:k8s_teardown:PodsGone", "local-pods-gone") in seen
    depending = {key for key, deps in seen.items() if any(d.endswith("::local-pods-gone-wait") for d in deps)}
    # The components whose children are the stack's Deployments (and the guard's, the cache's): the
    # SDK records a dependency on a component as one on its children, here the wait command.
    assert depending == {
        ("glm:k8s_serving:ServingPods", "local-vllm"),
        ("glm:k8s_front:KubernetesFront", "local-front"),
        ("glm:k8s_monitoring:KubernetesScrape", "local"),
        ("glm:k8s_guard:PodGuard", "local"),
        ("glm:k8s_serving:JitCache", "local-jit-cache"),
        ("glm:k8s_probe:KubernetesSemanticProbe", "local-semantic-probe"),
    }


def test_the_wait_outlasts_the_slowest_pods_grace_a_metered_front_with_a_long_scrape_included() -> None:
    """A metered front pod's preStop waits for a final scrape, the handoff of its counts and a scrape
    of the heir's copy: with a 60 s scrape interval its grace (192 s) is longer than the serving pods'. Destroy's wait must
    outlast it, or it fails while the pod still hands on its counts (it waited 60 s + the serving
    grace, and a fixed 60 s for the front, before)."""
    from tests.conftest import run_program
    from tests.k8s_rendered import DEPLOYMENT, k8s_target

    deployment = run_program(
        "local",
        {
            "glm:target": k8s_target(frontNodePort=30080),
            "glm:front": {"allowPlainHttp": True},
            "glm:monitoring": {"scrapeInterval": "60s"},
        },
    )
    graces = {
        # Kubernetes' default where a pod sets none: 30 s.
        r.name: unwrap(r.inputs)["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        for r in deployment.resources
        if r.type == DEPLOYMENT
    }
    assert graces["local-front"] == max(graces.values()) > 60 + 60, graces
    [wait] = [r for r in deployment.resources if r.name == "local-pods-gone-wait"]
    assert f"WAIT_SECONDS={int(graces['local-front']) + 60}\n" in wait.inputs["delete"]
