"""The usage meter in nginx against what the fourth security review and the issue's runs found in
the meter of 2cbc774 (a separate asyncio proxy with hand-written HTTP): each finding here, through
real nginx with the rendered config and the vLLM-protocol simulator (issue 46).

- a request weighs the sequences the engine runs (``n`` x its prompts), and one larger than the
  engine is refused at once, in OpenAI's shape;
- nothing a client sends reaches ``/metrics`` as a series, and the meter trusts no header;
- malformed framing is refused by nginx before anything reaches the engine;
- the front has no listener but the API's and the status port (the meter's return listener, which
  answered without a credential, is gone);
- the counters survive a restart of the front, graceful or killed;
- a worker killed under load (as an OOM kill would) fails no request that starts a second later,
  and gives back the slots its requests held.
"""

from __future__ import annotations

import re
import signal
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from components.config import build_stack_config
from tests.metered_front import MeteredFront, metered_front

KEYS = {"alice": "sk-alice-1403f1510d19d5295321", "bob": "sk-bob-0d08fac0336e7974aa11"}
SERVED = "glm-5.3-flash"
MAX_NUM_SEQS = 8


def series(text: str, name: str, client: str, extra: str = "") -> float:
    pattern = re.compile(
        rf'^{re.escape(name)}{{client="{re.escape(client)}"{re.escape(extra)}}} (\S+)$', re.M
    )
    found = pattern.search(text)
    return float(found[1]) if found else 0.0


def post(front: MeteredFront, key: str, route: str, body: dict, timeout: float = 30) -> httpx.Response:
    return httpx.post(
        f"{front.base}{route}", json=body, headers={"Authorization": f"Bearer {KEYS[key]}"}, timeout=timeout
    )


@pytest.fixture(scope="module")
def front() -> Iterator[MeteredFront]:
    config = build_stack_config({"hardware": "local"})
    with metered_front(config, KEYS, max_num_seqs=MAX_NUM_SEQS, queue_seconds=1) as running:
        yield running


# ---- fair by sequences -----------------------------------------------------------------------------


def test_a_request_weighs_n_times_its_prompts_while_it_runs(front: MeteredFront) -> None:
    """2cbc774 counted HTTP requests: 8 prompts x n 32 showed in_flight 1 of a capacity of 4. Two
    prompts x n 2 hold 4 of the 8 slots while they stream."""
    seen: list[float] = []
    body = {"model": SERVED, "prompt": ["one", "two"], "n": 2, "max_tokens": 60, "stream": True}
    with httpx.stream(
        "POST", f"{front.base}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEYS['bob']}"},
        timeout=30,
    ) as answer:  # fmt: skip
        assert answer.status_code == 200
        for line in answer.iter_lines():
            if line.startswith("data:") and not seen:
                seen.append(series(front.meter_metrics(), "glm_key_in_flight", "bob"))
    assert seen == [4.0]
    assert series(front.meter_metrics(), "glm_key_in_flight", "bob") == 0


def test_a_request_larger_than_the_engine_is_refused_at_once_naming_the_limit(front: MeteredFront) -> None:
    started = time.monotonic()
    answer = post(front, "alice", "/v1/completions", {"model": SERVED, "prompt": ["a"] * 8, "n": 32})
    assert time.monotonic() - started < 1.0, "it waited for a slot that can never free"
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "too_many_sequences" and error["type"] == "invalid_request_error"
    assert "256 sequences" in error["message"] and "at most 8" in error["message"]
    assert "glm:serving.maxNumSeqs" in error["message"]


def test_a_flood_body_of_millions_of_prompts_is_scanned_not_decoded_and_refused(front: MeteredFront) -> None:
    """The review's 20 MiB ``[[],[],...]``: 2cbc774 decoded it whole on the one loop (2.44 s, 536 MiB).
    Past the in-memory buffer the meter scans nginx's temporary file in slices: a prompt list of
    three million prompts is counted, not built, and refused before the engine sees it."""
    prompts = "[" + ",".join(["[]"] * 3_000_000) + "]"
    body = '{"model": "' + SERVED + '", "prompt": ' + prompts + ', "max_tokens": 1}'
    answer = httpx.post(
        f"{front.base}/v1/completions", content=body,
        headers={"Authorization": f"Bearer {KEYS['alice']}", "Content-Type": "application/json"}, timeout=60,
    )  # fmt: skip
    assert answer.status_code == 400, answer.text[:300]
    assert "more than 8 sequences" in answer.json()["error"]["message"]
    # The other key is served meanwhile and after.
    assert post(front, "bob", "/v1/chat/completions", {"model": SERVED, "messages": [
        {"role": "user", "content": "What is 13*17?"}], "max_tokens": 60}).json()["usage"]["completion_tokens"] > 0  # fmt: skip


