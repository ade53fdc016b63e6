"""A failing roll fails ``up`` fast with its cause (issue 34): the serving pods' statuses decided
(components/kubernetes/pod_status.py), the watch that polls them (components/kubernetes/roll.py), and how the
program wires it (no pulumi-kubernetes wait on the Deployment; every container's last log lines
in its termination message).

The pods are hand-made after the Kubernetes API's Pod schema (tests/fixtures/k8s-pods/README.md),
not recorded from a cluster; the expected words are those the fixtures' programs print.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from components.kubernetes.pod_status import COMING, FAILED, READY, pod_verdict, roll_verdict
from components.kubernetes.roll import RollWatchProvider, watch_roll
from components.provider_errors import OperatorError
from tests.conftest import Deployment, run_program, unwrap
from tests.k8s_rendered import DEPLOYMENT, k8s_target, plain_http_accepted

PODS = Path(__file__).parent / "fixtures" / "k8s-pods"
TEMPLATE = "9e0f1a2b3c4d5e6f"
"""The ``glm53/template`` annotation of the fixtures' new pods."""


def pod(name: str) -> dict[str, Any]:
    return json.loads((PODS / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("fixture", "said"),
    [
        (
            "engine-bad-flag",
            "pod glm53-vllm-5f8b7c6d9-q4wzt: container vllm exited 2\n"
            "    | INFO 12-03 10:31:52 [__init__.py:216] Automatically detected platform cuda.\n"
            "    | usage: vllm serve [model_tag] [options]\n"
            "    | vllm serve: error: argument --max-num-seqs: invalid int value: 'many'",
        ),
        (
            "engine-out-of-memory-loop",
            "pod glm53-vllm-5f8b7c6d9-m7r2d: container vllm restarts in a loop (3 restarts; last exited 1)\n",
        ),
        ("gate-oom-killed", "pod glm53-vllm-5f8b7c6d9-h8n4c: container gate exited 137, OOMKilled"),
        (
            "image-pull-backoff",
            "pod glm53-vllm-6c7d8e9f0-t5v1b: init container preflight cannot start: ImagePullBackOff\n"
            '    | Back-off pulling image "registry.example.internal/glm53-flash-sm80:4f2a9c1e": ErrImagePull',
        ),
        (
            "preflight-refused",
            "pod glm53-vllm-5f8b7c6d9-c3j6s: init container preflight exited 1\n"
            "    | preflight: 8 GPU(s), driver 580.159.04",
        ),
    ],
)
def test_a_failed_pod_is_named_with_its_containers_own_words(fixture: str, said: str) -> None:
    verdict = pod_verdict(pod(fixture))
    assert verdict.state == FAILED
    assert verdict.detail.startswith(said)


def test_the_engine_loops_last_words_are_quoted() -> None:
    detail = pod_verdict(pod("engine-out-of-memory-loop")).detail
    assert "    | (EngineCore_DP0 pid=212) torch.OutOfMemoryError: CUDA out of memory." in detail
    assert detail.endswith("Engine core initialization failed. See root cause above. Failed core proc(s): {}")


def test_the_preflights_problems_are_quoted_whole() -> None:
    detail = pod_verdict(pod("preflight-refused")).detail
    problems = [line for line in detail.splitlines() if "preflight on " in line]
    assert [p.split(": ")[0] for p in problems] == [
        "    | preflight on glm:target.kubernetes node gpu-node-3"
    ] * 2
    assert problems[1].endswith("Fix: set glm:container.shmSize to 16g or more")


@pytest.mark.parametrize(
    ("fixture", "state", "said"),
    [
        ("pulling", COMING, "pod glm53-vllm-5f8b7c6d9-p9f3k: preflight waiting (PodInitializing)"),
        ("loading", COMING, "pod glm53-vllm-5f8b7c6d9-l1d8g: running, not Ready yet"),
        ("unschedulable", COMING, "pod glm53-vllm-5f8b7c6d9-u6s0w: not scheduled: Unschedulable 0/2 nodes"),
        ("ready", READY, "pod glm53-vllm-7d9c6b5f4-x2k8p ready"),
    ],
)
def test_a_pod_on_its_way_is_not_a_failure(fixture: str, state: str, said: str) -> None:
    verdict = pod_verdict(pod(fixture))
    assert (verdict.state, verdict.detail[: len(said)]) == (state, said)


def deployment(generation: int = 2, observed: int = 2, **status: Any) -> dict[str, Any]:
    """The serving Deployment as ``kubectl get deployment -o json`` prints it (apps/v1), 2 replicas."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "glm53-vllm", "namespace": "glm53-prod", "generation": generation},
        "spec": {"replicas": 2},
        "status": {"observedGeneration": observed, **status},
    }


def with_template(p: dict[str, Any], template: str) -> dict[str, Any]:
    return {**p, "metadata": {**p["metadata"], "annotations": {"glm53/template": template}}}


def test_a_roll_fails_on_its_new_pod_not_on_an_old_one() -> None:
    old_failed = with_template(pod("engine-bad-flag"), "0000000000000000")
    coming = deployment(replicas=3, updatedReplicas=1, availableReplicas=2, readyReplicas=2)
    assert roll_verdict(coming, [old_failed, pod("loading")], TEMPLATE).state == COMING
    failed = roll_verdict(coming, [pod("ready"), pod("engine-bad-flag")], TEMPLATE)
    assert (failed.state, failed.detail.split(":")[0]) == (FAILED, "pod glm53-vllm-5f8b7c6d9-q4wzt")


def test_a_roll_is_done_when_the_deployment_says_so() -> None:
    """``kubectl rollout status``'s rule: the generation observed, every replica updated and
    available, no old one left."""
    new = [with_template(pod("ready"), TEMPLATE)] * 2
    done = deployment(replicas=2, updatedReplicas=2, availableReplicas=2, readyReplicas=2)
    assert roll_verdict(done, new, TEMPLATE).state == READY
    for not_yet in (
        deployment(observed=1, replicas=2, updatedReplicas=2, availableReplicas=2),
        deployment(replicas=3, updatedReplicas=2, availableReplicas=2),  # an old pod still there
        deployment(replicas=2, updatedReplicas=2, availableReplicas=1),
    ):
        assert roll_verdict(not_yet, new, TEMPLATE).state == COMING


def test_a_roll_past_its_progress_deadline_fails_with_the_pods_state() -> None:
    stalled = deployment(
        replicas=2,
        updatedReplicas=1,
        availableReplicas=1,
        conditions=[
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": 'ReplicaSet "glm53-vllm-5f8b7c6d9" has timed out progressing.',
            }
        ],
    )
    verdict = roll_verdict(stalled, [pod("loading")], TEMPLATE)
    assert verdict.state == FAILED
    assert verdict.detail.startswith(
        'Deployment glm53-vllm: ProgressDeadlineExceeded: ReplicaSet "glm53-vllm-5f8b7c6d9" has timed out progressing.'
    )
    assert "pod glm53-vllm-5f8b7c6d9-l1d8g: running, not Ready yet" in verdict.detail


def test_the_previous_rolls_deadline_is_not_this_rolls() -> None:
    """On the cluster (2026-12-06): the restore after a failed roll failed at 0 s, on the failed
    roll's ProgressDeadlineExceeded, which the Deployment still carried because the controller had
    not yet seen the new template. Until it has (observedGeneration), the roll is coming."""
    stale = deployment(
        observed=1,
        replicas=2,
        updatedReplicas=1,
        availableReplicas=1,
        conditions=[
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": 'ReplicaSet "glm53-vllm-55ccf4697f" has timed out progressing.',
            }
        ],
    )
    assert roll_verdict(stale, [pod("loading")], TEMPLATE).state == COMING
    # Seen by the controller, but still naming the failed roll's ReplicaSet, not this one's pods'.
    seen = {**stale, "status": {**stale["status"], "observedGeneration": 2}}
    assert roll_verdict(seen, [with_template(pod("loading"), TEMPLATE)], TEMPLATE).state == COMING


def fake_kubectl(folder: Path, deployment_json: dict[str, Any], pods: list[dict[str, Any]]) -> Path:
    """A ``kubectl`` on PATH that answers ``get deployment`` and ``get pods`` with these objects,
    and writes each argv it got to ``calls``."""
    (folder / "deployment.json").write_text(json.dumps(deployment_json))
    (folder / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    script = folder / "kubectl"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {folder}/calls\n'
        'case " $* " in\n'
        f'  *" deployment "*) cat {folder}/deployment.json ;;\n'
        f'  *" pods "*) cat {folder}/pods.json ;;\n'
        "  *) echo unexpected >&2; exit 1 ;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def props(deadline: float = 60) -> dict[str, Any]:
    """The watch's inputs as the engine hands them back (numbers as floats)."""
    return {
        "kubeconfig": "/home/ops/.kube/prod",
        "context": "gpu-cluster",
        "namespace": "glm53-prod",
        "deployment": "glm53-vllm",
        "selector": "app.kubernetes.io/name=glm53-vllm,app.kubernetes.io/instance=prod",
        "template": TEMPLATE,
        "deadline_seconds": float(deadline),
        "version": "test",
    }


def test_the_watch_fails_up_within_seconds_quoting_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rolling = deployment(replicas=2, updatedReplicas=1, availableReplicas=1)
    folder = fake_kubectl(tmp_path, rolling, [pod("ready"), pod("engine-bad-flag")])
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    began = time.monotonic()
    with pytest.raises(OperatorError) as failed:
        watch_roll(props(deadline=600))
    assert time.monotonic() - began < 5
    assert "vllm serve: error: argument --max-num-seqs: invalid int value: 'many'" in str(failed.value)
    calls = (folder / "calls").read_text().splitlines()
    assert calls[:2] == [
        "--kubeconfig /home/ops/.kube/prod --context gpu-cluster --namespace glm53-prod "
        "get deployment glm53-vllm --output json",
        "--kubeconfig /home/ops/.kube/prod --context gpu-cluster --namespace glm53-prod "
        "get pods --selector app.kubernetes.io/name=glm53-vllm,app.kubernetes.io/instance=prod --output json",
    ]


def test_the_watch_returns_once_rolled_out_and_times_out_on_a_stall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = deployment(replicas=2, updatedReplicas=2, availableReplicas=2)
    folder = fake_kubectl(tmp_path, done, [with_template(pod("ready"), TEMPLATE)] * 2)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    assert watch_roll(props())["template"] == TEMPLATE
    fake_kubectl(tmp_path, deployment(replicas=2, updatedReplicas=1, availableReplicas=1), [pod("loading")])
    with pytest.raises(
        OperatorError,
        match=r"did not finish in 1 s .*: 0 of 2 new pods ready; pod glm53-vllm-5f8b7c6d9-l1d8g",
    ):
        watch_roll(props(deadline=1))


def test_a_cluster_kubectl_cannot_reach_is_named_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    refused = "Unable to connect to the server: dial tcp 10.0.0.1:6443: connect: connection refused"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f"#!/bin/sh\necho '{refused}' >&2\nexit 1\n")
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(OperatorError, match=f"did not finish in 1 s .*{refused}"):
        watch_roll(props(deadline=1))
    assert capsys.readouterr().err.count("[roll] kubectl failed, trying again: ") == 1


