"""The simulator's wire format (SPEC §3) through httpx and the real openai client."""

from __future__ import annotations

import itertools
import json
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import MAX_MODEL_LEN, MODEL, MODEL_PATH, PLAIN_ARGS, WEATHER_TOOL, Sim

LOW = {"chat_template_kwargs": {"reasoning_effort": "low"}}


# --- simple endpoints -----------------------------------------------------------------


def test_health_ping_version(sim: Sim) -> None:
    health = sim.http.get("/health")
    assert health.status_code == 200 and health.content == b""
    assert sim.http.get("/ping").status_code == 200
    assert sim.http.get("/version").json() == {"version": "0.33.0"}


def test_models_lists_served_name_and_max_model_len(sim: Sim) -> None:
    body = sim.http.get("/v1/models").json()
    assert body["object"] == "list"
    (model,) = body["data"]
    assert model["id"] == MODEL
    assert model["object"] == "model"
    assert model["owned_by"] == "vllm"
    assert model["root"] == MODEL_PATH
    assert model["parent"] is None
    assert model["max_model_len"] == MAX_MODEL_LEN
    assert isinstance(model["created"], int)
    assert [m.id for m in sim.openai().models.list().data] == [MODEL]


def test_unknown_path_and_method(sim: Sim) -> None:
    assert sim.http.get("/v2/nothing").status_code == 404
    assert sim.http.get("/v1/chat/completions").status_code == 405


def test_tokenize_counts_what_chat_usage_counts(sim: Sim) -> None:
    messages = [{"role": "user", "content": "What is 13×17?"}]
    tok = sim.http.post("/tokenize", json={"model": MODEL, "messages": messages}).json()
    assert tok["max_model_len"] == MAX_MODEL_LEN
    assert tok["count"] == len(tok["tokens"]) > 0
    chat = sim.http.post("/v1/chat/completions", json={"model": MODEL, "messages": messages, **LOW}).json()
    assert chat["usage"]["prompt_tokens"] == tok["count"]

    plain = sim.http.post("/tokenize", json={"prompt": "Hello world", "return_token_strs": True}).json()
    assert plain["token_strs"] == ["Hell", "o", " worl", "d"]
    back = sim.http.post("/detokenize", json={"tokens": plain["tokens"]}).json()
    assert back == {"prompt": "Hello world"}


# --- chat: arithmetic and reasoning --------------------------------------------------


def test_13x17_with_reasoning_in_its_own_field_via_openai(sim: Sim) -> None:
    resp = sim.openai().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "13×17=? Answer with the number only."}],
        extra_body=LOW,
    )
    choice = resp.choices[0]
    assert choice.message.content.strip() == "221"
    assert choice.message.reasoning == "13*17=221"
    assert choice.finish_reason == "stop"
    assert resp.model == MODEL
    assert resp.id.startswith("chatcmpl-")
    assert resp.usage.completion_tokens_details.reasoning_tokens == 5
    assert resp.usage.completion_tokens == 6
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 6


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("What is 13*17?", "221"),
        ("Compute 13 x 17.", "221"),
        ("what is 12+30", "42"),
        ("What is 7 times 6?", "42"),
        ("(2+3)*4", "20"),
        ("10/4", "2.5"),
    ],
)
def test_arithmetic_over_http(sim: Sim, question: str, answer: str) -> None:
    resp = sim.chat(question, **LOW)
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == answer


def test_reasoning_effort_is_honoured(sim: Sim) -> None:
    def reasoning(**body: object) -> str | None:
        return sim.chat("13×17?", **body).json()["choices"][0]["message"]["reasoning"]

    low = reasoning(**LOW)
    high = reasoning(chat_template_kwargs={"reasoning_effort": "high"})
    top_level_max = reasoning(reasoning_effort="max")
    assert low == "13*17=221"
    assert "13*17=221" in high and len(high) > len(low)
    assert len(top_level_max) > len(high)
    off = sim.chat("13×17?", chat_template_kwargs={"enable_thinking": False}).json()
    assert off["choices"][0]["message"]["reasoning"] is None
    assert off["choices"][0]["message"]["content"] == "221"


def test_filler_text_has_max_tokens_tokens(sim: Sim) -> None:
    body = sim.chat("Tell me a story.", max_tokens=7).json()
    assert body["usage"]["completion_tokens"] == 7
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["choices"][0]["message"]["content"]
    default = sim.chat("Tell me a story.").json()
    assert default["usage"]["completion_tokens"] == 16
    assert default["choices"][0]["finish_reason"] == "stop"


def test_max_tokens_truncates_an_answer(sim: Sim) -> None:
    body = sim.chat("13×17?", max_tokens=2, **LOW).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 2


