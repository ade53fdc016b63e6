"""``POST /v1/responses``: the Responses API as vLLM serves it for a model without Harmony.

One engine request (the Responses API has no ``n``), counted in the engine counters like a chat.
The reply is a ``response`` object whose ``usage`` has ``input_tokens`` / ``output_tokens`` (all
generated tokens, reasoning included; 0.25.0 ``responses/serving.py:879-923``,
``responses/context.py:204-210``). Streamed, it is ``event: <type>`` / ``data: <json>`` pairs
without ``[DONE]`` (``responses/api_router.py`` ``_convert_stream_to_sse_events``):
``response.created``, ``response.in_progress``, per output item its ``output_item.added``,
part-added, deltas, text-done, part-done and ``output_item.done`` (a reasoning item before the
message when a reasoning parser splits it off; ``responses/streaming_events.py:829-1010``), then
``response.completed`` carrying the whole response with its ``usage``
(``responses/serving.py:1440-1544``). ``sequence_number`` counts the events from 0.
"""

from __future__ import annotations

import json
import time
import uuid

from simulator import tokenizer
from simulator.engine import Aborted
from simulator.errors import bad_request
from simulator.generation import Prompt, run_sequences, sequences
from simulator.plan import make_plan
from simulator.replies import Sequence
from simulator.request_fields import FieldError, cache_salt, lax_bool, output_budget, validation_error
from simulator.server import Handler


def answer(http: Handler, body: dict) -> None:
    """Answer a Responses API request whose preamble (model, refused fields) has passed."""
    try:
        stream = bool(lax_bool(body.get("stream"), ("stream",)))
    except FieldError as exc:
        raise validation_error([exc.error]) from None
    messages = _messages(body)
    cfg = http.server.cfg
    pieces = tokenizer.tokenize(tokenizer.render_chat(messages, None))
    requested = body.get("max_output_tokens")
    if requested is not None and (
        isinstance(requested, bool) or not isinstance(requested, int) or requested < 1
    ):
        raise bad_request(f"max_output_tokens must be at least 1, got {requested}.", "max_output_tokens")
    budget = output_budget(cfg, len(pieces), requested, "max_output_tokens")
    plan_body = {k: v for k, v in body.items() if k not in ("tools", "tool_choice")}
    prompt = Prompt(pieces, make_plan(cfg, plan_body, messages, budget), budget, cache_salt(body))
    (seq,) = sequences([prompt], 1)
    response = _Response(body, seq, cfg.name, cfg.max_model_len - len(pieces) if budget is None else budget)
    if not stream:
        run_sequences(http, [seq], lambda *_: None, lambda _: None)
        http.send_json(200, response.body("completed"))
        return
    events = _Events(http, response)
    events.start()
    run_sequences(http, [seq], events.on_token, lambda _: None)
    events.finish()


def _messages(body: dict) -> list:
    """``instructions`` as the system message, then ``input``: a string, or a list of messages."""
    given = body.get("input")
    if isinstance(given, str):
        given = [{"role": "user", "content": given}]
    if not isinstance(given, list) or not given or not all(isinstance(m, dict) for m in given):
        raise bad_request("input: Field required (a string or a non-empty list of messages)", "input")
    instructions = body.get("instructions")
    system = [{"role": "system", "content": instructions}] if isinstance(instructions, str) else []
    return system + [{"role": m.get("role", "user"), "content": m.get("content")} for m in given]


class _Response:
    """The ``response`` object of one request, as ``ResponsesResponse.from_request`` builds it."""

    def __init__(self, body: dict, seq: Sequence, model: str, max_tokens: int):
        self.request = body
        self.seq = seq
        self.model = model
        self.max_tokens = max_tokens
        self.id = f"resp_{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.reasoning_id = f"rs_{uuid.uuid4().hex}"
        self.message_id = f"msg_{uuid.uuid4().hex}"

    def usage(self) -> dict:
        req = self.seq.req
        return {
            "input_tokens": req.prompt_tokens,
            "input_tokens_details": {
                "cached_tokens": req.cached_tokens,
                "input_tokens_per_turn": [],
                "cached_tokens_per_turn": [],
            },
            "output_tokens": req.generated,
            "output_tokens_details": {
                "reasoning_tokens": self.seq.reasoning_tokens,
                "tool_output_tokens": 0,
                "output_tokens_per_turn": [],
                "tool_output_tokens_per_turn": [],
            },
            "total_tokens": req.prompt_tokens + req.generated,
        }

    def reasoning_item(self, status: str | None, text: str | None) -> dict:
        content = None if text is None else [{"text": text, "type": "reasoning_text"}]
        return {
            "id": self.reasoning_id,
            "summary": [],
            "type": "reasoning",
            "content": content,
            "encrypted_content": None,
            "status": status,
        }

    def message_item(self, status: str, text: str | None) -> dict:
        content = [] if not text else [_text_part(text)]
        return {
            "id": self.message_id,
            "content": content,
            "role": "assistant",
            "status": status,
            "type": "message",
        }

    def output(self) -> list:
        reasoning, content = self.seq.text("reasoning"), self.seq.text("content")
        items = [self.reasoning_item(None, reasoning)] if reasoning else []
        return items + ([self.message_item("completed", content)] if content else [])

    def body(self, status: str) -> dict:
        """The response object: in progress (no output, no usage) or done."""
        done = status != "in_progress"
        if done and self.seq.req.plan.finish_reason == "length":
            status = "incomplete"
        request = self.request
        return {
            "id": self.id,
            "created_at": self.created,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": request.get("instructions"),
            "metadata": request.get("metadata"),
            "model": self.model,
            "object": "response",
            "output": self.output() if done else [],
            "parallel_tool_calls": request.get("parallel_tool_calls", True),
            "temperature": request.get("temperature", 1.0),
            "tool_choice": request.get("tool_choice", "auto"),
            "tools": request.get("tools", []),
            "top_p": request.get("top_p", 1.0),
            "background": request.get("background", False),
            "max_output_tokens": self.max_tokens,
            "max_tool_calls": request.get("max_tool_calls"),
            "previous_response_id": request.get("previous_response_id"),
            "prompt": None,
            "reasoning": request.get("reasoning"),
            "service_tier": request.get("service_tier", "auto"),
            "status": status,
            "text": request.get("text"),
            "top_logprobs": None,
            "truncation": request.get("truncation", "disabled"),
            "usage": self.usage() if done else None,
            "user": request.get("user"),
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "kv_transfer_params": None,
            "input_messages": None,
            "output_messages": None,
        }


