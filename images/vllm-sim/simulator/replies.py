"""What a completion's reply says: the envelope and usage every chunk and body share, and the
whole bodies of a chat completion and a (legacy) text completion.

The faults that bend a whole chat reply ('content-parts', 'message-string', 'tool-call-string',
'inline-reasoning', 'reasoning-content') are applied here; the stream's in :mod:`simulator.streaming`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from simulator.config import Config
from simulator.engine import SimRequest


def reasoning_keys(cfg: Config) -> list:
    """The message fields reasoning goes in, by vLLM version: reasoning_content before 0.11.1,
    both until 0.15, reasoning since (the 'reasoning-content' fault: the old name)."""
    if "reasoning-content" in cfg.faults:
        return ["reasoning_content"]
    v = cfg.version_tuple
    if v < (0, 11, 1):
        return ["reasoning_content"]
    if v < (0, 15, 0):
        return ["reasoning", "reasoning_content"]
    return ["reasoning"]


@dataclass
class Reply:
    """One request's reply, streamed or whole."""

    cfg: Config
    req: SimRequest
    chat: bool
    created: int
    reasoning_keys: list
    reasoning_tokens: int = 0
    """Reasoning tokens generated so far (``count`` is called for every token)."""

    @classmethod
    def of(cls, cfg: Config, req: SimRequest, chat: bool) -> Reply:
        return cls(cfg, req, chat, int(time.time()), reasoning_keys(cfg))

    def count(self, channel: str) -> None:
        if channel == "reasoning":
            self.reasoning_tokens += 1

    def envelope(self, choices: list) -> dict:
        """A stream chunk with these choices."""
        return {
            "id": self.req.request_id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.cfg.name,
            "choices": choices,
        }

    def usage(self) -> dict:
        cfg, req = self.cfg, self.req
        usage: dict = {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + req.generated,
            "completion_tokens": req.generated,
            "prompt_tokens_details": None,
        }
        parsed = self.chat and cfg.reasoning_parser and not req.plan.inline_reasoning
        if parsed and cfg.version_tuple >= (0, 30, 0):
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return usage

    def completion_body(self, collected: list) -> dict:
        """A text completion's body, from the ``(channel, piece)`` tokens generated."""
        return {
            "id": self.req.request_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.cfg.name,
            "choices": [
                {
                    "index": 0,
                    "text": "".join(p for _, p in collected),
                    "logprobs": None,
                    "finish_reason": self.req.plan.finish_reason,
                    "stop_reason": None,
                    "prompt_logprobs": None,
                }
            ],
            "usage": self.usage(),
        }

    def chat_body(self, collected: list) -> dict:
        """A chat completion's body, from the ``(channel, piece)`` tokens generated."""
        faults = self.cfg.faults
        content = "".join(p for c, p in collected if c == "content")
        message = self._message(collected, content)
        if "content-parts" in faults and message["content"] is not None:
            message["content"] = [{"type": "text", "text": message["content"]}]
        if "tool-call-string" in faults:
            message["tool_calls"] = [json.dumps(call) for call in message["tool_calls"]]
        reply_message: Any = content if "message-string" in faults else message
        return {
            "id": self.req.request_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.cfg.name,
            "choices": [
                {
                    "index": 0,
                    "message": reply_message,
                    "logprobs": None,
                    "finish_reason": self.req.plan.finish_reason,
                    "stop_reason": None,
                    "token_ids": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": self.usage(),
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "kv_transfer_params": None,
        }

    def _message(self, collected: list, content: str) -> dict:
        """The assistant's message: content, the tool call when the plan finished with it, reasoning."""
        tool, finish = self.req.plan.tool_call, self.req.plan.finish_reason
        tool_calls = []
        if tool is not None and finish == "tool_calls":
            tool_calls = [
                {
                    "id": tool["id"],
                    "type": "function",
                    "function": {"name": tool["name"], "arguments": tool["arguments"]},
                }
            ]
        message: dict = {
            "role": "assistant",
            "content": content if (content or not tool_calls) else None,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": tool_calls,
        }
        if "inline-reasoning" not in self.cfg.faults:
            reasoning = "".join(p for c, p in collected if c == "reasoning")
            for key in self.reasoning_keys:
                message[key] = reasoning or None
        return message
