"""The gate's checks (``components/gate/``, through ``checks.run_gate``) against the vLLM-protocol
simulator and the real Nginx front, no Pulumi engine: one test per failure mode, asserting the step
the gate stops at and what its message says (fixtures in ``tests/gate/conftest.py``).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from components.config import build_stack_config
from components.gate.checks import GateFailure, run_gate
from components.gate.settings import ALL_SMOKE_STEPS
from tests.gate.support import KEY, gate_fails, needs_nginx, params

# ---- a passing gate ----------------------------------------------------------------------------


@needs_nginx
def test_full_gate_passes_through_the_front(sims, front) -> None:
    sim = sims()
    lines: list[str] = []
    results = run_gate(params(front(sim), sim), KEY, lines.append)

    assert results["steps_run"] == ALL_SMOKE_STEPS
    assert results["steps_skipped"] == {}
    assert set(results["latency_ms"]) == {"readiness", *ALL_SMOKE_STEPS}
    assert all(isinstance(v, float) and v >= 0 for v in results["latency_ms"].values())
    assert results["served_name"] == "glm-5.3-flash"
    assert results["max_model_len"] == 32768
    # The simulator's default pool is 4 x max_model_len in blocks of 16.
    assert results["kv_pool_tokens"] == 4 * 32768
    assert results["vllm_version"] == "0.33.0"
    assert results["vllm_version_source"] == f"{sim.url}/version"
    assert results["reasoning_field"] == "reasoning"
    assert results["stream_chunks"] >= 3
    assert 0 < results["pass_seconds"] < 10
    assert any(line.startswith("streaming: ok") for line in lines)


def test_reasoning_content_field_is_accepted(sims) -> None:
    """vLLM <= 0.11 puts reasoning in `reasoning_content`; the gate accepts either field."""
    sim = sims(VLLM_SIM_FAULT="reasoning-content")
    results = run_gate(params(f"{sim.url}/v1", sim, steps=["models", "arithmetic"]), KEY, lambda _: None)
    assert results["reasoning_field"] == "reasoning_content"


def test_without_metrics_url_kv_pool_is_skipped_with_a_reason(sims) -> None:
    sim = sims()
    results = run_gate(params(f"{sim.url}/v1", None, steps=["models", "kv_pool"]), KEY, lambda _: None)
    assert results["steps_run"] == ["models"]
    assert "no metrics_url" in results["steps_skipped"]["kv_pool"]
    assert results["steps_skipped"]["arithmetic"] == "not in glm:smoke.steps"
    assert results["kv_pool_tokens"] is None
    assert results["vllm_version"] is None
    assert "not served through the front" in results["vllm_version_source"]


# ---- readiness -----------------------------------------------------------------------------------


@needs_nginx
def test_waits_through_loading_and_passes_within_a_second_of_ready(sims, front) -> None:
    """Refused connections (503 at the front) mean "loading"; the gate notices readiness quickly."""
    sim = sims(wait=False, VLLM_SIM_LOADING_SECONDS="2")
    endpoint = front(sim)
    results = run_gate(params(endpoint, sim, steps=["models"], poll_seconds=1.0), KEY, lambda _: None)
    sim.wait_ready(0)
    assert sim.ready_at is not None
    passed_at = time.monotonic()
    assert results["ready_seconds"] >= 1.0  # it did wait through the load
    assert passed_at - sim.ready_at < 1.5


@needs_nginx
def test_readiness_is_seen_within_a_quarter_second_of_ready(sims, front) -> None:
    """With the default pollSeconds (1 s) the gate still polls fast enough to see readiness at once."""
    sim = sims(wait=False, VLLM_SIM_LOADING_SECONDS="2")
    endpoint = front(sim)
    seen: list[float] = []

    def progress(line: str) -> None:
        if line.startswith("readiness: ok"):
            seen.append(time.monotonic())

    run_gate(params(endpoint, sim, steps=["models"], poll_seconds=1.0), KEY, progress)
    sim.wait_ready(0)
    assert sim.ready_at is not None and seen
    # Polls are at most 0.25 s apart: the lag is below that plus one request through nginx.
    assert seen[0] - sim.ready_at < 0.45


@needs_nginx
def test_a_trickling_models_reply_cannot_hold_readiness_past_the_deadline(sims, front) -> None:
    """/v1/models sends one byte a second: each read is quick, the whole body never ends in time."""
    sim = sims(VLLM_SIM_FAULT="models-trickle")
    endpoint = front(sim)
    started = time.monotonic()
    failure = gate_fails(params(endpoint, sim, deadline_seconds=5))
    elapsed = time.monotonic() - started
    assert failure.step == "readiness"
    assert "not ready after 5 s" in failure.message
    assert "no complete answer within" in failure.message
    assert 4.9 < elapsed < 6.5  # the deadline, not the trickle: that would never end


def test_never_ready_fails_at_readiness_by_the_deadline(sims) -> None:
    sim = sims(wait=False, VLLM_SIM_NEVER_READY="1")
    started = time.monotonic()
    failure = gate_fails(params(f"{sim.url}/v1", sim, deadline_seconds=2))
    elapsed = time.monotonic() - started
    assert failure.step == "readiness"
    assert "not ready after 2 s" in failure.message
    assert "connection refused" in failure.message
    assert "glm:smoke.deadlineSeconds" in failure.message
    assert 1.9 < elapsed < 4


def test_a_503_stays_the_last_answer_when_the_final_poll_is_cut_by_the_deadline() -> None:
    """A front that answers 503, then stalls: the message keeps the 503 and names the stalled poll
    (under CI's load the final poll, cut short by the deadline, once replaced the 503 with a timeout)."""
    answered = threading.Event()

    class ThenStall(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if answered.is_set():
                time.sleep(3)
                return
            answered.set()
            body = b'{"message": "no upstream"}'
            self.send_response(503)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), ThenStall)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        failure = gate_fails(params(f"http://127.0.0.1:{server.server_port}/v1", deadline_seconds=1.5))
    finally:
        server.shutdown()
    assert failure.step == "readiness"
    assert "not ready after 2 s" in failure.message or "not ready after 1 s" in failure.message
    assert "HTTP 503" in failure.message, failure.message
    assert "(the last poll: no complete answer within" in failure.message, failure.message