# ---- nothing a client sends is trusted ----------------------------------------------------------------


def test_no_header_a_client_sends_names_a_key_or_reaches_metrics_as_a_series(front: MeteredFront) -> None:
    """2cbc774 took the key's name from X-Glm-Client and wrote it into /metrics unescaped: a name
    holding a newline injected a fake series. The meter reads only nginx's own map of the key."""
    forged = 'bob"} 999\nglm_key_completion_tokens_total{client="mallory'
    answer = httpx.post(
        f"{front.base}/v1/chat/completions",
        json={"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        headers={"Authorization": f"Bearer {KEYS['alice']}", "X-Glm-Client": forged.replace("\n", " "),
                 "X-Glm-Shares": "capacity=1 alice=0.001"},
        timeout=30,
    )  # fmt: skip
    assert answer.status_code == 200
    text = front.meter_metrics()
    assert "mallory" not in text, [line for line in text.splitlines() if "mallory" in line]
    assert not re.search(r"\} 999$", text, re.M)
    assert set(re.findall(r'client="([^"]*)"', text)) <= set(KEYS)
    for line in text.splitlines():
        assert line.startswith("#") or re.fullmatch(
            r'[a-z_]+(\{[a-z_]+="[^"\n]*"(,[a-z_]+="[^"\n]*")*\})? \S+', line
        )


def raw(front: MeteredFront, request: bytes) -> bytes:
    port = int(front.base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    return received


MALFORMED = {
    "a negative Content-Length": b"Content-Length: -20\r\n\r\n{}",
    "Content-Length and Transfer-Encoding": b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "two Content-Lengths": b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "a chunk size 0x2": b"Transfer-Encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n",
    "a bare LF that would inject Transfer-Encoding": b"X-A: a\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}",
}


@pytest.mark.parametrize("framing", list(MALFORMED))
def test_malformed_framing_is_refused_before_the_engine(front: MeteredFront, framing: str) -> None:
    before = httpx.get(f"{front.engine}/metrics", timeout=5).text.count("\n")
    engine_requests = _engine_requests(front)
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + KEYS["alice"].encode()
        + b"\r\nContent-Type: application/json\r\n"
    )
    answer = raw(front, head + MALFORMED[framing])
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert _engine_requests(front) == engine_requests
    assert before > 0


def _engine_requests(front: MeteredFront) -> float:
    text = httpx.get(f"{front.engine}/metrics", timeout=5).text
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M))


def test_the_front_listens_on_the_api_and_the_status_port_only(front: MeteredFront) -> None:
    """The meter's return listener (8081) answered without a credential and, on several hosts, added
    the replica key itself. There is none: nginx.conf listens on the API and the status port, whose
    only route the meter adds is its counters (no proxy to any replica)."""
    conf = (front.directory / "nginx.conf").read_text()
    listens = re.findall(r"^\s*listen (\S+);", conf, re.M)
    status = front.meter_metrics  # the status port serves the counters
    assert len(listens) == 2 and front.base.rsplit("//", 1)[1] in listens
    assert "X-Glm-Client" not in conf and "X-Glm-Shares" not in conf
    status_port = front.status_port
    assert httpx.post(f"http://127.0.0.1:{status_port}/metrics/usage", timeout=5).status_code == 405
    assert httpx.get(f"http://127.0.0.1:{status_port}/v1/models", timeout=5).status_code == 404
    assert status()


# ---- what a restart or a dead worker costs -----------------------------------------------------------


