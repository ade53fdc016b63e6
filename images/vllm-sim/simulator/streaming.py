"""A streamed reply: server-sent events in HTTP/1.1 chunks, one event per token, then the finish,
the usage (``stream_options.include_usage``) and ``data: [DONE]``.

The stream faults ('stream-error', 'stream-bad-json', 'stream-choices-string',
'stream-delta-string', 'sse-no-space') bend it from ``STREAM_FAULT_AT`` on.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from simulator.engine import Aborted
from simulator.errors import engine_failure
from simulator.replies import Reply

if TYPE_CHECKING:
    from simulator.server import Handler

STREAM_FAULT_AT = 3
"""The stream faults strike at this token: the first chunks are well formed."""


class ChunkStream:
    """The events of one reply on one handler's connection."""

    def __init__(self, http: Handler, reply: Reply, body: dict):
        self.http = http
        self.reply = reply
        options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
        self.include_usage = bool(options.get("include_usage"))
        self.continuous = bool(options.get("continuous_usage_stats"))

    # ---- the reply's events ----------------------------------------------------------------
    def start(self) -> None:
        http = self.http
        http.send_response(200)
        http.send_header("content-type", "text/event-stream; charset=utf-8")
        http.send_header("cache-control", "no-cache")
        http.send_header("transfer-encoding", "chunked")
        http.end_headers()
        http.wfile.flush()

    def on_token(self, i: int, channel: str, piece: str) -> None:
        """The engine's callback: the event of token ``i`` (a chat's first comes after its role)."""
        reply = self.reply
        reply.count(channel)
        if not reply.chat:
            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": None}
            self.write_event(self._chunk([choice]))
            return
        if i == 0:
            first = {"role": "assistant", "content": ""}
            choice = {"index": 0, "delta": first, "logprobs": None, "finish_reason": None}
            self.write_event(self._chunk([choice]))
        choice = {"index": 0, "delta": self._delta(channel, piece), "logprobs": None, "finish_reason": None}
        chunk: dict | None = self._chunk([choice])
        faults = reply.cfg.faults
        if i >= STREAM_FAULT_AT and faults:
            chunk = self._bend(faults, chunk)
        if chunk is not None:
            self.write_event(chunk)

    def finish(self) -> None:
        """The finish reason's chunk, the usage chunk when asked for, ``[DONE]``."""
        reply = self.reply
        choice: dict = {
            "index": 0,
            "logprobs": None,
            "finish_reason": reply.req.plan.finish_reason,
            "stop_reason": None,
        }
        if reply.chat:
            choice["delta"] = {}
        else:
            choice["text"] = ""
        self.write_event(self._chunk([choice]))
        if self.include_usage:
            final = reply.envelope([])
            final["usage"] = reply.usage()
            self.write_event(final)
        self.end()

    def _chunk(self, choices: list) -> dict:
        chunk = self.reply.envelope(choices)
        if self.include_usage and self.continuous:
            chunk["usage"] = self.reply.usage()
        return chunk

    def _delta(self, channel: str, piece: str) -> dict:
        if channel == "reasoning":
            return {key: piece for key in self.reply.reasoning_keys}
        if channel == "content":
            return {"content": piece}
        if channel == "tool_name":
            tool = self.reply.req.plan.tool_call
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