def test_readiness_reports_progress(sims, monkeypatch) -> None:
    monkeypatch.setattr("components.gate.readiness.PROGRESS_EVERY_SECONDS", 0.5)
    sim = sims(wait=False, VLLM_SIM_NEVER_READY="1")
    lines: list[str] = []
    with pytest.raises(GateFailure):
        run_gate(params(f"{sim.url}/v1", sim, deadline_seconds=1.6), KEY, lines.append)
    waiting = [line for line in lines if "elapsed of" in line]
    assert len(waiting) >= 2
    assert "last: connection refused" in waiting[-1]


@needs_nginx
def test_a_rejected_key_fails_readiness_at_once(sims, front) -> None:
    sim = sims()
    started = time.monotonic()
    failure = gate_fails(params(front(sim), sim), key="sk-not-the-configured-key-000000")
    assert failure.step == "readiness"
    assert "refused the gate's API key" in failure.message
    assert "HTTP 401" in failure.message
    assert time.monotonic() - started < 2


# ---- one test per failure mode -------------------------------------------------------------------


def test_wrong_answer_fails_arithmetic(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="wrong-answer")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == "arithmetic"
    assert "expected content '221'" in failure.message
    assert "got '222'" in failure.message


def test_missing_tool_calls_fail_tool_call(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="no-tool-calls")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == "tool_call"
    assert "finish_reason=stop, 0 tool_calls" in failure.message
    assert "--tool-call-parser=glm47" in failure.message


def test_inline_reasoning_fails_arithmetic(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="inline-reasoning")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == "arithmetic"
    assert "inline" in failure.message
    assert "<think>" in failure.message
    assert "--reasoning-parser=glm45" in failure.message