def test_the_counters_survive_a_restart_of_the_front_graceful_or_killed() -> None:
    config = build_stack_config({"hardware": "local"})
    with metered_front(config, KEYS, max_num_seqs=MAX_NUM_SEQS) as front:
        for _ in range(3):
            post(front, "alice", "/v1/chat/completions", {"model": SERVED, "messages": [
                {"role": "user", "content": "What is 13*17?"}], "max_tokens": 40}).raise_for_status()  # fmt: skip
        counted = series(front.meter_metrics(), "glm_key_completion_tokens_total", "alice")
        # The repeats found the prompt's first block in the engine's prefix cache.
        cached = series(front.meter_metrics(), "glm_key_cached_prompt_tokens_total", "alice")
        assert counted > 0 and cached > 0
        front.restart(signal.SIGQUIT)  # docker stop
        after = front.meter_metrics()
        assert series(after, "glm_key_completion_tokens_total", "alice") == counted
        assert series(after, "glm_key_cached_prompt_tokens_total", "alice") == cached
        assert series(after, "glm_key_requests_total", "alice", ',status="200"') == 3
        time.sleep(2.5)  # the counters reach their file every 2 s
        front.restart(signal.SIGKILL)  # an OOM kill of the container: master and workers at once
        assert series(front.meter_metrics(), "glm_key_completion_tokens_total", "alice") == counted
        assert series(front.meter_metrics(), "glm_key_cached_prompt_tokens_total", "alice") == cached


