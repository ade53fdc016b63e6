"""Time and capacity: loading, SIGTERM, the KV pool hang, --max-num-seqs, HOL blocking, prefix cache."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import httpx
import pytest

from .conftest import FULL_ARGS, MAX_MODEL_LEN, MODEL, PLAIN_ARGS, Sim

CHAT = "/v1/chat/completions"


def unique_text(tag: str, words: int = 3000) -> str:
    """~``words`` tokens that no other test sends: the tag starts every word, so no earlier
    prompt shares even the first cache block (the Ascend article's capacity-probe lesson)."""
    return " ".join(f"{tag}{i % 1000}" for i in range(words))


def body(content: str, **extra: Any) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


def in_thread(fn, *args: Any) -> tuple[threading.Thread, dict]:
    result: dict = {}

    def run() -> None:
        start = result["started"] = time.monotonic()
        try:
            result["value"] = fn(*args)
        except Exception as exc:
            result["error"] = exc
        result["elapsed"] = time.monotonic() - start
        result["ended"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def timed_chat(s: Sim, content: str, **extra: Any) -> float:
    start = time.monotonic()
    resp = s.http.post(CHAT, json=body(content, **extra))
    assert resp.status_code == 200, resp.text
    return time.monotonic() - start


# --- loading and stopping -------------------------------------------------------------------


def test_connections_refused_while_loading_then_ready(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_LOADING_SECONDS": "0.6"}, wait=False)
    s.wait_for_log("loading weights")
    with pytest.raises(httpx.ConnectError):
        s.http.get("/health")
    waited = s.wait_ready()
    assert waited >= 0.3
    assert s.http.get("/health").status_code == 200
    assert s.http.get("/v1/models").json()["data"][0]["id"] == MODEL


def test_never_ready_then_sigterm(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_NEVER_READY": "1"}, wait=False)
    s.wait_for_log("never be bound")
    time.sleep(0.3)
    with pytest.raises(httpx.ConnectError):
        s.http.get("/health")
    start = time.monotonic()
    assert s.stop() == 0
    assert time.monotonic() - start < 2.0


def test_sigterm_mid_stream_exits_quickly(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.05"})
    payload = body("Write a very long story.", max_tokens=1000, stream=True)
    with s.http.stream("POST", CHAT, json=payload) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        start = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(5) == 0
        assert time.monotonic() - start < 2.0


def test_sigterm_with_shutdown_timeout_finishes_the_stream_and_refuses_new_connections(start_sim) -> None:
    """vLLM's --shutdown-timeout (SPEC §6): new requests refused, in-flight ones finish."""
    s = start_sim(
        args=[*FULL_ARGS, "--shutdown-timeout", "10"], env={"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.02"}
    )
    payload = body("Count to a hundred.", max_tokens=60, stream=True)
    with s.http.stream("POST", CHAT, json=payload) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        s.proc.send_signal(signal.SIGTERM)
        s.wait_for_log("draining")
        with pytest.raises(httpx.ConnectError):
            httpx.get(s.url("/health"), timeout=2)
        rest = list(lines)
    assert "data: [DONE]" in rest
    assert s.proc.wait(5) == 0


# --- the KV pool ------------------------------------------------------------------------------

POOL = 1024  # tokens: far below max_model_len, as on the Ascend box before tuning


def test_request_bigger_than_the_kv_pool_hangs_and_blocks_the_queue(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_KV_POOL_TOKENS": str(POOL)})
    (info,) = [labels for labels, _ in s.metrics()["vllm:cache_config_info"]]
    assert int(info["num_gpu_blocks"]) * int(info["block_size"]) == POOL < MAX_MODEL_LEN

    # prompt + max_tokens fits max_model_len (no 400) but not the pool: it waits forever.
    big_thread, big = in_thread(
        lambda: s.http.post(
            CHAT, json=body("Summarise.", max_tokens=2000), timeout=httpx.Timeout(5, read=1.5)
        )
    )
    s.wait_metric("vllm:num_requests_waiting_by_reason", 1, reason="capacity")
    assert s.metric("vllm:num_requests_running") == 0
    assert s.metric("vllm:num_requests_waiting") == 1
    assert s.metric("vllm:kv_cache_usage_perc") == 0.0

    # One such request poisons the queue: a 2-token request waits behind it (FCFS).
    small_thread, small = in_thread(lambda: s.http.post(CHAT, json=body("hi", max_tokens=2)))
    s.wait_metric("vllm:num_requests_waiting", 2)
    assert s.metric("vllm:num_requests_waiting_by_reason", reason="deferred") == 1
    time.sleep(0.3)
    assert "ended" not in small

    big_thread.join(5)
    small_thread.join(5)
    assert isinstance(big.get("error"), httpx.ReadTimeout)  # nothing came back, not even headers
    # The client gave up, the simulator aborted the request, and the queue moved on.
    assert small["value"].status_code == 200
    assert small["ended"] >= big["ended"] - 0.05
    s.wait_metric("vllm:num_requests_waiting", 0)
    assert s.metric("vllm:request_success_total", finished_reason="abort") >= 1


def test_streaming_hang_sends_200_headers_and_no_body(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_KV_POOL_TOKENS": str(POOL)})
    payload = body("Summarise.", max_tokens=2000, stream=True)
    with s.http.stream("POST", CHAT, json=payload, timeout=httpx.Timeout(5, read=0.8)) as r:
        assert r.status_code == 200  # what the Ascend team's access log showed
        s.wait_metric("vllm:num_requests_waiting_by_reason", 1, reason="capacity")
        with pytest.raises(httpx.ReadTimeout):
            next(r.iter_raw())
    s.wait_metric("vllm:num_requests_waiting", 0)  # aborted once the client went away
    assert '"POST /v1/chat/completions HTTP/1.1" 200 OK' in s.log()


def test_requests_that_fit_run_and_release_the_pool(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_KV_POOL_TOKENS": str(POOL), "VLLM_SIM_DECODE_TOKEN_SECONDS": "0"})
    for _ in range(3):
        assert s.http.post(CHAT, json=body("hi", max_tokens=900)).status_code == 200
    assert s.metric("vllm:kv_cache_usage_perc") == 0.0
    assert s.metric("vllm:request_success_total", finished_reason="length") == 3


def test_max_num_seqs_limits_running_requests(start_sim) -> None:
    s = start_sim(args=[*PLAIN_ARGS, "--max-num-seqs", "1"], env={"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.05"})
    first_thread, first = in_thread(lambda: s.http.post(CHAT, json=body("a", max_tokens=10)))
    s.wait_metric("vllm:num_requests_running", 1)
    second_thread, second = in_thread(lambda: s.http.post(CHAT, json=body("b", max_tokens=10)))
    s.wait_metric("vllm:num_requests_waiting", 1)
    assert s.metric("vllm:num_requests_running") == 1
    assert s.metric("vllm:num_requests_waiting_by_reason", reason="deferred") == 1
    assert s.metric("vllm:num_requests_waiting_by_reason", reason="capacity") == 0
    assert s.metric("vllm:kv_cache_usage_perc") > 0
    first_thread.join(5)
    second_thread.join(5)
    assert first["value"].status_code == second["value"].status_code == 200
    # Its own 10 tokens (0.5 s) decode only once the first's sequence is free: past the later of
    # its own start and the first's end, less what the first's reply took to reach its client
    # (up to 0.2 s on a loaded machine). Not after its start alone: how much of the first was
    # left by then depends on how soon this thread saw the first running.
    assert second["ended"] - max(second["started"], first["ended"]) >= 0.5 - 0.2


# --- performance model -----------------------------------------------------------------------


@pytest.mark.parametrize("hol", [True, False], ids=["hol-blocking", "chunked-prefill"])
def test_head_of_line_blocking(start_sim, hol: bool) -> None:
    rate = 3000.0
    env = {"VLLM_SIM_PREFILL_TOKENS_PER_S": str(rate), "VLLM_SIM_HOL_BLOCKING": "1" if hol else "0"}
    s = start_sim(args=PLAIN_ARGS, env=env)
    prompt = unique_text("h", 2000)
    n = s.http.post("/tokenize", json={"messages": body(prompt)["messages"]}).json()["count"]
    prefill = n / rate
    assert prefill > 0.6

    big_thread, big = in_thread(lambda: s.http.post(CHAT, json=body(prompt, max_tokens=1)))
    s.wait_metric("vllm:num_requests_running", 1)
    small_latency = timed_chat(s, "hi", max_tokens=2)
    big_thread.join(5)
    assert big["value"].status_code == 200
    assert big["elapsed"] >= prefill * 0.9
    if hol:
        assert small_latency >= 0.3  # stuck behind the big prefill
    else:
        assert small_latency < 0.2  # answered during the big prefill


def test_prefix_cache_makes_a_repeated_prompt_fast(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_PREFILL_TOKENS_PER_S": "5000"})
    prompt = unique_text("p", 2000)
    hits_before = s.metric("vllm:prefix_cache_hits_total")
    cold = timed_chat(s, prompt, max_tokens=1)
    warm = timed_chat(s, prompt, max_tokens=1)
    assert cold >= 0.38
    assert warm < cold / 3
    assert s.metric("vllm:prefix_cache_hits_total") - hits_before >= 1990
    # Unique text defeats the cache: what a capacity probe must send.
    assert timed_chat(s, "[0000001] " + prompt, max_tokens=1) >= 0.38


def test_without_prefix_caching_repeats_cost_the_same(start_sim) -> None:
    s = start_sim(args=PLAIN_ARGS, env={"VLLM_SIM_PREFILL_TOKENS_PER_S": "5000"})
    prompt = unique_text("q", 2000)
    n = s.http.post("/tokenize", json={"messages": body(prompt)["messages"]}).json()["count"]
    for _ in range(2):  # the second time costs the full prefill again
        assert timed_chat(s, prompt, max_tokens=1) >= n / 5000
    assert s.metric("vllm:prefix_cache_hits_total") == 0
