"""The usage meter's pure Lua (components/host/meter/meter_request.lua, meter_answer.lua), run by the
real nginx's LuaJIT: its ``init_by_lua`` runs a driver that feeds the modules cases Python wrote and
writes back what they said. The oracles are Python's ``json`` and pydantic's own
lax bool, which is what vLLM's request models apply to ``stream`` (issue 46: ``"stream": 1`` and
``"stream": "true"`` escaped 2cbc774's meter, which read only a literal true).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pydantic
import pytest

from tests.metered_front import run_in_nginx_lua

DRIVER = """
local cjson = require("cjson")
local request = require("meter_request")
local answer = require("meter_answer")
local cases = cjson.decode(io.open(IN):read("*a"))
local out = {}
for i, case in ipairs(cases.bodies) do
  local body = case.body
  local decoded = request.shape(cjson.decode(body), case.route)
  local scanner = request.Scanner(case.limit)
  local from = 1
  for _, size in ipairs(case.slices) do
    scanner:feed(body:sub(from, from + size - 1))
    from = from + size
  end
  scanner:feed(body:sub(from))
  local scanned = request.shape(scanner:fields(), case.route)
  local rewritten = decoded.stream and request.with_usage(body) or cjson.null
  out[i] = { decoded = decoded, scanned = scanned, rewritten = rewritten }