def test_kv_pool_smaller_than_max_model_len_fails_with_the_levers(sims) -> None:
    sim = sims(VLLM_SIM_KV_POOL_TOKENS="8192")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == "kv_pool"
    message = failure.message
    assert "KV pool is 8,192 tokens (num_gpu_blocks 512 × block_size 16" in message
    assert "--max-model-len is 32,768" in message
    assert 'reason="capacity"' in message and "2,171 s" in message
    levers = [
        "--max-num-batched-tokens",
        "--gpu-memory-utilization",
        "--speculative-config",
        "--max-model-len",
    ]
    advice = message[message.index("Levers") :]
    assert [advice.index(lever) for lever in levers] == sorted(advice.index(lever) for lever in levers)
    assert "now 0.9" in message  # the serving container's --gpu-memory-utilization


def test_silent_server_fails_the_step_instead_of_hanging(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="silent")
    started = time.monotonic()
    failure = gate_fails(params(f"{sim.url}/v1", sim, request_timeout_seconds=1.5))
    assert failure.step == "arithmetic"
    assert "no complete answer within 1.5 s" in failure.message
    assert time.monotonic() - started < 5


def test_a_request_stuck_on_kv_capacity_is_named_in_the_timeout(sims) -> None:
    """The Ascend hang: HTTP accepted, the request waits for KV capacity forever."""
    sim = sims(VLLM_SIM_KV_POOL_TOKENS="512")  # smaller than prompt + max_tokens of the chat
    failure = gate_fails(params(f"{sim.url}/v1", sim, request_timeout_seconds=1.5))
    assert failure.step == "arithmetic"
    assert "no complete answer within 1.5 s" in failure.message
    assert "1 waiting for KV capacity" in failure.message
    assert "KV pool 512 tokens" in failure.message


def test_http_500_fails_arithmetic_with_the_body(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="http-500")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == "arithmetic"
    assert "answered 500" in failure.message
    assert "EngineCore encountered an issue" in failure.message


def test_wrong_served_name_fails_models(sims) -> None:
    sim = sims()
    config = build_stack_config({"hardware": "local", "model": {"servedName": "someone-else"}})
    failure = gate_fails(params(f"{sim.url}/v1", sim, config=config))
    assert failure.step == "models"
    assert "['glm-5.3-flash']" in failure.message and "'someone-else'" in failure.message


def test_an_open_endpoint_fails_front_auth(sims) -> None:
    """vLLM's own port answers without a key: pointing the gate at it must not pass front_auth."""
    sim = sims()
    failure = gate_fails(params(f"{sim.url}/v1", sim, steps=["front_auth"]))
    assert failure.step == "front_auth"
    assert "answered 200, expected 401" in failure.message


def test_a_buffering_front_fails_streaming(sims, buffering_front) -> None:
    sim = sims()
    failure = gate_fails(params(buffering_front(sim), sim, steps=["streaming"]))
    assert failure.step == "streaming"
    assert "proxy_buffering off" in failure.message
    assert "arrived bunched" in failure.message
    assert "in 1 burst(s)" in failure.message or "in 2 burst(s)" in failure.message, failure.message


@needs_nginx
def test_a_fast_engine_after_a_slow_first_token_streams_through_the_front(sims, front) -> None:
    """The real vLLM 0.25.0 on the H200 (tests/fixtures/h200-rehearsal-2026-12-02/gate.err): first
    chunk at 0.822 s, 32 chunks by 0.870 s: a spread of 6 %, yet streamed, a read per token. The
    simulator as fast: a slow prefill (~0.5 s to the first token), then a token every 1.5 ms."""
    sim = sims(VLLM_SIM_PREFILL_TOKENS_PER_S="40", VLLM_SIM_DECODE_TOKEN_SECONDS="0.0015")
    results = run_gate(params(front(sim), sim, steps=["streaming"]), KEY, lambda _line: None)
    assert results["stream_spread"] < 0.3, results  # what failed the gate on the H200
    assert results["stream_bursts"] >= results["stream_chunks"] // 4, results