def test_a_worker_killed_under_load_fails_nothing_a_second_later_and_gives_back_its_slots() -> None:
    """The review killed 2cbc774's meter under 8 workers of load: 8 of 1,098 requests failed with a
    503 saying the model server was down, and every counter was gone. Here one nginx worker is
    SIGKILLed mid-load (the meter's state is in shared memory the master keeps): requests that
    start 1 s after it all succeed with the right answer, the cut ones' slots are given back, and
    the counters hold what was answered."""
    # nginx's own per-key rate (10 r/s) would refuse most of 8 workers' requests: off, as the review ran.
    config = build_stack_config({"hardware": "local", "front": {"rateLimit": {"enabled": False}}})
    sim_env = {"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.005"}
    with metered_front(config, KEYS, max_num_seqs=64, sim_env=sim_env) as front:
        results: list[tuple[float, bool, int]] = []
        stop = time.monotonic() + 8
        killed_at: list[float] = []

        def load() -> None:
            with httpx.Client(timeout=30) as client:
                while (started := time.monotonic()) < stop:
                    try:
                        answer = client.post(
                            f"{front.base}/v1/chat/completions",
                            json={"model": SERVED, "messages": [{"role": "user", "content": "What is 13*17?"}],
                                  "max_tokens": 60},
                            headers={"Authorization": f"Bearer {KEYS['alice']}"},
                        )  # fmt: skip
                        good = (
                            answer.status_code == 200
                            and "221" in answer.json()["choices"][0]["message"]["content"]
                        )
                        tokens = answer.json()["usage"]["completion_tokens"] if good else 0
                        results.append((started, good, tokens))
                    except httpx.HTTPError:
                        results.append((started, False, 0))

        threads = [threading.Thread(target=load) for _ in range(8)]
        for thread in threads:
            thread.start()
        time.sleep(3)
        victim = front.workers()[0]
        killed_at.append(time.monotonic())
        signal_worker(victim)
        for thread in threads:
            thread.join(timeout=60)
        late = [r for r in results if r[0] >= killed_at[0] + 1.0]
        assert len(late) > 20, f"only {len(late)} requests after the kill"
        assert all(good for _, good, _ in late), [r for r in late if not r[1]][:5]
        failed = [r for r in results if not r[1]]
        assert len(failed) <= 8, f"{len(failed)} failed: more than the killed worker held"
        deadline = time.monotonic() + 3  # the new worker gives them back as it starts
        while (
            series(text := front.meter_metrics(), "glm_key_in_flight", "alice")
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert series(text, "glm_key_in_flight", "alice") == 0, "the dead worker's slots were not given back"
        answered = sum(tokens for _, good, tokens in results if good)
        assert series(text, "glm_key_completion_tokens_total", "alice") >= answered


def signal_worker(pid: int) -> None:
    import os

    os.kill(pid, signal.SIGKILL)


def test_every_worker_starts_whole_however_many_start_at_once() -> None:
    """Found on the H200 run's harness: a worker's start-up reclaimed dead workers' slots under the
    meter's lock, whose wait (ngx.sleep) a start-up may not use; with 32 workers starting at once
    one in two or three starts lost a worker's start-up (and, for worker 0, the counters' file)."""
    config = build_stack_config({"hardware": "local"})
    with metered_front(config, KEYS, max_num_seqs=MAX_NUM_SEQS) as front:
        conf = front.directory / "nginx.conf"
        conf.write_text(
            re.sub(r"^worker_processes \d+;", "worker_processes 32;", conf.read_text(), flags=re.M)
        )
        for _ in range(4):
            front.restart(signal.SIGQUIT)
            time.sleep(0.5)
            log = (front.directory / "nginx.log.restarted").read_text()
            assert "init_worker_by_lua error" not in log, log[-2000:]
        assert post(front, "alice", "/v1/chat/completions", {"model": SERVED, "messages": [
            {"role": "user", "content": "hi"}], "max_tokens": 3}).status_code == 200  # fmt: skip


def _stream(client: httpx.Client, i: int, firsts: dict[int, float], statuses: list[int]) -> None:
    body = {
        "model": SERVED,
        "messages": [{"role": "user", "content": "poem"}],
        "max_tokens": 100,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {KEYS['alice']}"}
    with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as answer:
        statuses.append(answer.status_code)
        for line in answer.iter_lines():
            if line.startswith("data:") and i not in firsts:
                firsts[i] = time.monotonic()


def test_a_keys_waiting_streams_start_in_the_order_they_came_as_in_the_engines_queue() -> None:
    """Issue 46's goal "a stream that waits for a slot waits no longer than in vLLM's own queue":
    waiters that raced for a freed slot got it in random order (3 x maxNumSeqs streams: TTFT p99
    2.4x the engine's own queue). Now first come, first served within a key, and a burst after a
    pause longer than the queue time is not held behind a ticket of the last one."""
    config = build_stack_config({"hardware": "local", "front": {"rateLimit": {"enabled": False}}})
    sim_env = {"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.01"}
    with metered_front(config, KEYS, max_num_seqs=4, sim_env=sim_env, queue_seconds=3) as front:
        for _ in range(2):
            firsts: dict[int, float] = {}
            statuses: list[int] = []
            # Clients made beforehand and 0.1 s apart: the arrival order is i even on a busy CI
            # machine (a client made in its thread spent ~30 ms loading certificates, the old gap).
            # Each wave decodes 100 tokens at 10 ms, ~1 s: requests 4 to 11 are all waiting by then.
            clients = [httpx.Client(base_url=front.base, timeout=30) for _ in range(12)]
            threads = []
            for i, client in enumerate(clients):
                threads.append(threading.Thread(target=_stream, args=(client, i, firsts, statuses)))
                threads[-1].start()
                time.sleep(0.1)  # arrival order i
            for thread in threads:
                thread.join()
            for client in clients:
                client.close()
            assert statuses == [200] * 12, statuses
            order = sorted(firsts, key=firsts.__getitem__)
            waves = [order[w * 4 : w * 4 + 4] for w in range(3)]
            assert [sorted(wave) for wave in waves] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], order
            time.sleep(4.5)  # longer than the queue time: the next burst meets the queue's old head


def test_a_request_answered_by_an_error_page_gives_back_its_slot_and_is_counted() -> None:
    """The fleet e2e's "every replica wrong" phase: with no replica to reach, nginx answers the 503
    from an error_page's named location, an internal redirect that loses the meter's per-request
    state; the slots those requests held were never given back, and after the fleet healed the
    key waited for slots nobody held until its 429s. Now the slots come back and the 503s count."""
    config = build_stack_config({"hardware": "local", "front": {"rateLimit": {"enabled": False}}})
    with metered_front(config, KEYS, max_num_seqs=2, upstream="127.0.0.1:9", queue_seconds=1) as front:
        body = {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        statuses = [post(front, "alice", "/v1/chat/completions", body).status_code for _ in range(6)]
        assert statuses == [503] * 6, statuses
        text = front.meter_metrics()
        assert series(text, "glm_key_in_flight", "alice") == 0
        assert series(text, "glm_key_requests_total", "alice", ',status="503"') == 6
        assert series(text, "glm_key_fair_share_refused_total", "alice") == 0
