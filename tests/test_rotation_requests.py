"""Ejection and return without the Docker socket (issue 23), in a real nginx front container; and
the request loop alone, run with ``sh`` here, against what a compromised probe can plant.

The front runs the production command (``rotation_requests.FRONT_COMMAND``: the request loop, then
nginx as PID 1) from the local nginx image, the requests directory bind-mounted as the probe's
volume would be. Two vLLM-protocol simulators play box1 and box2; the probe's own loop
(``run_forever`` with the ``Ejector``) asks each directly and through the front, while two clients
ask 13x17 through the front in a bounded loop. box2 is switched to wrong answers at runtime
(``PUT /sim/faults``), then healed. Expected values are the issue's targets, not the code's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from components.docker import rotation
from components.docker.nginx_reload import apply_release
from components.docker.rotation_requests import FRONT_COMMAND, FRONT_REQUESTS_DIR
from components.render.nginx_clients import render_key_map
from components.render.nginx_conf import API_KEYS_FILE, CONF_ROOT, ROTATION_DIR
from components.semantic_probe.ejection import Ejector
from components.semantic_probe.service import ProbeMetrics, run_forever
from components.template import shell_program
from components.verification.semantic_probe_spec import ProbeReplica, SemanticProbeSpec, probe_settings
from tests.front_container import DOCKER_HOST, IMAGE, LiveFront, docker_ready, free_port
from tests.front_rig import KEYS, SERVED, vllm_sim
from tests.gate.support import local_config
from tests.rotation_rig import KEY, ask

needs_docker = pytest.mark.skipif(docker_ready() is not None, reason=str(docker_ready()))

INTERVAL, K, M, TIMEOUT = 1.0, 2, 2, 2
PLANTED_KEY = "sk-planted-4f9a2c7e1b8d3f60a5c9e2b7d4f1a8c3"
RUNTIME = {"VLLM_SIM_RUNTIME_FAULTS": "1"}


@contextlib.contextmanager
def front_with_requests(sim_port: int, requests: Path) -> Iterator[LiveFront]:
    port = free_port()
    name = f"glm53-test-requests-{port}"
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--network", "host", "-v", f"{requests}:{FRONT_REQUESTS_DIR}",
         "--entrypoint", "/bin/sh", IMAGE, "-c", FRONT_COMMAND],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield LiveFront(name, port, f"127.0.0.1:{sim_port}")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def show(access: dict[str, object]) -> dict[str, str]:
    argv = rotation.container_exec_argv(DOCKER_HOST, None, str(access["container"]), rotation.SCRIPT, "show")
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return {p[0]: p[1] for p in (line.split() for line in out.splitlines()) if len(p) >= 2}


def wait_for(access: dict[str, object], replica: str, wanted: str, limit: float) -> float:
    started = time.monotonic()
    while show(access).get(replica) != wanted:
        assert time.monotonic() - started < limit, f"{replica} not {wanted} within {limit} s: {show(access)}"
        time.sleep(0.1)
    return time.monotonic()


def state_changed_at(access: dict[str, object], replica: str) -> float:
    """When the front's rotation last changed ``replica``'s state (its state file's mtime, on the
    same clock as ``time.time()``): the moment the rotation decided, not when a test's `docker exec`
    poll got round to seeing it (under CI's load one such poll took most of a second)."""
    state = f"{ROTATION_DIR}/{replica}.state"
    argv = rotation.docker_argv(
        DOCKER_HOST, None, "exec", str(access["container"]), "stat", "-c", "%.9Y", state
    )
    return float(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


def set_faults(port: int, *faults: str) -> None:
    httpx.put(f"http://127.0.0.1:{port}/sim/faults", json={"faults": list(faults)}).raise_for_status()


def settings_for(front: LiveFront, box1: int, box2: int):  # type: ignore[no-untyped-def]
    config = local_config()
    spec = SemanticProbeSpec(
        probe=config.semantic_probe.model_copy(
            update={"interval_seconds": INTERVAL, "failures_before_alert": K, "timeout_seconds": TIMEOUT}
        ),
        smoke=config.smoke,
        served_name=SERVED,
        max_model_len=32768,
        max_num_seqs=256,  # the simulator's default (tests.test_nginx_front.vllm_sim passes none)
        container=config.container,
    )
    replicas = (
        ProbeReplica("box1", f"127.0.0.1:{box1}", guarded=False),
        ProbeReplica("box2", f"127.0.0.1:{box2}", guarded=False),
    )
    base = probe_settings(spec, "unused", f"127.0.0.1:{box1}", replicas)
    return dataclasses.replace(base, endpoint=f"{front.base}/v1")


@needs_docker
def test_a_wrong_answering_replica_is_ejected_and_readmitted_by_the_probe(tmp_path: Path) -> None:
    requests = tmp_path / "requests"
    requests.mkdir()
    with (
        vllm_sim(RUNTIME) as box1,
        vllm_sim(RUNTIME) as box2,
        front_with_requests(box1, requests) as front,
    ):
        apply_release(front.props(KEYS))
        access = rotation.front_access(DOCKER_HOST, None, front.container)
        rotation.admit(access, "box1", f"127.0.0.1:{box1}")
        rotation.admit(access, "box2", f"127.0.0.1:{box2}")
        settings = settings_for(front, box1, box2)
        stop = threading.Event()
        metrics = ProbeMetrics(settings)
        ejector = Ejector(requests, failures_to_eject=K, passes_to_readmit=M, metrics=metrics)
        probe = threading.Thread(
            target=run_forever,
            args=(settings, KEY, metrics, stop),
            kwargs={"observe": ejector},
            daemon=True,
        )
        log: list[tuple[float, int, str]] = []  # (request start, status, answer)
        clients_stop = threading.Event()

        def client() -> None:
            while not clients_stop.is_set():
                started = time.monotonic()
                status, answer = ask(front.base)
                log.append((started, status, answer))

        clients = [threading.Thread(target=client, daemon=True) for _ in range(2)]
        probe.start()
        for c in clients:
            c.start()
        time.sleep(3)
        fault, fault_at = time.monotonic(), time.time()
        set_faults(box2, "wrong-answer")
        ejected = wait_for(access, "box2", "out", INTERVAL * K + 10)
        ejected_at = state_changed_at(access, "box2")
        assert metrics.ejected.labels("box2")._value.get() == 1  # the dashboard's rotation panel
        assert metrics.ejected.labels("box1")._value.get() == 0
        time.sleep(4)
        heal, heal_at = time.monotonic(), time.time()
        set_faults(box2)
        readmitted = wait_for(access, "box2", "in", INTERVAL * (M + 1) + 10)
        readmitted_at = state_changed_at(access, "box2")
        time.sleep(2)
        clients_stop.set()
        for c in clients:
            c.join(timeout=30)

        # Every replica wrong: the front answers a JSON 503 naming the failing check, never 222.
        set_faults(box1, "wrong-answer")
        set_faults(box2, "wrong-answer")
        wait_for(access, "box1", "out", INTERVAL * K + 10)
        wait_for(access, "box2", "out", INTERVAL * K + 10)
        status, body = ask(front.base)
        stop.set()
        probe.join(timeout=30)

        to_eject, to_readmit = ejected_at - fault_at, readmitted_at - heal_at
        wrong_after = [e for e in log if e[0] > ejected and e[2] != "221" and e[1] == 200]
        failed = [e for e in log if e[1] != 200]
        wrong_before = [e for e in log if fault <= e[0] <= ejected and e[2] != "221"]
        print(
            f"\nrequests {len(log)}; fault->ejection {to_eject:.2f} s (target {INTERVAL * K + 2:.0f} s; "
            f"seen by the test's poll {ejected - fault:.2f} s); "
            f"wrong answers between fault and ejection {len(wrong_before)}; wrong after ejection "
            f"{len(wrong_after)}; failed {len(failed)}; heal->readmission {to_readmit:.2f} s (poll "
            f"{readmitted - heal:.2f} s); "
            f"all failing: HTTP {status} {body[:160]}"
        )
        assert to_eject <= INTERVAL * K + 2 + TIMEOUT, to_eject  # + one request timeout: a run's length
        assert wrong_after == [], wrong_after[:3]
        assert failed == [], failed[:3]
        assert to_readmit <= INTERVAL * (M + 1) + 2 + TIMEOUT, to_readmit
        error = json.loads(body)["error"]
        assert status == 503 and error["code"] == "no_replica_in_rotation", body
        assert "semantic probe took box" in error["message"] and "arithmetic" in error["message"], body


@needs_docker
def test_the_request_loop_does_nothing_but_eject_and_readmit_known_replicas(tmp_path: Path) -> None:
    """What a compromised probe can write is refused: unknown names, a name that is not its file's,
    paths, other verbs, quote injection; and it cannot re-admit a replica a failed gate keeps out."""
    requests = tmp_path / "requests"
    requests.mkdir()
    with vllm_sim() as box1, front_with_requests(box1, requests) as front:
        apply_release(front.props(KEYS))
        access = rotation.front_access(DOCKER_HOST, None, front.container)
        rotation.admit(access, "box1", f"127.0.0.1:{box1}")
        rotation.keep_out(access, "box2", "the replica on host 'box2' failed its gate at step 'arithmetic'")
        assert (requests.stat().st_uid, oct(requests.stat().st_mode & 0o777)) == (65534, "0o700")

        def send(file: str, line: str) -> None:
            (requests / file).write_text(line + "\n")
            deadline = time.monotonic() + 10
            while (requests / file).exists():
                assert time.monotonic() < deadline, f"{file} not consumed"
                time.sleep(0.1)

        send("box2.req", "readmit box2")  # kept out by its gate, not by the probe
        later = int(time.time()) + 1  # failures that began after box1's admission
        send("box3.req", f"eject box3 {later} x")  # unknown to the rotation
        send("box1.req", f"eject box2 {later} x")  # a name that is not its file's
        send("box1.req", "eject box1 x")  # no time the failures began
        send("box1.req", f"eject box1 {later - 60} x")  # failures from before its admission (a roll)
        send("box1.req", "restart box1")  # another verb
        send("-rf.req", "eject -rf x")
        send("box1.req", "eject *")  # no globbing: the name is `*`, not the front's files
        time.sleep(1)
        assert show(access) == {"box1": "in", "box2": "out"}
        assert ask(front.base) == (200, "221")
        # Quotes and $ cannot reach nginx's config: the 503's text is filtered, nginx -t passes.
        send("box1.req", f'eject box1 {later} \'; return 200 "x"; $host')
        wait_for(access, "box1", "out", 10)
        status, body = ask(front.base)
        assert status == 503 and json.loads(body)["error"]["code"] == "no_replica_in_rotation", body
        assert "'" not in json.loads(body)["error"]["message"] and "$" not in body
        send("box1.req", "readmit box1")
        wait_for(access, "box1", "in", 10)
        assert ask(front.base) == (200, "221")
        logs = subprocess.run(["docker", "logs", front.container], capture_output=True, text=True).stderr
        # A refusal names the file, never what it asked for (issue 33: the log holds no request's text).
        assert "no replica named box3" in logs, logs[-2000:]
        assert "refused: box1.req names another replica or none" in logs, logs[-2000:]
        assert "refused: box1.req asks neither eject nor readmit" in logs, logs[-2000:]
        assert "refused a request file not named after a replica" in logs, logs[-2000:]  # -rf.req
        assert "refused: box1.req's eject has no time the failures began" in logs, logs[-2000:]
        assert f"not before the failures began ({later - 60}); not ejected" in logs, logs[-2000:]
        assert "restart" not in logs and "return 200" not in logs and "$host" not in logs, logs[-2000:]


def test_the_loop_never_follows_a_link_nor_logs_what_it_read(tmp_path: Path) -> None:
    """Issue 33 finding 1: the probe (uid 65534) owns the requests folder and plants links: to the
    front's key map (as rendered), to a readable file outside holding a request; the loop, as root,
    must neither apply nor log what is behind them, must not block on a FIFO, and must log nothing
    of a request's content. The rotation script is a stand-in that records its arguments."""
    requests, keys, outside = tmp_path / "requests", tmp_path / "api-keys.map", tmp_path / "outside"
    keys.write_text(render_key_map({"alice": PLANTED_KEY}))
    keys.chmod(0o600)
    outside.write_text("readmit gpu02\n")
    calls, errors = tmp_path / "calls", tmp_path / "loop.log"
    (tmp_path / "rotation.sh").write_text(f'echo "$*" >> {calls}\n')
    values = {"REQUESTS": str(requests), "SCRIPT": str(tmp_path / "rotation.sh")}
    with errors.open("w") as err:
        proc = subprocess.Popen(
            ["sh", "-c", shell_program("rotation-requests.sh", values, nginx=False)], stderr=err
        )
    try:
        deadline = time.monotonic() + 10
        while not requests.is_dir():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (requests / "gpu01.req").symlink_to(keys)  # the review's planted link
        (requests / "gpu02.req").symlink_to(outside)
        (requests / "gpu03.req").symlink_to(tmp_path / "nowhere")
        (requests / "gpu04.req").write_text("eject gpu04 \x1b]0;owned\x07\x1b[2J 1 sk-in-a-request\n")
        (requests / "sk-planted.req").write_text("readmit sk-planted\n")
        (requests / "\x1b[2J.req").write_text("readmit x\n")
        os.mkfifo(requests / "gpu09.req")
        while list(requests.iterdir()):
            assert time.monotonic() < deadline, (
                sorted(p.name for p in requests.iterdir()),
                errors.read_text(),
            )
            time.sleep(0.1)
        (requests / "gpu05.req").write_text("readmit gpu05\n")  # a request: still served after all that
        while not calls.exists() or "gpu05" not in calls.read_text():
            assert time.monotonic() < deadline, errors.read_text()
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    log = errors.read_text()
    print(log)
    assert calls.read_text().splitlines() == ["readmit sk-planted", "readmit gpu05"]
    assert keys.read_text() == render_key_map({"alice": PLANTED_KEY})  # rm removed the link only
    assert PLANTED_KEY not in log and "sk-in-a-request" not in log and "owned" not in log
    assert all(" " <= c <= "~" for c in log.replace("\n", "")), log
    assert log.count("refused: gpu0") == 5 and "refused a request file not named after a replica" in log


@needs_docker
def test_a_planted_link_to_the_key_map_puts_no_key_in_the_fronts_log(tmp_path: Path) -> None:
    """Issue 33 finding 1, in the real front container: the probe owns the requests folder and
    plants ``box1.req -> /etc/nginx/glm/current/api-keys.map``; the loop runs as root. It consumes
    the link without opening it, and ``docker logs`` of the front holds no key."""
    requests = tmp_path / "requests"
    requests.mkdir()
    with vllm_sim() as box1, front_with_requests(box1, requests) as front:
        apply_release(front.props(KEYS))
        access = rotation.front_access(DOCKER_HOST, None, front.container)
        rotation.admit(access, "box1", f"127.0.0.1:{box1}")
        planted = requests / "box1.req"
        planted.symlink_to(f"{CONF_ROOT}/current/{API_KEYS_FILE}")
        deadline = time.monotonic() + 10
        while planted.is_symlink():
            assert time.monotonic() < deadline, "the planted link was not consumed"
            time.sleep(0.1)
        logs = subprocess.run(["docker", "logs", front.container], capture_output=True, text=True)
        seen = logs.stdout + logs.stderr
        print(f"docker logs {front.container} (last 1000 characters):\n{seen[-1000:]}")
        assert [key for key in KEYS.values() if key in seen] == [], seen[-2000:]
        assert show(access) == {"box1": "in"}
        assert ask(front.base) == (200, "221")
