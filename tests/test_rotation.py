"""The front's rotation (components/docker/rotation.py, templates/rotation.sh) in a real nginx container.

The front runs the production command from the local nginx image on the host network (as in
tests/test_nginx_reload.py); two vLLM-protocol simulators on loopback ports play two replicas, one
of them answering 13x17 wrongly. Every change goes through the same ``docker exec`` path a
``pulumi up`` uses; what clients get is read back through the front.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from components.docker import rotation
from components.docker.nginx_reload import apply_release
from tests.front_container import DOCKER_HOST, IMAGE, LiveFront, docker_ready, live_front
from tests.front_rig import KEYS, SERVED, free_port, vllm_sim
from tests.rotation_rig import KEY, ask

pytestmark = pytest.mark.skipif(docker_ready() is not None, reason=str(docker_ready()))


def answers(base: str, n: int = 12) -> Counter[str]:
    got: Counter[str] = Counter()
    for _ in range(n):
        status, answer = ask(base)
        got[answer if status == 200 else f"HTTP {status}"] += 1
    return got


def test_only_admitted_replicas_answer_and_a_failed_one_is_named() -> None:
    with (
        vllm_sim() as good,
        vllm_sim({"VLLM_SIM_FAULT": "wrong-answer"}) as bad,
        live_front(good) as front,
    ):
        apply_release(front.props(KEYS))  # no replica admitted by hand: the rotation starts empty
        access = rotation.front_access(DOCKER_HOST, None, front.container)

        # Before any replica passed a gate, nothing is served: the generic JSON 503.
        status, body = ask(front.base)
        assert status == 503 and json.loads(body)["error"]["code"] == "upstream_unavailable", body

        rotation.admit(access, "box1", f"127.0.0.1:{good}")
        assert answers(front.base) == Counter({"221": 12})

        # The wrong-answering replica is never admitted: its failure keeps it out.
        rotation.keep_out(access, "box2", "the replica on host 'box2' failed its gate at step 'arithmetic'")
        assert answers(front.base) == Counter({"221": 12})

        # Admitted, both answer (round robin): the rotation, not the config, decides who serves.
        rotation.admit(access, "box2", f"127.0.0.1:{bad}")
        both = answers(front.base, 20)
        assert set(both) == {"221", "222"}, both

        # Drained, box2 gets no new request at once.
        rotation.drain(access, "box2", "being replaced", grace_seconds=10)
        assert answers(front.base, 20) == Counter({"221": 20})

        # The last replica out: the 503 names why, in OpenAI's error shape.
        rotation.keep_out(
            access, "box1", "the replica on host 'box1' failed its gate at step 'tool_call': no tool call"
        )
        status, body = ask(front.base)
        error = json.loads(body)["error"]
        assert status == 503 and error["code"] == "no_replica_in_rotation", body
        assert "box1" in error["message"] and "tool_call" in error["message"], error

        # A config release (a revoked key) keeps the rotation as it is.
        rotation.admit(access, "box1", f"127.0.0.1:{good}")
        apply_release(front.props({"alice": KEY}))
        assert answers(front.base) == Counter({"221": 12})
        shown = rotation.run(access, "show")
        assert shown  # one line per replica; the last is box2's

        # The front's status port serves the rotation and its history, in Prometheus' text format.
        status = front_status(front)
        assert status["glm_rotation_in"] == {("box1", None): 1.0, ("box2", None): 0.0}, status
        assert status["glm_rotation_events"] == {
            ("box1", "gate_passed"): 2.0,
            ("box1", "gate_failed"): 1.0,
            ("box2", "gate_failed"): 1.0,
            ("box2", "gate_passed"): 1.0,
            ("box2", "drained"): 1.0,
        }, status
        assert all(
            t > time.time() - 600 for t in status["glm_rotation_last_event_timestamp_seconds"].values()
        )

        assert rotation.forget(access, "box2", grace_seconds=5)
        assert "box2" not in rotation.run(access, "show")
        assert {host for host, _ in front_status(front)["glm_rotation_events"]} == {"box1"}


def front_status(front: LiveFront) -> dict[str, dict[tuple[str, str | None], float]]:
    """The front's status port, checked by the real ``promtool`` and parsed by the real client
    library: metric family -> (host, event) -> value."""
    resp = httpx.get(f"http://127.0.0.1:{front.status_port}/metrics", timeout=10)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain"), resp.text
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=resp.text, capture_output=True, text=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    families: dict[str, dict[tuple[str, str | None], float]] = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            families.setdefault(family.name, {})[(sample.labels["host"], sample.labels.get("event"))] = (
                sample.value
            )
    return families


def test_a_drain_waits_for_streams_in_flight_and_cuts_none() -> None:
    """Streams begun before a drain finish through the old workers; the drain returns after them."""
    with vllm_sim({"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.1"}) as sim, live_front(sim) as front:
        apply_release(front.props(KEYS))  # no replica admitted by hand: the rotation starts empty
        access = rotation.front_access(DOCKER_HOST, None, front.container)
        rotation.admit(access, "box1", f"127.0.0.1:{sim}")
        finished: list[bool] = []

        def stream() -> None:
            body = {
                "model": SERVED,
                "messages": [{"role": "user", "content": "Count."}],
                "max_tokens": 30,
                "stream": True,
            }
            with httpx.stream(
                "POST",
                f"{front.base}/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {KEY}"},
                timeout=60,
            ) as resp:
                finished.append(any(line.strip() == "data: [DONE]" for line in resp.iter_lines()))

        threads = [threading.Thread(target=stream) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.8)  # the streams are under way (30 tokens at 0.1 s)
        started = time.monotonic()
        done = rotation.drain(access, "box1", "being replaced", grace_seconds=20)
        waited = time.monotonic() - started
        for t in threads:
            t.join(timeout=30)
        assert finished == [True, True, True]
        assert done.startswith("drained: every request"), done
        assert 1.0 < waited < 20, waited  # it waited for the streams (~2 s left), not the grace
        # Nothing is in rotation now: a new request gets the 503 naming the drain.
        status, body = ask(front.base)
        assert status == 503 and "being replaced" in json.loads(body)["error"]["message"]


def test_draining_without_a_front_is_a_no_op() -> None:
    """The first deploy: the serving container is replaced before any front exists."""
    access = rotation.front_access(DOCKER_HOST, None, "glm53-test-no-such-front")
    assert rotation.drain(access, "box1", "x", grace_seconds=1) == "no front running: nothing to drain"


def test_an_exec_start_refused_by_a_front_that_just_stopped_is_no_front() -> None:
    """`pulumi destroy` deleted the front beside the replica: the drain's `docker exec` exited 1
    with the CLI's "unable to upgrade to tcp, received 500" (benchmarks/up_timeline.py met it on
    2026-12-03) and destroy failed. A front that is stopped routes nothing; a running front's
    refusal is still a refusal."""
    name = f"glm53-test-stopped-front-{free_port()}"
    subprocess.run(["docker", "run", "-d", "--name", name, "--entrypoint", "true", IMAGE], check=True,
                   capture_output=True)  # fmt: skip
    try:
        subprocess.run(["docker", "wait", name], check=True, capture_output=True)
        access = rotation.front_access(DOCKER_HOST, None, name)
        refused = rotation.RotationError(
            f"the front's rotation refused drain (exit 1): {rotation.EXEC_REFUSED_WHILE_STOPPING}", 1
        )
        assert rotation.front_absent(access, refused)
        a_real_refusal = rotation.RotationError(
            "the front's rotation refused drain (exit 1): nginx -t failed", 1
        )
        assert not rotation.front_absent(access, a_real_refusal)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def test_a_key_is_revoked_while_the_engine_is_down() -> None:
    """Issue 25: the front's config named vLLM by its Docker DNS name, so while a crash-looping
    engine had no name, `nginx -t` refused every front release (a leaked key could not be
    revoked). The release names no replica now; the rotation holds fixed addresses."""
    dead = free_port()  # nothing listens here: the engine is down
    with live_front(dead) as front:
        apply_release(front.props(KEYS))
        access = rotation.front_access(DOCKER_HOST, None, front.container)
        rotation.admit(access, "box1", f"127.0.0.1:{dead}")
        bob = {"Authorization": f"Bearer {KEYS['bob']}"}
        assert httpx.get(f"{front.base}/v1/models", headers=bob, timeout=10).status_code == 503
        apply_release(front.props({"alice": KEY}))  # bob's key revoked, the engine still down
        assert httpx.get(f"{front.base}/v1/models", headers=bob, timeout=10).status_code == 401
        alice = {"Authorization": f"Bearer {KEY}"}
        assert httpx.get(f"{front.base}/v1/models", headers=alice, timeout=10).status_code == 503
