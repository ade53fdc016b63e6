"""A pod whose own check failed answers no inference, before the Service has dropped it everywhere.

Found on the one-node cluster (stop 45): a pod that began answering wrong went not-Ready, and two
seconds later the load loop still got one wrong answer of 156 through it (the Service's endpoints
reach kube-proxy's rules a moment after, and the front's open connections to the Service live
``KEEPALIVE_TIME_SECONDS``). The gate sidecar now leaves its verdict in a memory volume the guard
reads (components/kubernetes/readiness.py): here the program's rendered pod (under mocks) shows
both containers on one file, and the guard's and the front's releases, in the real ``nginx``
before a recording upstream, show what a client gets while the verdict stands.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPLICA_SCRAPE_TEST_KEY, REPLICA_TEST_KEY, TEST_API_KEYS, Deployment, run_program
from tests.front_rig import RecordingUpstream, recording_upstream
from tests.guard_rig import nginx, request
from tests.k8s_guarded import front_and_guard, named_secret
from tests.k8s_rendered import container, flag, k8s_target, pod_spec


@pytest.fixture(scope="module")
def local() -> Deployment:
    return run_program("local", {"glm:target": k8s_target()})


def verdict_file(deployment: Deployment) -> str:
    """Where the pod's readiness check leaves its verdict: its own command line's ``--verdict-file``."""
    command = container(deployment, "gate")["command"]
    return str(command[command.index("--verdict-file") + 1])


def mount_of(deployment: Deployment, name: str, path: str) -> dict[str, Any]:
    [mount] = [m for m in container(deployment, name).get("volumeMounts", []) if m["mountPath"] == path]
    return dict(mount)


@pytest.fixture(autouse=True)
def _fresh_recording() -> None:
    RecordingUpstream.seen.clear()


@pytest.fixture
def verdict() -> Iterator[Path]:
    """Where the test keeps the verdict: in a directory nginx's workers (another user) can read."""
    directory = Path(tempfile.mkdtemp(prefix="glm53-verdict-"))
    directory.chmod(0o755)
    yield directory / "failed"
    shutil.rmtree(directory, ignore_errors=True)


