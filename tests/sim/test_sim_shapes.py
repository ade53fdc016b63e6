"""Request shapes a token meter must count: ``stream`` as pydantic reads it, the usage chunks of
``stream_options``, ``n > 1``, a list of prompts, ``/v1/responses``; for each, ``usage`` and the
engine counters' deltas as vLLM computes them (source references: see :mod:`tests.sim.shapes`)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from .conftest import MODEL, REASONING_ARGS, Sim
from .shapes import POEM, Counters, bad_request, chat_prompt_tokens, sse_events, text_prompt_tokens

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


class _StreamField(BaseModel):
    """vLLM's own field (completion/protocol.py:66, chat_completion/protocol.py:216), in the lax
    mode of vLLM's OpenAIBaseModel (engine/protocol.py:28-30): pydantic is the oracle."""

    stream: bool | None = False


def _pydantic_stream(value: object) -> bool | ValidationError:
    try:
        return bool(_StreamField.model_validate({"stream": value}).stream)
    except ValidationError as exc:
        return exc


STREAM_VALUES = [True, False, None, 1, 0, 1.0, 0.0, 2, 0.5, "true", "True", "1", "yes", "y", "on", "t",
                 "false", "0", "no", "off", "n", "f", "maybe", "", " true", "1.0", [], {}]  # fmt: skip


@pytest.mark.parametrize("value", STREAM_VALUES, ids=repr)
def test_stream_is_read_as_pydantics_lax_bool(shapes_sim: Sim, value: object) -> None:
    payload = {"model": MODEL, "prompt": POEM, "max_tokens": 2, "stream": value}
    resp = shapes_sim.http.post(COMPLETIONS, json=payload)
    expected = _pydantic_stream(value)
    if isinstance(expected, ValidationError):
        # FastAPI's RequestValidationError, as vLLM answers it (serve/utils/server_utils.py:488-524).
        err = bad_request(resp)
        assert err["type"] == "Bad Request" and err["param"] == "body.stream"
        assert expected.errors()[0]["type"] in err["message"]
        return
    assert resp.status_code == 200, resp.text
    streamed = resp.headers["content-type"].startswith("text/event-stream")
    assert streamed is expected


def test_stream_options_need_a_truthy_raw_stream(shapes_sim: Sim) -> None:
    """``validate_stream_options`` is a mode="before" validator on the raw JSON values
    (completion/protocol.py:470-479): ``0`` is refused, the string ``"false"`` passes it and
    then does not stream; an empty ``stream_options`` is falsy and passes."""
    options = {"include_usage": True}
    err = bad_request(shapes_sim.chat(POEM, max_tokens=2, stream=0, stream_options=options))
    assert err["param"] == "stream_options" and "only be defined when `stream=True`" in err["message"]
    err = bad_request(shapes_sim.chat(POEM, max_tokens=2, stream_options=options))
    assert err["param"] == "stream_options"

    plain = shapes_sim.chat(POEM, max_tokens=2, stream="false", stream_options=options)
    assert plain.status_code == 200 and plain.json()["object"] == "chat.completion"
    assert shapes_sim.chat(POEM, max_tokens=2, stream_options={}).json()["object"] == "chat.completion"

    err = bad_request(
        shapes_sim.chat(POEM, max_tokens=2, stream=True, stream_options={"include_usage": "maybe"})
    )
    assert err["param"] == "body.stream_options.include_usage"
    err = bad_request(shapes_sim.chat(POEM, max_tokens=2, stream=True, stream_options="yes"))
    assert err["param"] == "body.stream_options"


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_usage_chunks_as_vllm_streams_them(shapes_sim: Sim, path: str) -> None:
    """include_usage: a last chunk with ``choices: []`` and the totals, no null fields;
    continuous_usage_stats: prompt, total, completion so far on every chunk, only with
    include_usage (serve/utils/api_utils.py:276-288; completion/serving.py:431-486,
    chat_completion/serving.py:517-523, 735-789)."""
    chat = path == CHAT
    prompt = chat_prompt_tokens(shapes_sim, POEM) if chat else text_prompt_tokens(shapes_sim, POEM)
    payload = {"model": MODEL, "max_tokens": 5, "stream": "on"}
    payload.update({"messages": [{"role": "user", "content": POEM}]} if chat else {"prompt": POEM})
    options = {"include_usage": "yes", "continuous_usage_stats": 1}
    counters = Counters(shapes_sim)
    with shapes_sim.http.stream("POST", path, json={**payload, "stream_options": options}) as r:
        events = sse_events(r)
    assert counters.delta() == (prompt, 5)
    assert events[-1] == "[DONE]"
    *chunks, final = events[:-1]
    # A chat with a reasoning parser on vLLM 0.33.0 also sets completion_tokens_details
    # (0.33.0 chat_completion/serving.py:837-850, 864-875); a text completion never does.
    fields = ["prompt_tokens", "total_tokens", "completion_tokens"] + (
        ["completion_tokens_details"] if chat else []
    )
    assert final["choices"] == []
    assert list(final["usage"]) == fields
    assert final["usage"]["prompt_tokens"] == prompt and final["usage"]["completion_tokens"] == 5
    assert final["usage"]["total_tokens"] == prompt + 5
    for chunk in chunks:
        usage = chunk["usage"]
        assert list(usage) == fields
        assert usage["prompt_tokens"] == prompt
        assert usage["total_tokens"] == prompt + usage["completion_tokens"]
    assert [c["usage"]["completion_tokens"] for c in chunks][-1] == 5
    if not chat:  # the finish reason rides on the last token (completion/serving.py:402-421)
        assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["length"]

    without = {"continuous_usage_stats": True}  # continuous alone: no usage anywhere
    with shapes_sim.http.stream("POST", path, json={**payload, "stream_options": without}) as r:
        assert all("usage" not in e for e in sse_events(r)[:-1])