# --- tool calls --------------------------------------------------------------------------


def test_tool_call_via_openai(sim: Sim) -> None:
    client = sim.openai()
    messages = [{"role": "user", "content": "What's the weather in Paris right now?"}]
    resp = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[WEATHER_TOOL], tool_choice="auto"
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function"
    assert call.id.startswith("chatcmpl-tool-")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    # The agent loop's second turn: the tool result comes back, the model answers in text.
    follow_up = [
        *messages,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 18}'},
    ]
    final = client.chat.completions.create(model=MODEL, messages=follow_up, tools=[WEATHER_TOOL])
    assert final.choices[0].finish_reason == "stop"
    assert "18" in final.choices[0].message.content
    assert not final.choices[0].message.tool_calls


def test_tool_call_streamed_via_openai(sim: Sim) -> None:
    stream = sim.openai().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather for Berlin please"}],
        tools=[WEATHER_TOOL],
        stream=True,
    )
    name, args, finish = "", "", None
    for chunk in stream:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                name += call.function.name or ""
                args += call.function.arguments or ""
            finish = choice.finish_reason or finish
    assert name == "get_weather"
    assert json.loads(args) == {"city": "Berlin"}
    assert finish == "tool_calls"


def test_tool_choice_none_answers_text(sim: Sim) -> None:
    body = sim.chat("13×17?", tools=[WEATHER_TOOL], tool_choice="none", **LOW).json()
    assert body["choices"][0]["message"]["content"] == "221"
    assert body["choices"][0]["message"]["tool_calls"] == []


def test_auto_tool_choice_needs_the_flag(plain_sim: Sim) -> None:
    resp = plain_sim.chat("Weather in Paris?", tools=[WEATHER_TOOL])
    assert resp.status_code == 400
    assert "--enable-auto-tool-choice" in resp.json()["error"]["message"]
    required = plain_sim.chat("Weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required")
    assert required.status_code == 200
    assert required.json()["choices"][0]["finish_reason"] == "tool_calls"


def test_without_reasoning_parser_reasoning_stays_in_content(plain_sim: Sim) -> None:
    body = plain_sim.chat("13×17?", **LOW).json()
    message = body["choices"][0]["message"]
    assert message["content"] == "<think>13*17=221</think>221"
    assert message["reasoning"] is None
    assert body["usage"].get("completion_tokens_details") is None


# --- errors ------------------------------------------------------------------------------


def _error(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status
    return err


def test_over_max_model_len_is_a_fast_400(sim: Sim) -> None:
    start = time.monotonic()
    long_prompt = " ".join(f"w{i % 1000}" for i in range(MAX_MODEL_LEN + 10))
    err = _error(sim.chat(long_prompt), 400)
    assert "maximum context length" in err["message"]
    assert time.monotonic() - start < 1.0

    # vLLM >= 0.32 (the simulator's default version) clamps max_tokens to what the prompt leaves
    # and refuses only max_tokens beyond the whole context (0.33.0 renderers/params.py:273-284);
    # the older refusal of prompt + max_tokens is in tests/sim/test_sim_shapes.py.
    err = _error(sim.chat("hi", max_tokens=MAX_MODEL_LEN + 1), 400)
    assert "cannot be greater than max_model_len" in err["message"]
    with pytest.raises(openai.BadRequestError, match="cannot be greater than max_model_len"):
        sim.openai().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=MAX_MODEL_LEN + 1
        )


def test_wrong_model_is_404(sim: Sim) -> None:
    err = _error(sim.chat("hi", model="gpt-4o"), 404)
    assert err["message"] == "The model `gpt-4o` does not exist."
    with pytest.raises(openai.NotFoundError):
        sim.openai().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def test_thinking_budget_is_rejected(sim: Sim) -> None:
    err = _error(sim.chat("hi", thinking_budget=1024), 400)
    assert "thinking_budget" in err["message"]


def test_malformed_requests(sim: Sim) -> None:
    bad_json = sim.http.post(
        "/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    _error(bad_json, 400)
    _error(sim.http.post("/v1/chat/completions", json={"model": MODEL}), 400)
    _error(sim.chat("hi", max_tokens=0), 400)


# --- streaming ---------------------------------------------------------------------------


def test_sse_chunks_arrive_spread_over_time(sim: Sim) -> None:
    payload = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Write a poem."}],
        "max_tokens": 30,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    arrivals: list[tuple[float, str]] = []
    with sim.http.stream("POST", "/v1/chat/completions", json=payload) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line:
                arrivals.append((time.monotonic(), line))
    lines = [line for _, line in arrivals]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c["choices"][0]["delta"].get("content") for c in chunks[1:-2]]
    assert len(content) == 30 and all(content)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 30

    # 30 tokens at 10 ms each: the body must trickle in, not arrive in one lump at the end.
    times = [t for t, _ in arrivals]
    assert times[-1] - times[0] >= 0.2
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert sum(1 for g in gaps if g >= 0.005) >= 15


