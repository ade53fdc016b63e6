"""A streamed chat or text completion: server-sent events in HTTP/1.1 chunks, one event per token
of each choice, the finishes, the usage (``stream_options.include_usage``) and ``data: [DONE]``.

The stream faults ('stream-error', 'stream-bad-json', 'stream-choices-string',
'stream-delta-string', 'sse-no-space') bend it from ``STREAM_FAULT_AT`` on.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from simulator.engine import Aborted
from simulator.errors import engine_failure
from simulator.replies import Reply, Sequence
from simulator.request_fields import StreamShape

if TYPE_CHECKING:
    from simulator.server import Handler

STREAM_FAULT_AT = 3
"""The stream faults strike at this token: the first chunks are well formed."""


class ChunkStream:
    """The events of one reply on one handler's connection."""

    def __init__(self, http: Handler, reply: Reply, shape: StreamShape):
        self.http = http
        self.reply = reply
        self.include_usage = shape.include_usage
        self.continuous = shape.continuous_usage
        self.roles_sent = False

    # ---- the reply's events ----------------------------------------------------------------
    def start(self) -> None:
        http = self.http
        http.send_response(200)
        http.send_header("content-type", "text/event-stream; charset=utf-8")
        http.send_header("cache-control", "no-cache")
        http.send_header("transfer-encoding", "chunked")
        http.end_headers()
        http.wfile.flush()

    def on_token(self, seq: Sequence, i: int, channel: str, piece: str) -> None:
        """The event of token ``i`` of a sequence (a chat's first comes after the roles)."""
        if not self.reply.chat:
            self._completion_token(seq, i, piece)
            return
        if not self.roles_sent:
            # vLLM sends the role of every choice with the first output (0.25.0
            # chat_completion/serving.py:480-527), with usage of 0 completion tokens.
            self.roles_sent = True
            for other in self.reply.seqs:
                first = {"role": "assistant", "content": ""}
                choice = {"index": other.index, "delta": first, "logprobs": None, "finish_reason": None}
                self.write_event(self._chunk([choice], self.reply.chunk_usage(other, 0)))
        choice = {
            "index": seq.index,
            "delta": self._delta(seq, channel, piece),
            "logprobs": None,
            "finish_reason": None,
        }
        chunk = self._chunk([choice], self.reply.chunk_usage(seq))
        faults = self.reply.cfg.faults
        sent = self._bend(faults, chunk) if i >= STREAM_FAULT_AT and faults else chunk
        if sent is not None:
            self.write_event(sent)

    def _completion_token(self, seq: Sequence, i: int, piece: str) -> None:
        """A text completion's chunk: its last token carries the finish reason (0.25.0
        completion/serving.py:402-441: every field passed, so every field sent)."""
        last = i == len(seq.req.plan.tokens) - 1
        choice = {
            "index": seq.index,
            "text": piece,
            "logprobs": None,
            "finish_reason": seq.req.plan.finish_reason if last else None,
            "stop_reason": None,
            "prompt_token_ids": None,
            "token_ids": None,
        }
        self.write_event(self._chunk([choice], self.reply.chunk_usage(seq)))

    def finish_choice(self, seq: Sequence) -> None:
        """A chat choice's finish: an empty delta with the finish reason (the end-of-sequence
        token's chunk); a text completion's rode on its last token."""
        if not self.reply.chat:
            return
        choice = {
            "index": seq.index,
            "delta": {},
            "logprobs": None,
            "finish_reason": seq.req.plan.finish_reason,
            "stop_reason": None,
        }
        self.write_event(self._chunk([choice], self.reply.chunk_usage(seq)))

    def finish(self) -> None:
        """The usage chunk when asked for (``choices: []``, no null fields: 0.25.0
        completion/serving.py:443-486, chat_completion/serving.py:748-789), then ``[DONE]``."""
        if self.include_usage:
            final = self.reply.envelope([])
            final["usage"] = {k: v for k, v in self.reply.usage().items() if v is not None}
            self.write_event(final)
        self.end()

    def _chunk(self, choices: list, usage: dict) -> dict:
        chunk = self.reply.envelope(choices)
        if self.continuous:
            chunk["usage"] = usage
        return chunk

    def _delta(self, seq: Sequence, channel: str, piece: str) -> dict:
        if channel == "reasoning":
            return {key: piece for key in self.reply.reasoning_keys}
        if channel == "content":
            return {"content": piece}
        if channel == "tool_name":
            tool = seq.req.plan.tool_call
            call_id = tool["id"] if tool else f"chatcmpl-tool-{uuid.uuid4().hex}"
            return {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": piece, "arguments": ""},
                    }
                ]
            }
        return {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}

    def _bend(self, faults: frozenset, chunk: dict) -> dict | None:
        """A stream chunk bent the way a fault says (None: something else was sent instead)."""
        if "stream-error" in faults:
            # What vLLM sends when the engine fails mid-stream: an error object, then [DONE].
            self.write_event(engine_failure())
            self.end()
            raise Aborted
        if "stream-bad-json" in faults:
            self.write_chunk(self._data_field() + b'{"choices": [{"delta": \n\n')
            return None
        if "stream-choices-string" in faults:
            chunk["choices"] = ["x"]
        elif "stream-delta-string" in faults:
            chunk["choices"][0]["delta"] = "abc"
        return chunk

    # ---- server-sent events in HTTP chunks ---------------------------------------------------
    def write_chunk(self, data: bytes) -> None:
        try:
            self.http.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.http.wfile.flush()
        except OSError:
            raise Aborted from None

    def _data_field(self) -> bytes:
        # The SSE spec allows `data:` with or without one space; vLLM sends the space.
        return b"data:" if "sse-no-space" in self.reply.cfg.faults else b"data: "

    def write_event(self, obj: Any) -> None:
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
        self.write_chunk(self._data_field() + data + b"\n\n")

    def end(self) -> None:
        self.write_chunk(self._data_field() + b"[DONE]\n\n")
        self.write_chunk(b"")
