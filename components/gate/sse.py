"""Server-sent events as vLLM streams a chat: ``data: {chunk}`` lines, ``data: [DONE]`` last.

The one reader the gate and the capacity probe (``capacity_probe/client.py``) share, so both read the same bytes the
same way: ``data:`` with or without the space after the colon (the SSE spec allows both), other
fields and ``:`` comments skipped, and a payload that is not JSON, or a chunk of the wrong shape,
raised as :class:`MalformedChunk`, never skipped silently. Each ``data:`` line is one event: vLLM and
every OpenAI-compatible server send one line per event.

The usage meter reads the same streams with a reader of its own (``Stream`` in
``components/host/meter/meter_answer.lua``), and must: it is Lua inside nginx's body filter, fed the
reply in the buffers nginx passes on, an event cut anywhere, and it decodes only the usage event.
The simulator writes the streams both read (``images/vllm-sim/simulator/streaming.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Final


class MalformedChunk(ValueError):
    """A stream event the OpenAI streaming protocol does not allow; the message quotes it."""


class _Done:
    def __repr__(self) -> str:
        return "DONE"


DONE: Final = _Done()
"""Yielded once for ``data: [DONE]``, the stream's proper end (a JSON ``"[DONE]"`` string is not it)."""

REASONING_KEYS = ("reasoning", "reasoning_content")
"""vLLM >= 0.16 streams ``reasoning``, <= 0.11 ``reasoning_content``, 0.11.1-0.14 both."""


def _quote(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def sse_events(lines: Iterable[str]) -> Iterator[Any]:
    """Each ``data:`` payload parsed as JSON, in order, then :data:`DONE` if the stream says so.

    >>> list(sse_events(['data: {"a": 1}', '', 'data:{"b": 2}', ': ping', 'data: [DONE]', 'data: 3']))
    [{'a': 1}, {'b': 2}, DONE]
    """
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].removeprefix(" ").rstrip("\r\n")
        if data == "[DONE]":
            yield DONE
            return
        try:
            yield json.loads(data)
        except ValueError:
            raise MalformedChunk(f"a data line that is not JSON: {_quote(data)}") from None


def chunk_error(chunk: Any) -> str | None:
    """The engine's own words when a chunk is an ``{"error": …}`` object (vLLM's error body).

    >>> chunk_error({"error": {"message": "EngineCore died", "type": "InternalServerError", "code": 500}})
    'EngineCore died (InternalServerError, code 500)'
    """
    if not isinstance(chunk, dict) or chunk.get("error") in (None, ""):
        return None
    error = chunk["error"]
    if not isinstance(error, dict):
        return str(error)
    what = ", ".join(
        part
        for part in (str(error.get("type") or ""), f"code {error['code']}" if error.get("code") else "")
        if part
    )
    message = str(error.get("message") or _quote(error))
    return f"{message} ({what})" if what else message


def chunk_deltas(chunk: Any) -> list[dict[str, Any]]:
    """The ``delta`` of each choice of a ``chat.completion.chunk`` (none for a usage-only chunk).

    >>> chunk_deltas({"choices": [{"index": 0, "delta": {"content": "1"}}]})
    [{'content': '1'}]
    >>> chunk_deltas({"choices": ["x"]})
    Traceback (most recent call last):
    ...
    components.gate.sse.MalformedChunk: choices[0] is a str, not an object: 'x'
    """
    if not isinstance(chunk, dict):
        raise MalformedChunk(f"a chunk that is a {type(chunk).__name__}, not an object: {_quote(chunk)}")
    choices = chunk.get("choices")
    if choices is None:
        return []
    if not isinstance(choices, list):
        raise MalformedChunk(f"`choices` is a {type(choices).__name__}, not a list: {_quote(choices)}")
    deltas = []
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise MalformedChunk(
                f"choices[{i}] is a {type(choice).__name__}, not an object: {_quote(choice)}"
            )
        delta = choice.get("delta")
        if delta is None:
            delta = {}
        if not isinstance(delta, dict):
            raise MalformedChunk(
                f"choices[{i}].delta is a {type(delta).__name__}, not an object: {_quote(delta)}"
            )
        deltas.append(delta)
    return deltas


def delta_text(delta: dict[str, Any]) -> str:
    """What a delta adds to the answer: its content, else its reasoning ("" for role/tool deltas).

    >>> delta_text({"reasoning": "13*17", "reasoning_content": "13*17"})
    '13*17'
    """
    for key in ("content", *REASONING_KEYS):
        value = delta.get(key)
        if value is not None and not isinstance(value, str):
            raise MalformedChunk(f"delta.{key} is a {type(value).__name__}, not a string: {_quote(value)}")
        if value:
            return value
    return ""
