"""What the engine counts when a request does not end normally: a client that hangs up
mid-stream, and requests vLLM refuses before they reach the engine (references: 0.25.0 unless
said; see :mod:`tests.sim.shapes`)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from .conftest import MAX_MODEL_LEN, MODEL, REASONING_ARGS, Sim
from .shapes import POEM, Counters, bad_request, chat_prompt_tokens, text_prompt_tokens


def _hang_up_after(sim: Sim, path: str, body: dict, events: int) -> int:
    """Send a streamed request on a raw socket, read ``events`` data events, then close the
    connection (a client that hangs up); the number of token events read."""
    raw = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", sim.port), timeout=5) as conn:
        conn.sendall(head.encode() + raw)
        seen = b""
        while seen.count(b"data: ") < events:
            seen += conn.recv(65536)
    return seen.count(b"data: ")


@pytest.mark.parametrize("n", [1, 2])
def test_a_client_that_hangs_up_is_counted_until_the_abort(start_sim, n: int) -> None:
    """The frontend aborts the request when the client leaves; the engine counted every token
    whose output arrived before (v1/metrics/stats.py:360-367), and drops what arrives after the
    abort uncounted (v1/engine/output_processor.py:606-611, 484-487): nothing twice."""
    s = start_sim(args=REASONING_ARGS, env={"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.02"})
    prompt = chat_prompt_tokens(s, POEM)
    counters = Counters(s)
    body = {"model": MODEL, "messages": [{"role": "user", "content": POEM}], "max_tokens": 500, "n": n}
    read = _hang_up_after(s, "/v1/chat/completions", {**body, "stream": True}, events=10)
    s.wait_metric("vllm:num_requests_running", 0)
    prompts, generated = counters.delta()
    assert prompts == n * prompt
    assert read - n <= generated < n * 500  # the roles' events carry no token
    time.sleep(0.3)
    assert counters.delta() == (prompts, generated)  # nothing counted after the abort


def test_a_client_that_hangs_up_before_the_first_token_costs_nothing(start_sim) -> None:
    """The prompt is counted with the request's first output (its prefill_stats ride on it:
    v1/core/sched/scheduler.py:1748, v1/metrics/stats.py:364-367): aborted while queued, nothing."""
    s = start_sim(
        args=[*REASONING_ARGS, "--max-num-seqs", "1"], env={"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.02"}
    )
    busy = {"model": MODEL, "prompt": POEM, "max_tokens": 100, "stream": True}
    with s.http.stream("POST", "/v1/completions", json=busy) as first:
        lines = first.iter_lines()  # held: a dropped iterator closes the connection
        next(lines)
        counters = Counters(s)
        queued = {"model": MODEL, "prompt": "queued " + POEM, "max_tokens": 5, "stream": True}
        raw = json.dumps(queued).encode()
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as conn:
            conn.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(raw)}\r\n\r\n".encode()
                + raw
            )
            s.wait_metric("vllm:num_requests_waiting", 1)
        s.wait_metric("vllm:num_requests_waiting", 0)
        assert counters.delta()[0] == 0  # the queued prompt never counted
    assert s.metric("vllm:prompt_tokens_total") == text_prompt_tokens(s, POEM)


REFUSED = [
    # n below 1, n > 1 with greedy sampling: SamplingParams' ValueErrors (sampling_params.py:
    # 506-510, 489-495, 623-625) -> 400 BadRequestError, param null (error_response.py:48-52).
    ({"n": 0}, "BadRequestError", None, "n must be at least 1, got 0."),
    ({"n": 3, "temperature": 0}, "BadRequestError", None, "n must be 1 when using greedy sampling, got 3."),
    # pydantic's own refusals: FastAPI's RequestValidationError (server_utils.py:488-524).
    ({"n": 2.5}, "Bad Request", "body.n", "int_from_float"),
    ({"stream": "maybe"}, "Bad Request", "body.stream", "bool_parsing"),
    (
        {"stream": False, "stream_options": {"include_usage": True}},
        "Bad Request",
        "stream_options",
        "stream=True",
    ),
    # max_tokens beyond the whole context (renderers/params.py:215-228; 0.33.0: 273-284).
    (
        {"max_tokens": MAX_MODEL_LEN + 1},
        "BadRequestError",
        "max_tokens",
        "cannot be greater than max_model_len",
    ),
]


@pytest.mark.parametrize(("extra", "kind", "param", "words"), REFUSED, ids=lambda v: repr(v)[:40])
def test_refused_requests_count_nothing(
    shapes_sim: Sim, extra: dict, kind: str, param: str | None, words: str
) -> None:
    counters = Counters(shapes_sim)
    for path, body in (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": POEM}]}),
        ("/v1/completions", {"prompt": POEM}),
    ):
        err = bad_request(shapes_sim.http.post(path, json={"model": MODEL, "max_tokens": 4, **body, **extra}))
        assert (err["type"], err["param"]) == (kind, param)
        assert words in err["message"]
    assert counters.delta() == (0, 0)


def test_a_prompt_beyond_the_context_is_refused_whole(shapes_sim: Sim) -> None:
    """vLLM 0.33.0: a prompt longer than max_model_len, whatever max_tokens (renderers/params.py:
    531-551); one prompt of a list refuses the whole request, before any runs."""
    long = " ".join(f"w{i}" for i in range(MAX_MODEL_LEN + 10))
    counters = Counters(shapes_sim)
    err = bad_request(shapes_sim.http.post("/v1/completions", json={"model": MODEL, "prompt": [POEM, long]}))
    assert (
        err["param"] == "input_tokens"
        and "exceeds this limit even without any output tokens" in err["message"]
    )
    assert f"at least {MAX_MODEL_LEN + 1} input tokens" in err["message"]  # the tokenizer stops there
    assert counters.delta() == (0, 0)


def test_max_tokens_is_clamped_to_the_context_left_on_0_33(start_sim) -> None:
    """vLLM >= 0.32 (0.33.0 renderers/params.py:225-236, get_max_tokens): prompt + max_tokens over
    the context is answered, with max_tokens cut to what the prompt leaves."""
    s = start_sim(args=REASONING_ARGS, env={"VLLM_SIM_DECODE_TOKEN_SECONDS": "0"})
    prompt = text_prompt_tokens(s, POEM)
    counters = Counters(s)
    body = {"model": MODEL, "prompt": POEM, "max_tokens": MAX_MODEL_LEN - 1}
    usage = s.http.post("/v1/completions", json=body).json()["usage"]
    assert usage["completion_tokens"] == MAX_MODEL_LEN - prompt
    assert counters.delta() == (prompt, MAX_MODEL_LEN - prompt)


def test_prompt_plus_max_tokens_over_the_context_is_refused_on_0_25(start_sim) -> None:
    """vLLM 0.25.0 (renderers/params.py:196-202, 428-450): the prompt may use only what max_tokens
    leaves; over that, 400 with the prompt's size and the total, nothing counted."""
    s = start_sim(
        args=REASONING_ARGS, env={"VLLM_SIM_VERSION": "0.25.0", "VLLM_SIM_DECODE_TOKEN_SECONDS": "0"}
    )
    prompt = chat_prompt_tokens(s, POEM)
    counters = Counters(s)
    err = bad_request(s.chat(POEM, max_tokens=MAX_MODEL_LEN - prompt + 1))
    assert (err["type"], err["param"]) == ("BadRequestError", "input_tokens")
    assert (
        f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, you requested "
        f"{MAX_MODEL_LEN - prompt + 1} output tokens and your prompt contains at least {prompt} input "
        f"tokens, for a total of at least {MAX_MODEL_LEN + 1} tokens."
    ) in err["message"]
    assert counters.delta() == (0, 0)
    fits = s.chat(POEM, max_tokens=MAX_MODEL_LEN - prompt).json()["usage"]  # exactly the context
    assert (fits["prompt_tokens"], fits["completion_tokens"]) == (prompt, MAX_MODEL_LEN - prompt)