def test_force_include_usage_streams_usage_unasked(start_sim) -> None:
    """--enable-force-include-usage: usage on every chunk and the usage chunk, whatever the
    request's stream_options (serve/utils/api_utils.py:279-280)."""
    s = start_sim(
        args=[*REASONING_ARGS, "--enable-force-include-usage"], env={"VLLM_SIM_DECODE_TOKEN_SECONDS": "0"}
    )
    payload = {"model": MODEL, "prompt": POEM, "max_tokens": 3, "stream": True}
    with s.http.stream("POST", COMPLETIONS, json=payload) as r:
        events = sse_events(r)
    assert all("usage" in e for e in events[:-1])
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 3


def test_chat_n_counts_the_prompt_once_in_usage_and_n_times_in_the_engine(shapes_sim: Sim) -> None:
    """n > 1 fans out into n engine requests, each prefilling the prompt (v1/engine/async_llm.py:
    381-398; v1/core/sched/scheduler.py:777-783; v1/metrics/stats.py:364-367; loggers.py:1157);
    usage counts the prompt once and every choice's tokens (chat_completion/serving.py:1009-1018)."""
    prompt = chat_prompt_tokens(shapes_sim, POEM)
    counters = Counters(shapes_sim)
    resp = shapes_sim.openai().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": POEM}], max_tokens=4, n=3
    )
    assert [c.index for c in resp.choices] == [0, 1, 2]
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (prompt, 12)
    assert counters.delta() == (3 * prompt, 12)

    counters = Counters(shapes_sim)
    stream = shapes_sim.openai().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": POEM}],
        max_tokens=4,
        n=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    roles = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.role]
    assert sorted(roles) == [0, 1, 2]  # every choice's role with the first output
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (prompt, 12)
    assert counters.delta() == (3 * prompt, 12)


@pytest.mark.parametrize("stream", [False, True])
def test_completion_prompt_list_with_n(shapes_sim: Sim, stream: bool) -> None:
    """Each prompt of the list is an engine request (request_id-i, completion/serving.py:162-217),
    each fanned out n times; usage sums each prompt once and all choices (:443-448, :598-604);
    choice i of prompt p is index p * n + i (:331)."""
    prompts = ["The sea is wide.", "12 apples and", "Once upon a time", "Dear reader,"]
    sizes = [text_prompt_tokens(shapes_sim, p) for p in prompts]
    counters = Counters(shapes_sim)
    client = shapes_sim.openai()
    if stream:
        chunks = list(
            client.completions.create(
                model=MODEL,
                prompt=prompts,
                n=2,
                max_tokens=3,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        usage = chunks[-1].usage
        indexes = {c.choices[0].index for c in chunks if c.choices}
        finished = sorted(c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason)
        assert finished == list(range(8))
    else:
        resp = client.completions.create(model=MODEL, prompt=prompts, n=2, max_tokens=3)
        usage, indexes = resp.usage, [c.index for c in resp.choices]
        assert indexes == list(range(8))
    assert set(indexes) == set(range(8))
    assert (usage.prompt_tokens, usage.completion_tokens) == (sum(sizes), 8 * 3)
    assert counters.delta() == (2 * sum(sizes), 8 * 3)


def test_token_id_prompts_are_prompts_too(shapes_sim: Sim) -> None:
    counters = Counters(shapes_sim)
    body = {"model": MODEL, "prompt": [[1, 2, 3], [4, 5]], "max_tokens": 2}
    usage = shapes_sim.http.post(COMPLETIONS, json=body).json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (5, 4)
    assert counters.delta() == (5, 4)


def test_responses_plain_and_streamed(shapes_sim: Sim) -> None:
    """usage: input_tokens / output_tokens, reasoning included (responses/serving.py:879-923);
    the stream: created, in_progress, the items' events, completed with the usage
    (responses/serving.py:1440-1544, api_router.py `event:` lines, no [DONE])."""
    question = "What is 13*17?"
    prompt = chat_prompt_tokens(shapes_sim, question)
    client = shapes_sim.openai()
    counters = Counters(shapes_sim)
    resp = client.responses.create(model=MODEL, input=question, max_output_tokens=200)
    assert resp.status == "completed" and resp.output_text == "221"
    assert resp.usage.input_tokens == prompt
    assert resp.usage.output_tokens_details.reasoning_tokens > 0
    assert resp.usage.total_tokens == prompt + resp.usage.output_tokens
    assert counters.delta() == (prompt, resp.usage.output_tokens)

    counters = Counters(shapes_sim)
    events = list(client.responses.create(model=MODEL, input=question, max_output_tokens=200, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    usage = events[-1].response.usage
    assert text == "221" and usage.input_tokens == prompt
    deltas = sum(1 for e in events if e.type.endswith("_text.delta"))
    assert usage.output_tokens == deltas
    assert counters.delta() == (prompt, usage.output_tokens)

    counters = Counters(shapes_sim)
    cut = client.responses.create(model=MODEL, input=POEM, max_output_tokens=7)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert counters.delta() == (chat_prompt_tokens(shapes_sim, POEM), 7) == (cut.usage.input_tokens, 7)