@needs_nginx
def test_a_busy_reader_that_bunches_one_stream_is_not_a_buffering_front(sims, front, monkeypatch) -> None:
    """The gate's own process descheduled past the engine's whole decode (met under a load of 15:
    the fast-engine stream above came in 1 read): the chunks wait in the socket and arrive bunched,
    once. The first stream is read only after the engine has sent it all; the next one streams."""
    from components.gate import transport

    real, reads = transport.sse_events, []

    def descheduled_once(lines):  # type: ignore[no-untyped-def]
        reads.append(1)
        if len(reads) == 1:
            time.sleep(1.5)  # the whole reply (0.5 s prefill, 32 tokens at 1.5 ms) is sent meanwhile
        return real(lines)

    monkeypatch.setattr(transport, "sse_events", descheduled_once)
    sim = sims(VLLM_SIM_PREFILL_TOKENS_PER_S="40", VLLM_SIM_DECODE_TOKEN_SECONDS="0.0015")
    results = run_gate(params(front(sim), sim, steps=["streaming"]), KEY, lambda _line: None)
    assert results["stream_tries"] == 2, results
    assert results["stream_bursts"] >= results["stream_chunks"] // 4, results


def test_messages_carry_at_most_an_excerpt_of_the_body(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="http-500")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert len(failure.message) < 700


# ---- malformed replies: a GateFailure naming the step and what came back, never a crash -----------


@pytest.mark.parametrize(
    ("fault", "step", "says", "quotes"),
    [
        ("content-parts", "arithmetic", "message.content as a list, not a string", '"type": "text"'),
        ("message-string", "arithmetic", "choices[0].message is a string, not an object", '"message": "221"'),
        ("tool-call-string", "tool_call", "tool_calls[0] is a string, not an object", "get_weather"),
    ],
)
def test_a_malformed_chat_reply_fails_its_step(sims, fault, step, says, quotes) -> None:
    sim = sims(VLLM_SIM_FAULT=fault)
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == step
    assert says in failure.message
    assert quotes in failure.message


@needs_nginx
@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("stream-choices-string", "choices[0] is a str, not an object: 'x'"),
        ("stream-delta-string", "choices[0].delta is a str, not an object: 'abc'"),
        ("stream-bad-json", 'a data line that is not JSON: \'{"choices": [{"delta": \''),
    ],
)
def test_a_malformed_stream_through_the_front_fails_streaming(sims, front, fault, says) -> None:
    sim = sims(VLLM_SIM_FAULT=fault)
    failure = gate_fails(params(front(sim), sim, steps=["streaming"]))
    assert failure.step == "streaming"
    assert says in failure.message
    assert "(after 3 chunks)" in failure.message  # the simulator bends the 4th token's chunk
    assert "proxy_buffering" not in failure.message


@needs_nginx
def test_an_engine_error_mid_stream_is_reported_as_the_engines_error(sims, front) -> None:
    sim = sims(VLLM_SIM_FAULT="stream-error")
    failure = gate_fails(params(front(sim), sim, steps=["streaming"]))
    assert failure.step == "streaming"
    assert "the engine sent an error in the middle of the SSE stream" in failure.message
    assert (
        "after 3 chunks: EngineCore encountered an issue. (InternalServerError, code 500)" in failure.message
    )
    assert "docker logs" in failure.message
    assert "proxy_buffering" not in failure.message and "gzip" not in failure.message


@needs_nginx
def test_data_lines_without_the_space_are_read_through_the_front(sims, front) -> None:
    sim = sims(VLLM_SIM_FAULT="sse-no-space")
    results = run_gate(params(front(sim), sim, steps=["streaming"]), KEY, lambda _: None)
    assert results["stream_chunks"] >= 3
    assert results["stream_spread"] >= 0.3


def test_metrics_that_are_not_prometheus_text_fail_kv_pool(sims) -> None:
    sim = sims()
    p = params(f"{sim.url}/v1", sim, steps=["kv_pool"])
    p["metrics_url"] = f"{sim.url}/version"  # JSON, not Prometheus text
    failure = gate_fails(p)
    assert failure.step == "kv_pool"
    assert "is not Prometheus text" in failure.message
    assert '"version"' in failure.message
