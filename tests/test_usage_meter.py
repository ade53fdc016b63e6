"""The usage meter in the front's path, with the real ``nginx``, the real ``openai`` client and the
vLLM-protocol simulator: the counters per key name equal the ``usage`` the clients received."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from components.config import build_stack_config
from components.docker import rotation
from components.render.nginx_conf import ROTATION_DIR, STATUS_DIR, render_front_files
from components.render.nginx_meter import METRICS_PATH, MeterRoute
from components.render.prometheus_config import METER_JOB
from ops.usage import promtool_query, usage_rows, usage_table
from tests.engine import free_port
from tests.front_rig import nginx_argv, running, vllm_sim, wait_for_port
from tests.metered_front import metered_front, nginx_prefix

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

KEYS = {"alice": "sk-alice-1403f1510d19d5295321", "bob": "sk-bob-0d08fac0336e7974aa11"}
SERVED = "glm-5.3-flash"


def series(text: str, name: str, client: str, extra: str = "") -> float:
    """One sample of the meter's exposition (0 when absent)."""
    pattern = re.compile(
        rf'^{re.escape(name)}{{client="{re.escape(client)}"{re.escape(extra)}}} (\S+)$', re.M
    )
    found = pattern.search(text)
    return float(found[1]) if found else 0.0


@pytest.fixture(scope="module")
def front():
    config = build_stack_config({"hardware": "local", "front": {"usageMeter": {"fairShare": True}}})
    sim_env = {"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.002"}
    with metered_front(config, KEYS, sim_env=sim_env, queue_seconds=1) as running:
        yield running


def _chat(client, i: int, stream_usage: bool | None):
    """One chat: plain (``stream_usage`` None) or streamed, asking for usage or not. Returns the
    usage the client received (None: it received none) and the chunks of a stream."""
    messages = [{"role": "user", "content": f"Tell me about the number {i} " + "and more " * (i % 7)}]
    if stream_usage is None:
        answer = client.chat.completions.create(model=SERVED, messages=messages, max_tokens=5 + i % 11)
        return answer.usage.model_dump(), []
    options = {"stream_options": {"include_usage": True}} if stream_usage else {}
    chunks = list(
        client.chat.completions.create(
            model=SERVED, messages=messages, max_tokens=5 + i % 11, stream=True, **options
        )
    )
    usage = [c.usage for c in chunks if c.usage is not None]
    return (usage[-1].model_dump() if usage else None), chunks


def _counters(front, client: str) -> tuple[float, float, float]:
    text = front.meter_metrics()
    return (
        series(text, "glm_key_requests_total", client, ',status="200"'),
        series(text, "glm_key_prompt_tokens_total", client),
        series(text, "glm_key_completion_tokens_total", client),
    )


def test_counters_equal_the_usage_the_clients_received(front) -> None:
    """Mixed plain and streamed chats and completions from two keys: each key's counters are exactly
    the sums of the ``usage`` fields its client received, and no series names a key itself."""
    before = {name: _counters(front, name) for name in KEYS}
    received = {name: [0, 0, 0] for name in KEYS}
    clients = {name: front.client(key) for name, key in KEYS.items()}
    for i in range(30):
        name = "alice" if i % 3 else "bob"
        client = clients[name]
        if i % 5 == 4:
            completion = client.completions.create(model=SERVED, prompt=f"count to {i}", max_tokens=3 + i % 4)
            usage = completion.usage.model_dump()
        else:
            usage, _ = _chat(client, i, None if i % 2 else True)
        received[name][0] += 1
        received[name][1] += usage["prompt_tokens"]
        received[name][2] += usage["completion_tokens"]
    for name in KEYS:
        after = _counters(front, name)
        assert [a - b for a, b in zip(after, before[name], strict=True)] == received[name], name
    text = front.meter_metrics()
    assert all(key not in text for key in KEYS.values())