def test_without_kubectl_the_watch_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        OperatorError, match=r"watched with kubectl, which is not on PATH\. Fix: install kubectl"
    ):
        watch_roll(props())


def test_a_watch_without_a_deadline_or_a_namespace_is_refused_at_preview() -> None:
    checked = RollWatchProvider().check({}, {**props(), "namespace": "", "deadline_seconds": 0.0})
    assert [(f.property, f.reason) for f in checked.failures] == [
        ("namespace", "namespace must be set"),
        ("deadline_seconds", "a roll needs a positive deadline"),
    ]
    assert RollWatchProvider().check({}, props()).failures == []


@pytest.fixture(scope="module")
def local_on_k8s() -> Deployment:
    return run_program("local", {"glm:target": k8s_target(), **plain_http_accepted("local")})


def test_the_program_waits_for_the_roll_with_the_watch(local_on_k8s: Deployment) -> None:
    serving = unwrap(local_on_k8s.one(DEPLOYMENT, "-vllm").inputs)
    # pulumi-kubernetes' own wait would hold `up` until its timeout whatever the pods say.
    assert serving["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    template = serving["spec"]["template"]
    watch = unwrap(local_on_k8s.one("pulumi-python:dynamic:Resource", "-vllm-roll").inputs)
    assert watch["template"] == template["metadata"]["annotations"]["glm53/template"]
    assert (watch["namespace"], watch["deployment"]) == ("glm53-test", "glm53-vllm")
    assert watch["selector"] == "app.kubernetes.io/name=glm53-vllm,app.kubernetes.io/instance=local"
    assert watch["deadline_seconds"] == 2 * serving["spec"]["progressDeadlineSeconds"] + 120
    # The smoke gate waits for the watch (it is one of the serving pods' component's children).
    assert "local-vllm" in [str(d) for d in _depends_on(local_on_k8s, "local-smoke")]


def _depends_on(deployment: Deployment, name: str) -> list[Any]:
    return [getattr(d, "_name", d) for d in deployment.options[name].depends_on or []]  # type: ignore[union-attr]


def test_every_serving_container_leaves_its_last_lines_for_the_watch(local_on_k8s: Deployment) -> None:
    spec = unwrap(local_on_k8s.one(DEPLOYMENT, "-vllm").inputs)["spec"]["template"]["spec"]
    containers = spec["containers"] + spec.get("initContainers", [])
    assert {c["name"]: c.get("terminationMessagePolicy") for c in containers} == {
        c["name"]: "FallbackToLogsOnError" for c in containers
    }
    assert len(containers) >= 3


def test_going_back_to_the_template_of_a_failed_roll_is_watched_too() -> None:
    """After a failed roll the watch's state keeps the good template's digest; the config put back
    to it changes the Deployment (generation 7 → 8: Kubernetes counts every spec change) but not
    the digest. Without the generation, ``up`` ended at once while a new pod was still starting (the
    first run on the real cluster: the restore's ``up`` took 10.6 s, a pod's start 11.5 s)."""
    failed_roll_state = {**props(), "generation": 7.0}
    back = {**props(), "generation": 8.0}
    assert RollWatchProvider().diff("roll", failed_roll_state, back).changes
    assert not RollWatchProvider().diff("roll", back, {**back}).changes  # preview after up: nothing