def test_the_check_writes_the_file_the_guard_reads_in_one_memory_volume(local: Deployment) -> None:
    path = verdict_file(local)
    directory = os.path.dirname(path)
    gate, guard = mount_of(local, "gate", directory), mount_of(local, "guard", directory)
    assert gate["name"] == guard["name"]
    assert not gate.get("readOnly") and guard["readOnly"] is True
    [volume] = [v for v in pod_spec(local)["volumes"] if v["name"] == gate["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"
    # The probe reads what the sidecar's checks leave there.
    assert path in container(local, "gate")["readinessProbe"]["exec"]["command"][-1]
    assert f"if (-f {path})" in named_secret(local, "glm53-vllm-guard")["nginx.conf"]
    assert "vllm" not in [
        c["name"] for c in pod_spec(local)["containers"] if directory in str(c.get("volumeMounts"))
    ]


def test_no_docker_guard_reads_a_verdict() -> None:
    """On Docker hosts the fleet's own rotation takes a replica out (components/docker/): the guard
    there has no file to look at."""
    deployment = run_program("local", {})
    for resource in deployment.resources:
        assert "glm53-readiness" not in str(resource.inputs)


def guard_release(deployment: Deployment, path: Path) -> dict[str, str]:
    """The guard's release for the real nginx in ``nginx()``: on a free port, before ``upstream``,
    its verdict at ``path``."""
    port = flag(container(deployment, "vllm")["args"], "--port")
    return {
        name: text.replace("listen 8080;", "listen 127.0.0.1:{port};")
        .replace(f"server 127.0.0.1:{port};", "server 127.0.0.1:{upstream};")
        .replace("/tmp", "{dir}")
        .replace(verdict_file(deployment), str(path))  # last: the test's path is under /tmp
        for name, text in named_secret(deployment, "glm53-vllm-guard").items()
    }


def test_while_the_verdict_stands_inference_is_closed_unanswered_and_metrics_still_read(
    local: Deployment, verdict: Path
) -> None:
    replica = {"Authorization": f"Bearer {REPLICA_TEST_KEY}"}
    scrape = {"Authorization": f"Bearer {REPLICA_SCRAPE_TEST_KEY}"}
    with recording_upstream() as upstream:
        files = {n: t.replace("{upstream}", str(upstream)) for n, t in guard_release(local, verdict).items()}
        with nginx(files) as (guard, _):
            verdict.write_text("smoke gate failed at step 'arithmetic'\n")
            for path in ("/v1/chat/completions", "/v1/completions"):
                # 444 closes the connection: a clean close, or a reset when the body is unread
                with pytest.raises(ConnectionResetError):  # RemoteDisconnected is one
                    request(guard, "POST", path, replica)
            assert request(guard, "GET", "/metrics", scrape)[0] == 200
            verdict.unlink()
            assert request(guard, "POST", "/v1/chat/completions", replica)[0] == 200
    assert [(m, p) for m, p, _ in RecordingUpstream.seen] == [
        ("GET", "/metrics"),
        ("POST", "/v1/chat/completions"),
    ]


def test_through_the_front_a_client_gets_a_503_never_the_pods_answer(
    local: Deployment, verdict: Path
) -> None:
    """The front retries a request the guard closed on a new connection (on the cluster: another
    pod); with none left to try, the client gets the front's own 503, and vLLM saw nothing."""
    verdict.write_text("smoke gate failed at step 'arithmetic'\n")
    key = {"Authorization": f"Bearer {TEST_API_KEYS['ci']}"}
    with front_and_guard(local, verdict_file=(verdict_file(local), str(verdict))) as front:
        status, body, _ = request(front, "POST", "/v1/chat/completions", key)
        assert status == 503, body
        # Why, as the Docker front's rotation says it (README: "names the failed gate"), not "starting or down".
        error = json.loads(body)["error"]
        assert error["code"] == "no_replica_in_rotation" and "passed its checks" in error["message"], body
        verdict.unlink()
        assert request(front, "POST", "/v1/chat/completions", key)[0] == 200
    assert [(m, p) for m, p, _ in RecordingUpstream.seen] == [("POST", "/v1/chat/completions")]


def test_the_check_keeps_its_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate's command line: a pass removes the file, a failure writes its message, a run that
    breaks writes that it broke."""
    from components.gate import __main__ as gate
    from components.gate.checks import GateFailure

    verdict = tmp_path / "failed"
    monkeypatch.setenv("GLM_GATE_KEY", "in-pod-no-key")
    argv = [
        "--endpoint",
        "http://127.0.0.1:9/v1",
        "--api-key-env",
        "GLM_GATE_KEY",
        "--verdict-file",
        str(verdict),
    ]

    def fails(*_: Any) -> Any:
        raise GateFailure("arithmetic", "expected 221, got 222")

    def breaks(*_: Any) -> Any:
        raise OSError("the pod's loopback went away")

    verdict.write_text("no check has passed yet\n")
    monkeypatch.setattr(gate, "run_gate", lambda *_: {})
    assert gate.main(argv) == 0 and not verdict.exists()
    monkeypatch.setattr(gate, "run_gate", fails)
    assert gate.main(argv) == 1
    assert "expected 221, got 222" in verdict.read_text()
    monkeypatch.setattr(gate, "run_gate", lambda *_: {})
    assert gate.main(argv) == 0 and not verdict.exists()
    monkeypatch.setattr(gate, "run_gate", breaks)
    with pytest.raises(OSError):
        gate.main(argv)
    assert "broke" in verdict.read_text()


def test_the_sidecar_checks_every_period_and_leaves_each_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--every``: "not passed yet" until the first run ends, then each run's verdict, the checked
    file touched as each ends, and only a changed verdict printed."""
    from components.gate import __main__ as gate

    verdict, checked = tmp_path / "failed", tmp_path / "checked"
    outcomes = iter(["", "", "expected 221, got 222", "", None])
    seen: list[tuple[bool, bool]] = []

    class Stop(Exception):
        pass

    def check(_progress: Any) -> tuple[str, None]:
        seen.append((verdict.exists(), checked.exists()))
        outcome = next(outcomes)
        if outcome is None:
            raise Stop
        gate.record_verdict(verdict, outcome)
        return outcome, None

    with pytest.raises(Stop):
        gate.check_every(0.01, check, verdict, checked)
    # Before the first run: the verdict stands, nothing checked; after it, each run's own.
    assert seen[0] == (True, False) and seen[1:] == [
        (False, True),
        (False, True),
        (True, True),
        (False, True),
    ]
    printed = capsys.readouterr().err.splitlines()
    assert printed == [
        "[smoke-gate] every check passed",
        "expected 221, got 222",
        "[smoke-gate] every check passed",
    ]

    monkeypatch.setenv("GLM_GATE_KEY", "in-pod-no-key")
    base = ["--endpoint", "http://127.0.0.1:9/v1", "--api-key-env", "GLM_GATE_KEY"]
    loops: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gate, "check_every", lambda *args: loops.append(args) or 0)
    every = ["--every", "5", "--verdict-file", str(verdict), "--checked-file", str(checked)]
    monkeypatch.setattr(gate, "run_gate", lambda *_: {})
    gate.main([*base, *every])
    assert [(s, v, c) for s, _, v, c in loops] == [(5.0, verdict, checked)]
    assert gate.main([*base, "--every", "5", "--verdict-file", str(verdict)]) == 2  # no --checked-file


def test_the_probe_reads_the_verdict_and_fails_a_stuck_loop(tmp_path: Path) -> None:
    """The readiness probe's own shell (``sh``) on the two files, as the kubelet runs it."""
    import subprocess
    import time

    from components.kubernetes.readiness import VERDICT_DIR, stale_after_seconds, verdict_probe

    period = 15
    argv = [a.replace(VERDICT_DIR, str(tmp_path)) for a in verdict_probe(period, "glm53-test")]
    verdict, checked = tmp_path / "failed", tmp_path / "checked"

    def probe() -> tuple[int, str]:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return done.returncode, (done.stdout + done.stderr).strip()

    verdict.write_text("no check has passed yet\n")
    assert probe() == (1, "no check has passed yet")
    verdict.write_text("arithmetic: expected 221, got 222. Look at: kubectl logs ...\n")
    checked.touch()
    assert probe() == (1, "arithmetic: expected 221, got 222. Look at: kubectl logs ...")
    verdict.unlink()
    assert probe() == (0, "")
    old = time.time() - stale_after_seconds(period) - 5
    os.utime(checked, (old, old))
    status, said = probe()
    assert status == 1 and "its loop is stuck" in said and "kubectl -n glm53-test logs" in said
    checked.unlink()
    assert probe() == (1, "no check has ended yet")