end
local streams = {}
for i, case in ipairs(cases.streams) do
  local stream = answer.Stream(case.shape, case.responses)
  local sent, from = {}, 1
  for _, size in ipairs(case.slices) do
    sent[#sent + 1] = stream:feed(case.text:sub(from, from + size - 1), false)
    from = from + size
  end
  sent[#sent + 1] = stream:feed(case.text:sub(from), true)
  streams[i] = { sent = table.concat(sent), prompt = stream.prompt, completion = stream.completion,
                 cached = stream.cached, finished = stream.finished, first_token = stream.first_token }
end
local usages = {}
for i, text in ipairs(cases.answers or {}) do
  usages[i] = answer.usage_of(text) or cjson.null
end
reply({ bodies = out, streams = streams, usages = usages })
"""


def run_lua(cases: dict[str, Any]) -> dict[str, Any]:
    """Run the driver over ``cases`` in nginx's own LuaJIT: init_by_lua runs it as the config loads,
    and it ends the master when it has written what it found."""
    said = run_in_nginx_lua(["meter_request", "meter_answer"], DRIVER, cases)
    assert isinstance(said, dict)
    return said


LAX_BOOL = pydantic.TypeAdapter(bool)


def vllm_reads(value: Any) -> bool | str | None:
    """What vLLM's request model makes of a ``stream`` value: pydantic's own lax bool."""
    if value is None:
        return None
    try:
        return LAX_BOOL.validate_python(value)
    except pydantic.ValidationError:
        return "invalid"


STREAM_VALUES = [
    True,
    False,
    1,
    0,
    "true",
    "True",
    "1",
    "yes",
    "on",
    "t",
    "y",
    "false",
    "no",
    "off",
    "0",
    2,
    "maybe",
    None,
]
TRICKY = ['a "quoted" }{ ][ , : string', "\\\\", "\\u00e9t\\u00e9 \u2603", "", '{"stream": true}']


def body_cases(rng: random.Random) -> list[dict[str, Any]]:
    cases = []
    for _ in range(200):
        body: dict[str, Any] = {"model": "glm-5.3-flash", "max_tokens": rng.randint(1, 4096)}
        route = rng.choice(["/v1/chat/completions", "/v1/completions"])
        keys = [("messages", [{"role": "user", "content": rng.choice(TRICKY) * rng.randint(1, 50)}])]
        stream = rng.choice(STREAM_VALUES)
        if stream is not None:
            keys.append(("stream", stream))
        if rng.random() < 0.5:
            keys.append(("n", rng.randint(1, 5)))
        if rng.random() < 0.4:
            keys.append(("stream_options", {"include_usage": rng.choice(STREAM_VALUES[:8])}))
        if route == "/v1/completions":
            prompt = rng.choice([
                "one prompt", [1, 2, 3], ["a", "b", "c", "d"], [[1, 2], [3]], [[]] * rng.randint(1, 40),
            ])  # fmt: skip
            keys.append(("prompt", prompt))
        rng.shuffle(keys)  # stream may follow a long prompt, as JSON allows
        body.update(keys)
        text = json.dumps(body, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
        slices = [rng.randint(1, 40) for _ in range(rng.randint(0, 30))]
        cases.append({"body": text, "route": route, "slices": slices, "expected": body})
    return cases


def expected_weight(body: dict[str, Any], route: str) -> int:
    """vLLM runs each prompt of a list (strings, or token-id lists) ``n`` times; a string or one
    token-id list is one prompt (vllm/entrypoints/openai: the completion request's prompt forms)."""
    n = body.get("n", 1)
    prompt = body.get("prompt")
    prompts = 1
    if route == "/v1/completions" and isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        prompts = len(prompt)
    return n * prompts


def test_the_meter_reads_stream_n_and_prompts_as_vllm_does_whole_or_sliced() -> None:
    cases = body_cases(random.Random(46))
    said = run_lua({"bodies": [{k: c[k] for k in ("body", "route", "slices")} for c in cases], "streams": []})
    assert len(said["bodies"]) == len(cases)
    for case, result in zip(cases, said["bodies"], strict=True):
        body, route = case["expected"], case["route"]
        streams = vllm_reads(body.get("stream")) is True
        for how in ("decoded", "scanned"):
            shape = result[how]
            assert shape["stream"] is streams, (how, body.get("stream"), case["body"][:200])
            assert shape["weight"] == expected_weight(body, route), (how, case["body"][:200])
        text = sum(len(m["content"].encode()) for m in body.get("messages", []))
        if route == "/v1/chat/completions":  # the prompt's text, and the template's at most 16 a message
            assert result["decoded"]["prompt_bound"] == text + 16 * (len(body["messages"]) + 1)
        if streams:
            sent = json.loads(result["rewritten"])  # Python keeps the last of duplicate keys, as vLLM
            assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
            assert {k: v for k, v in sent.items() if k != "stream_options"} == {
                k: v for k, v in body.items() if k != "stream_options"
            }


def test_a_body_that_is_no_object_is_invalid_and_weighs_one_slot() -> None:
    bodies = ["[[],[],[]]", "not json", '"stream"', "{"]
    cases = [{"body": b, "route": "/v1/completions", "slices": [1, 2, 3]} for b in bodies]
    said = run_lua(
        {"bodies": [c for c in cases if c["body"] != "not json" and c["body"] != "{"], "streams": []}
    )
    for result in said["bodies"]:
        assert result["scanned"]["weight"] == 1 and result["scanned"].get("invalid") is True


def test_past_the_engines_slots_the_scanner_stops_counting_prompts_but_not_token_ids() -> None:
    """A prompt list longer than the engine's slots is refused whatever follows: the scanner stops
    there (a 20 MiB list costs what its first prompts cost). One prompt of many token ids is one
    prompt: it reads on, and finds ``stream`` after it."""
    many = json.dumps({"prompt": [f"p{i}" for i in range(100)], "stream": True})
    ids = json.dumps({"prompt": list(range(3000)), "n": 2, "stream": True})
    cases = [{"body": b, "route": "/v1/completions", "slices": [5] * 40, "limit": 8} for b in (many, ids)]
    refused, long_prompt = run_lua({"bodies": cases, "streams": []})["bodies"]
    assert refused["scanned"]["more"] is True and refused["scanned"]["weight"] > 8
    assert refused["decoded"]["weight"] == 100  # cjson, for a body in memory, counts them all
    decoded = {k: v for k, v in long_prompt["decoded"].items() if k != "prompt_bound"}
    assert long_prompt["scanned"] == decoded  # the scanner keeps no prompt text: no bound from it
    assert long_prompt["scanned"]["weight"] == 2 and long_prompt["scanned"]["stream"] is True


FORMS = {"compact": ((",", ":"), "\n\n"), "spaced": ((", ", ": "), "\n\n"), "crlf": ((",", ":"), "\r\n\r\n")}
"""How a stream may be written: vLLM's compact JSON and "\\n\\n" (the meter's plain searches), and
what the meter also reads, by its patterns: JSON with spaces, events ended by "\\r\\n\\r\\n"."""


def sse(*events: dict[str, Any], form: str = "compact") -> str:
    separators, end = FORMS[form]
    return (
        "".join(f"data: {json.dumps(e, separators=separators)}{end}" for e in events) + f"data: [DONE]{end}"
    )


def chunk(index: int, content: str, usage: dict[str, int] | None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": index, "delta": {"content": content}, "logprobs": None, "finish_reason": None}],
    }  # fmt: skip
    if usage is not None:
        event["usage"] = usage
    return event


def continuous_stream(
    n: int, tokens: int, prompt: int, form: str = "compact"
) -> tuple[str, list[dict[str, Any]]]:
    """What vLLM sends with include_usage and continuous_usage_stats (serving_chat.py): each choice's
    own count on its chunks, then one chunk of totals with no choices."""
    events = []
    for step in range(1, tokens + 1):
        for index in range(n):
            usage = {"prompt_tokens": prompt, "total_tokens": prompt + step, "completion_tokens": step}
            events.append(chunk(index, f"t{step}", usage))
    final = {"prompt_tokens": prompt, "total_tokens": prompt + n * tokens, "completion_tokens": n * tokens}
    events.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [], "usage": final})  # fmt: skip
    return sse(*events, form=form), events


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("asked", ["nothing", "include_usage", "continuous"])
def test_a_client_gets_exactly_the_usage_it_asked_for_and_the_meter_every_token(
    asked: str, form: str
) -> None:
    text, events = continuous_stream(n=3, tokens=5, prompt=11, form=form)
    end = FORMS[form][1]
    shape = {"asked_usage": asked != "nothing", "asked_continuous": asked == "continuous", "n": 3}
    rng = random.Random(asked)
    by_event = [len(event) + len(end) for event in text.split(end)[:-2]]  # as the engine writes them
    cases = [
        {"text": text, "shape": shape, "responses": False, "slices": slices}
        for slices in ([rng.randint(1, 90) for _ in range(60)], by_event)
    ]
    for result in run_lua({"bodies": [], "streams": cases})["streams"]:
        received = [json.loads(line[6:]) for line in result["sent"].split(end) if line.startswith("data: {")]
        with_usage = [e for e in received if "usage" in e]
        if asked == "nothing":
            assert with_usage == [] and len(received) == len(events) - 1
        elif asked == "include_usage":
            assert with_usage == [events[-1]] and len(received) == len(events)
        else:
            assert received == events
        for got, sent in zip(received, events, strict=False):  # the rest of each event untouched
            assert {k: v for k, v in got.items() if k != "usage"} == {
                k: v for k, v in sent.items() if k != "usage"
            }
        assert result["sent"].endswith(f"data: [DONE]{end}") and result["finished"] is True
        assert (result["prompt"], result["completion"]) == (11, 15)


def test_a_stream_cut_short_is_charged_what_it_was_sent_per_choice() -> None:
    """A client that leaves after 4 steps of 3 choices: 12 tokens made and sent, the prompt once
    per prompt (the meter multiplies by n, as the engine counts)."""
    text, _ = continuous_stream(n=3, tokens=9, prompt=7)
    cut = "".join(text.split("\n\n")[i] + "\n\n" for i in range(12))
    case = {"text": cut, "shape": {"asked_usage": False, "asked_continuous": False, "n": 3}, "responses": False,
            "slices": [50] * 30}  # fmt: skip
    [result] = run_lua({"bodies": [], "streams": [case]})["streams"]
    assert (result["prompt"], result["completion"], result["finished"]) == (7, 12, False)


def test_a_real_vllm_0_25_stream_passes_through_unchanged() -> None:
    """Recorded from vLLM 0.25.0 on the H200 (no usage asked, none sent): byte for byte."""
    text = (Path(__file__).parent / "fixtures" / "vllm-0.25.0-h200" / "chat-stream.sse").read_text()
    case = {"text": text, "shape": {"asked_usage": False, "asked_continuous": False, "n": 1}, "responses": False,
            "slices": [7, 300, 1, 1, 1000]}  # fmt: skip
    [result] = run_lua({"bodies": [], "streams": [case]})["streams"]
    assert result["sent"] == text and result["first_token"] is True and result["finished"] is True


def with_cached(events: list[dict[str, Any]], cached: int) -> list[dict[str, Any]]:
    """The stream as vLLM sends it with --enable-prompt-tokens-details and a prefix-cache hit: the
    final usage event alone has the details (continuous usage chunks do not)."""
    final = dict(
        events[-1], usage={**events[-1]["usage"], "prompt_tokens_details": {"cached_tokens": cached}}
    )
    return [*events[:-1], final]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("asked", ["nothing", "include_usage", "continuous"])
def test_the_cached_tokens_reach_the_meter_and_the_clients_that_asked_for_usage(
    asked: str, form: str
) -> None:
    _, events = continuous_stream(n=1, tokens=4, prompt=84)
    events = with_cached(events, 80)
    end = FORMS[form][1]
    shape = {"asked_usage": asked != "nothing", "asked_continuous": asked == "continuous", "n": 1}
    case = {"text": sse(*events, form=form), "shape": shape, "responses": False, "slices": [13] * 80}
    [result] = run_lua({"bodies": [], "streams": [case]})["streams"]
    received = [json.loads(line[6:]) for line in result["sent"].split(end) if line.startswith("data: {")]
    details = [
        e["usage"]["prompt_tokens_details"] for e in received if "prompt_tokens_details" in e.get("usage", {})
    ]
    assert details == ([] if asked == "nothing" else [{"cached_tokens": 80}])
    assert (result["prompt"], result["completion"], result["cached"]) == (84, 4, 80)


def test_a_stream_without_details_counts_nothing_cached() -> None:
    _, events = continuous_stream(n=2, tokens=3, prompt=50)
    case = {"text": sse(*events), "shape": {"asked_usage": True, "asked_continuous": False, "n": 2},
            "responses": False, "slices": [40] * 40}  # fmt: skip
    [result] = run_lua({"bodies": [], "streams": [case]})["streams"]
    assert result["cached"] == 0


def recorded_answers() -> list[str]:
    """The real vLLM 0.25.0's answers (tests/fixtures/h200-meter-2026-12-05/h100): a chat body
    without the flag (``"prompt_tokens_details": null``) and a /v1/responses body, whose
    ``input_tokens_details.cached_tokens`` vLLM always fills (80 of a repeated 84-token prompt)."""
    rows = json.loads(
        (
            Path(__file__).parent / "fixtures" / "h200-meter-2026-12-05" / "h100" / "meter-exactness.json"
        ).read_text()
    )["rows"]
    bodies = {row["shape"]: row["raw"] for row in rows if row["key"] == "alice"}
    return [bodies["chat"], bodies["responses"]]


def test_json_answers_give_their_cached_tokens() -> None:
    chat_null, responses = recorded_answers()
    hit = json.dumps({"usage": {"prompt_tokens": 84, "total_tokens": 108, "completion_tokens": 24,
                                "prompt_tokens_details": {"cached_tokens": 80}}})  # fmt: skip
    usages = run_lua({"bodies": [], "streams": [], "answers": [chat_null, responses, hit]})["usages"]
    assert [u["cached"] for u in usages] == [0, 80, 80]
    assert [(u["prompt"], u["completion"]) for u in usages] == [(84, 24), (84, 22), (84, 24)]