def test_each_active_key_is_shown_its_share_of_the_slots(front) -> None:
    """docs/front-and-alerts.md, "The fair share": each active key is sure of capacity x weight /
    the active keys' weights. Two keys of weight 1 that both asked lately: half each, as the
    exposition says it once a scrape."""
    for key in KEYS.values():
        front.client(key).chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    text = front.meter_metrics()
    capacity = float(re.search(r"^glm_fair_share_capacity (\S+)$", text, re.M)[1])  # type: ignore[index]
    assert capacity >= 2
    assert [series(text, "glm_key_share", name) for name in KEYS] == [capacity // 2] * 2, text
    assert [series(text, "glm_key_in_flight", name) for name in KEYS] == [0, 0]
    assert all(series(text, "glm_key_last_seen_timestamp_seconds", name) > time.time() - 60 for name in KEYS)


def test_a_stream_that_did_not_ask_for_usage_gets_none_and_is_counted(front) -> None:
    """The meter asks vLLM for the usage of every stream, and hands the usage chunk on only to a
    client that asked for it: what the client receives is what it asked for."""
    client = front.client(KEYS["bob"])
    asked, asked_chunks = _chat(client, 3, True)
    before = _counters(front, "bob")
    unasked, chunks = _chat(client, 3, False)
    after = _counters(front, "bob")
    assert unasked is None
    assert all(chunk.choices for chunk in chunks), "a chunk without choices (the usage chunk) arrived"
    assert len(chunks) == len(asked_chunks) - 1
    assert asked is not None
    assert (after[1] - before[1], after[2] - before[2]) == (
        asked["prompt_tokens"],
        asked["completion_tokens"],
    )


def test_continuous_usage_stats_reach_a_client_that_asked_for_them(front) -> None:
    client = front.client(KEYS["alice"])
    messages = [{"role": "user", "content": "Say something."}]
    options = {"include_usage": True, "continuous_usage_stats": True}
    chunks = list(
        client.chat.completions.create(
            model=SERVED, messages=messages, max_tokens=6, stream=True, stream_options=options
        )
    )
    assert all(chunk.usage is not None for chunk in chunks)
    assert chunks[-1].choices == []


ALICE_STREAM = {
    "model": SERVED,
    "messages": [{"role": "user", "content": "go"}],
    "max_tokens": 1500,
    "stream": True,
}
"""1500 tokens at the fixture's 2 ms each: a stream that holds its slot for 3 s."""


def _alice_beyond_her_share(front) -> tuple[httpx.Response, float]:
    """Capacity 8 (--max-num-seqs) and two keys, Bob active with one request at a time: Alice's
    streams take every slot but the one kept free for Bob (work-conserving: 7, not her share of 4).
    Returns her 8th request's answer, a short one that would take milliseconds if admitted at
    once, and the seconds it took."""
    bob = front.client(KEYS["bob"])
    bob.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    headers = {"Authorization": f"Bearer {KEYS['alice']}"}
    with httpx.Client(base_url=front.base, timeout=30) as http, contextlib.ExitStack() as held:
        for _ in range(7):
            response = held.enter_context(
                http.stream("POST", "/v1/chat/completions", json=ALICE_STREAM, headers=headers)
            )
            assert response.status_code == 200
        began = time.monotonic()
        short = {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
        eighth = http.post("/v1/chat/completions", json=short, headers=headers)
        took = time.monotonic() - began
        answer = bob.chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": "13*17"}], max_tokens=60
        )
        assert "221" in (answer.choices[0].message.content or "")
    return eighth, took


def test_a_key_beyond_what_is_free_gets_a_429_with_retry_after_and_the_other_key_is_served(front) -> None:
    """Her 8th request waits the front's 1 s for a slot (her streams hold theirs for 3 s) and is
    refused in OpenAI's shape before anything streamed; Bob's is answered."""
    refused, took = _alice_beyond_her_share(front)
    assert refused.status_code == 429, refused.text
    assert took >= 1.0
    assert refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and "fair share" in error["message"]
    assert "waited 1 s" in error["message"]
    assert series(front.meter_metrics(), "glm_key_fair_share_refused_total", "alice") >= 1


def test_a_request_beyond_the_share_waits_for_a_slot_within_the_queue_time() -> None:
    """The same, with the front's default wait (10 s): her 8th request waits until one of her
    streams ends (3 s) and is answered; nothing was refused."""
    config = build_stack_config({"hardware": "local", "front": {"usageMeter": {"fairShare": True}}})
    sim_env = {"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.002"}
    assert config.front.usage_meter.queue_seconds == 10
    with metered_front(config, KEYS, sim_env=sim_env) as waiting:
        answered, took = _alice_beyond_her_share(waiting)
        assert answered.status_code == 200, answered.text
        assert answered.json()["usage"]["completion_tokens"] > 0
        assert took >= 1.0, "it was admitted at once: nothing held it to the share"
        assert series(waiting.meter_metrics(), "glm_key_fair_share_refused_total", "alice") == 0


def test_make_status_table_reads_the_counters_from_a_real_prometheus(front, tmp_path: Path) -> None:
    """``make status``'s table comes from Prometheus (scraping the meter) through ``promtool``,
    as it does inside the stack's Prometheus container."""
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": METER_JOB,
                "metrics_path": METRICS_PATH,
                "static_configs": [{"targets": [f"127.0.0.1:{front.status_port}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    client = front.client(KEYS["alice"])
    for i in range(3):
        _chat(client, i, True)
    with running(argv, tmp_path / "prometheus.log"):
        query = promtool_query(["promtool"], f"http://127.0.0.1:{port}")
        text = front.meter_metrics()
        expected = {
            name: (
                sum(
                    float(v)
                    for v in re.findall(
                        rf'^glm_key_requests_total{{client="{name}",[^}}]*}} (\S+)$', text, re.M
                    )
                ),
                *_counters(front, name)[1:],
            )
            for name in KEYS
            if f'client="{name}"' in text
        }
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(RuntimeError):
                rows = usage_rows(query)
                got = {
                    n: (r.get("requests"), r.get("tokens in"), r.get("tokens out")) for n, r in rows.items()
                }
                if got == expected:
                    break
            assert time.monotonic() < deadline, f"Prometheus says {got}, the meter {expected}"
            time.sleep(0.5)
    table = usage_table(rows)
    assert table.splitlines()[0].split()[:5] == ["key", "requests", "errors", "tokens", "in"]
    alice = next(line for line in table.splitlines() if line.startswith("alice"))
    assert alice.split()[1] == f"{expected['alice'][0]:.0f}"
    assert "s ago" in alice


def test_the_meter_shares_the_slots_of_the_replicas_in_rotation() -> None:
    """A release of two replicas (maxNumSeqs 8): the meter shares 8 x the replicas the real rotation
    program lists as in. box2 failed its gate: 8 slots, not 16; box2 admitted: 16."""
    config = build_stack_config({"hardware": "local", "front": {"usageMeter": {"fairShare": True}}})
    directory = nginx_prefix()
    script = rotation.SCRIPT.replace(ROTATION_DIR, str(directory / "rotation"))
    script = script.replace(STATUS_DIR, str(directory / "status"))
    status_port, port = free_port(), free_port()

    def rotate(*args: str) -> None:  # nginx is not the container's PID 1 here: files only, no reload
        subprocess.run(["sh", "-c", script, "sh", *args], check=True, capture_output=True, timeout=30)

    def capacity_after_a_chat() -> float:
        httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            headers={"Authorization": f"Bearer {KEYS['alice']}"},
            timeout=30,
        ).raise_for_status()
        metrics = httpx.get(f"http://127.0.0.1:{status_port}{METRICS_PATH}", timeout=5).text
        return float(re.search(r"^glm_fair_share_capacity (\S+)$", metrics, re.M)[1])  # type: ignore[index]

    with vllm_sim() as sim_port, contextlib.ExitStack() as stack:
        rotate("admit", "box1", f"127.0.0.1:{sim_port}")
        rotate("admit", "box2", f"127.0.0.1:{sim_port}")
        rotate("fail", "box2", "{}")
        files = render_front_files(
            config.front, KEYS, listen=f"127.0.0.1:{port}", runtime_dir=str(directory),
            rotation_dir=str(directory / "rotation"), status_listen=f"127.0.0.1:{status_port}",
            meter=MeterRoute(8, 2, state_file=None),
        )  # fmt: skip
        for name, text in files.items():
            (directory / name).write_text(text)
        nginx = stack.enter_context(running(nginx_argv(directory), directory / "nginx.log"))
        wait_for_port(port, nginx)
        assert capacity_after_a_chat() == 8
        rotate("admit", "box2", f"127.0.0.1:{sim_port}")
        nginx.send_signal(signal.SIGHUP)  # the reload rotation.sh does in the front container
        deadline = time.monotonic() + 15
        while (capacity := capacity_after_a_chat()) != 16:
            assert time.monotonic() < deadline, f"the meter still shares {capacity} slots"
            time.sleep(0.2)
    shutil.rmtree(directory, ignore_errors=True)