def _text_part(text: str) -> dict:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": []}


class _Events:
    """The streamed events of one response, numbered as they are sent."""

    def __init__(self, http: Handler, response: _Response):
        self.http = http
        self.response = response
        self.sequence_number = 0
        self.channel: str | None = None
        self.output_index = -1

    def start(self) -> None:
        http = self.http
        http.send_response(200)
        http.send_header("content-type", "text/event-stream; charset=utf-8")
        http.send_header("cache-control", "no-cache")
        http.send_header("transfer-encoding", "chunked")
        http.end_headers()
        self.send("response.created", response=self.response.body("in_progress"))
        self.send("response.in_progress", response=self.response.body("in_progress"))

    def on_token(self, seq: Sequence, _i: int, channel: str, piece: str) -> None:
        channel = "reasoning" if channel == "reasoning" else "content"
        if channel != self.channel:
            self._close()
            self._open(channel)
        where = self._where()
        if channel == "reasoning":
            self.send(
                "response.reasoning_text.delta",
                item_id=where["item_id"],
                output_index=where["output_index"],
                content_index=0,
                delta=piece,
            )
        else:
            self.send("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])

    def finish(self) -> None:
        self._close()
        self.send("response.completed", response=self.response.body("completed"))
        self.http.wfile.write(b"0\r\n\r\n")
        self.http.wfile.flush()

    def _where(self) -> dict:
        item = self.response.reasoning_id if self.channel == "reasoning" else self.response.message_id
        return {"output_index": self.output_index, "item_id": item}

    def _open(self, channel: str) -> None:
        self.channel, self.output_index = channel, self.output_index + 1
        where = self._where()
        item: dict[str, object]
        if channel == "reasoning":
            item = {
                "id": self.response.reasoning_id,
                "summary": [],
                "type": "reasoning",
                "content": None,
                "encrypted_content": None,
                "status": "in_progress",
            }
            self.send("response.output_item.added", output_index=self.output_index, item=item)
            self.send(
                "response.reasoning_part.added",
                **where,
                content_index=0,
                part={"text": "", "type": "reasoning_text"},
            )
        else:
            self.send(
                "response.output_item.added",
                output_index=self.output_index,
                item=self.response.message_item("in_progress", None),
            )
            self.send("response.content_part.added", **where, content_index=0, part=_text_part(""))

    def _close(self) -> None:
        where = self._where()
        if self.channel == "reasoning":
            text = self.response.seq.text("reasoning")
            part = {"text": text, "type": "reasoning_text"}
            self.send("response.reasoning_text.done", **where, content_index=0, text=text)
            self.send("response.reasoning_part.done", **where, content_index=0, part=part)
            self.send(
                "response.output_item.done",
                output_index=self.output_index,
                item=self.response.reasoning_item("completed", text),
            )
        elif self.channel == "content":
            text = self.response.seq.text("content")
            self.send("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
            self.send(
                "response.content_part.done",
                **where,
                content_index=0,
                part=dict(_text_part(text), logprobs=None),
            )
            self.send(
                "response.output_item.done",
                output_index=self.output_index,
                item=self.response.message_item("completed", text),
            )
        self.channel = None

    def send(self, kind: str, **fields: object) -> None:
        event = {"type": kind, "sequence_number": self.sequence_number, **fields}
        self.sequence_number += 1
        data = f"event: {kind}\ndata: {json.dumps(event, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()
        try:
            self.http.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.http.wfile.flush()
        except OSError:
            raise Aborted from None
