"""The SSE reader the gate and the probe share (``components/gate/sse.py``): the same bytes read the
same way, by both, against the simulator."""

from __future__ import annotations

import pytest

from capacity_probe.client import Budget, ProbeClient, Reply
from components.gate.sse import DONE, MalformedChunk, chunk_deltas, chunk_error, delta_text, sse_events
from tests.gate.support import KEY


def test_data_with_and_without_the_space_comments_and_done() -> None:
    lines = [
        ": keep-alive",
        'data: {"n": 1}',
        "",
        'data:{"n": 2}',
        "event: x",
        "data: [DONE]",
        'data: {"n": 3}',
    ]
    assert list(sse_events(lines)) == [{"n": 1}, {"n": 2}, DONE]


def test_a_stream_that_ends_without_done_just_ends() -> None:
    assert list(sse_events(['data: {"n": 1}'])) == [{"n": 1}]


def test_the_json_string_done_is_not_the_end_of_the_stream() -> None:
    assert list(sse_events(['data: "[DONE]"'])) == ["[DONE]"]


def test_a_data_line_that_is_not_json_is_an_error_quoting_it() -> None:
    with pytest.raises(MalformedChunk, match=r"a data line that is not JSON: '\{\"choices\": \[\{'"):
        list(sse_events(['data: {"choices": [{']))


@pytest.mark.parametrize(
    ("chunk", "says"),
    [
        ({"choices": ["x"]}, "choices[0] is a str, not an object: 'x'"),
        ({"choices": [{"delta": "abc"}]}, "choices[0].delta is a str, not an object: 'abc'"),
        ({"choices": "x"}, "`choices` is a str, not a list"),
        (["x"], "a chunk that is a list, not an object"),
    ],
)
def test_chunks_of_the_wrong_shape_are_errors(chunk, says) -> None:
    with pytest.raises(MalformedChunk) as info:
        chunk_deltas(chunk)
    assert says in str(info.value)


def test_usage_only_and_finish_chunks_have_no_text() -> None:
    assert chunk_deltas({"choices": [], "usage": {"completion_tokens": 3}}) == []
    assert [delta_text(d) for d in chunk_deltas({"choices": [{"delta": {}, "finish_reason": "stop"}]})] == [
        ""
    ]


def test_delta_text_refuses_parts_where_a_string_belongs() -> None:
    with pytest.raises(MalformedChunk, match=r"delta\.content is a list, not a string"):
        delta_text({"content": [{"type": "text", "text": "1"}]})


def test_an_error_object_is_the_engines_error() -> None:
    error = {
        "error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", "code": 500}
    }
    assert chunk_error(error) == "EngineCore encountered an issue. (InternalServerError, code 500)"
    assert chunk_error({"error": "Unauthorized"}) == "Unauthorized"
    assert chunk_error({"choices": []}) is None


# ---- the probe reads through the same reader --------------------------------------------------------


def _probe_chat(url: str) -> Reply:
    client = ProbeClient(f"{url}/v1", KEY, Budget(30.0, 5), model="glm-5.3-flash")
    try:
        return client.chat("Count from 1 to 20.", max_tokens=12, deadline=10.0)
    finally:
        client.close()


def test_the_probe_reads_data_lines_without_the_space(sims) -> None:
    reply = _probe_chat(sims(VLLM_SIM_FAULT="sse-no-space").url)
    assert reply.ok and reply.chunks >= 10


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("stream-bad-json", "a data line that is not JSON"),
        ("stream-choices-string", "choices[0] is a str, not an object"),
        ("stream-delta-string", "choices[0].delta is a str, not an object"),
        ("stream-error", "EngineCore encountered an issue. (InternalServerError, code 500)"),
    ],
)
def test_the_probe_reports_a_malformed_stream_as_an_error_like_the_gate(sims, fault, says) -> None:
    reply = _probe_chat(sims(VLLM_SIM_FAULT=fault).url)
    assert reply.outcome == "error"
    assert says in reply.error
    assert reply.chunks == 3  # the well-formed chunks before the fault