def test_streamed_reasoning_then_content_via_openai(sim: Sim) -> None:
    stream = sim.openai().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "13×17?"}],
        stream=True,
        extra_body=LOW,
    )
    reasoning, content, order = "", "", []
    for chunk in stream:
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            if extra.get("reasoning"):
                reasoning += extra["reasoning"]
                order.append("r")
            if choice.delta.content:
                content += choice.delta.content
                order.append("c")
    assert reasoning == "13*17=221"
    assert content == "221"
    assert order == sorted(order, reverse=True)  # all reasoning before any content


def test_legacy_completions(sim: Sim) -> None:
    body = sim.http.post("/v1/completions", json={"model": MODEL, "prompt": "12+30="}).json()
    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"].strip() == "42"


# --- metrics -----------------------------------------------------------------------------

CORE_TYPES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_waiting_by_reason": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:generation_tokens": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:request_success": "counter",
    "vllm:spec_decode_num_draft_tokens": "counter",
    "vllm:spec_decode_num_accepted_tokens": "counter",
    "vllm:cache_config_info": "gauge",
}


def test_metrics_parse_with_vllm_names_and_labels(sim: Sim) -> None:
    before = sim.metrics()
    sim.chat("Write a long essay.", max_tokens=50)
    text = sim.http.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, typ in CORE_TYPES.items():
        assert name in families, name
        assert families[name].type == typ, name
    assert "# TYPE vllm:generation_tokens_total counter" in text

    (info,) = families["vllm:cache_config_info"].samples
    assert info.value == 1.0
    assert "model_name" not in info.labels
    assert info.labels["block_size"] == "16"
    assert info.labels["num_gpu_blocks"] == str(4 * MAX_MODEL_LEN // 16)
    assert info.labels["cache_dtype"] == "auto"
    assert info.labels["gpu_memory_utilization"] == "0.95"
    assert info.labels["enable_prefix_caching"] == "True"

    core = {"engine": "0", "model_name": MODEL}
    for s in families["vllm:num_requests_running"].samples:
        assert s.labels == core
    reasons = {s.labels["reason"] for s in families["vllm:num_requests_waiting_by_reason"].samples}
    assert reasons == {"capacity", "deferred"}
    ttft = [s for s in families["vllm:time_to_first_token_seconds"].samples]
    assert {s.name.rsplit("_", 1)[-1] for s in ttft} >= {"bucket", "sum", "count"}

    after = sim.metrics()

    def delta(name: str, **labels: str) -> float:
        def pick(samples: dict) -> float:
            for got, value in samples.get(name, []):
                if all(got.get(k) == v for k, v in labels.items()):
                    return value
            return 0.0

        return pick(after) - pick(before)

    assert delta("vllm:generation_tokens_total") == 50
    assert delta("vllm:request_success_total", finished_reason="length") == 1
    assert delta("vllm:e2e_request_latency_seconds_count") == 1
    drafts = delta("vllm:spec_decode_num_draft_tokens_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and accepted / drafts == pytest.approx(0.7, abs=0.05)


def test_no_spec_decode_metrics_without_mtp(plain_sim: Sim) -> None:
    samples = plain_sim.metrics()
    assert not [name for name in samples if "spec_decode" in name]
    (info,) = [labels for labels, _ in samples["vllm:cache_config_info"]]
    assert info["enable_prefix_caching"] == "False"


def test_old_vllm_versions_change_the_wire(start_sim) -> None:
    old = start_sim(env={"VLLM_SIM_VERSION": "0.14.0"})
    assert old.http.get("/version").json() == {"version": "0.14.0"}
    body = old.chat("13×17?", **LOW).json()
    message = body["choices"][0]["message"]
    assert message["reasoning"] == message["reasoning_content"] == "13*17=221"
    assert body["usage"].get("completion_tokens_details") is None
    assert "vllm:num_requests_waiting_by_reason" not in old.metrics()


def test_api_key(start_sim) -> None:
    s = start_sim(args=[*PLAIN_ARGS, "--api-key", "sk-sim"])
    assert s.http.get("/v1/models").status_code == 401
    ok = s.http.get("/v1/models", headers={"authorization": "Bearer sk-sim"})
    assert ok.status_code == 200
    assert s.http.get("/health").status_code == 200
    assert s.http.get("/metrics").status_code == 200
