"""What a completion's reply says: the envelope and usage every chunk and body share, and the
whole bodies of a chat completion and a (legacy) text completion.

The faults that bend a whole chat reply ('content-parts', 'message-string', 'tool-call-string',
'inline-reasoning', 'reasoning-content') are applied here; the stream's in :mod:`simulator.streaming`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
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


@dataclass(eq=False)
class Sequence:
    """One engine request of a reply: vLLM runs each prompt of a request, and each of its ``n``
    choices, as an engine request of its own (0.25.0 ``completion/serving.py:162-217``,
    ``v1/engine/async_llm.py:381-398``)."""

    req: SimRequest
    index: int
    """The choice's index in the reply: prompt × n + choice."""
    first_choice: bool
    """The first choice of its prompt: its prompt counts once in ``usage``."""
    collected: list = field(default_factory=list)
    """``(channel, piece)`` of the tokens generated so far."""
    reasoning_tokens: int = 0

    def add(self, channel: str, piece: str) -> None:
        self.collected.append((channel, piece))
        if channel == "reasoning":
            self.reasoning_tokens += 1

    def text(self, channel: str | None = None) -> str:
        return "".join(p for c, p in self.collected if channel in (None, c))


@dataclass
class Reply:
    """One request's reply, streamed or whole: what its sequences generated."""

    cfg: Config
    request_id: str
    seqs: list
    chat: bool
    created: int
    reasoning_keys: list

    @classmethod
    def of(cls, cfg: Config, request_id: str, seqs: list, chat: bool) -> Reply:
        return cls(cfg, request_id, seqs, chat, int(time.time()), reasoning_keys(cfg))

    def envelope(self, choices: list) -> dict:
        """A stream chunk with these choices."""
        return {
            "id": self.request_id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.cfg.name,
            "choices": choices,
        }

    def usage(self) -> dict:
        """The reply's usage: each prompt once, however many choices it has, and every choice's
        tokens (0.25.0 ``completion/serving.py:443-448``, ``:596-604``; chat
        ``chat_completion/serving.py:749-754``, ``:1009-1018``)."""
        prompt = sum(s.req.prompt_tokens for s in self.seqs if s.first_choice)
        completion = sum(s.req.generated for s in self.seqs)
        usage: dict = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": None,
        }
        cached = self.cached_tokens()
        if self.cfg.prompt_tokens_details and cached:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        plan = self.seqs[0].req.plan
        parsed = self.chat and self.cfg.reasoning_parser and not plan.inline_reasoning
        if parsed and self.cfg.version_tuple >= (0, 30, 0):
            reasoning = sum(s.reasoning_tokens for s in self.seqs)
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        return usage

    def cached_tokens(self) -> int:
        """The prefix-cache hit vLLM reports: a chat's first engine request's (``final_res``, one per
        choice), a text completion's last prompt's (``last_final_res``; 0.25.0
        ``completion/serving.py``). With ``--enable-prompt-tokens-details`` and a hit (0 is a miss
        and leaves ``prompt_tokens_details`` null), ``usage.prompt_tokens_details.cached_tokens``."""
        firsts = [s for s in self.seqs if s.first_choice]
        return (firsts[0] if self.chat else firsts[-1]).req.cached_tokens if firsts else 0

    def chunk_usage(self, seq: Sequence, completion: int | None = None) -> dict:
        """``continuous_usage_stats``: the chunk's prompt and its choice's tokens so far
        (``completion``: instead of those), the fields vLLM sets (``exclude_unset``; 0.25.0
        ``completion/serving.py:430-439``, ``chat_completion/serving.py:735-741``). A chat on
        vLLM >= 0.30 also sets ``completion_tokens_details``: the reasoning tokens with a reasoning
        parser, else null (0.33.0 ``chat_completion/serving.py:837-850``)."""
        prompt = seq.req.prompt_tokens
        completion = seq.req.generated if completion is None else completion
        usage: dict = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        }
        if self.chat and self.cfg.version_tuple >= (0, 30, 0):
            parsed = self.cfg.reasoning_parser and not seq.req.plan.inline_reasoning
            reasoning = seq.reasoning_tokens if completion else 0
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning} if parsed else None
        return usage

    def completion_body(self) -> dict:
        """A text completion's body: a choice per prompt and choice, prompt by prompt."""
        return {
            "id": self.request_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.cfg.name,
            "choices": [
                {
                    "index": seq.index,
                    "text": seq.text(),
                    "logprobs": None,
                    "finish_reason": seq.req.plan.finish_reason,
                    "stop_reason": None,
                    "prompt_logprobs": None,
                }
                for seq in self.seqs
            ],
            "usage": self.usage(),
        }

    def chat_body(self) -> dict:
        """A chat completion's body: a choice per sequence."""
        return {
            "id": self.request_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.cfg.name,
            "choices": [
                {
                    "index": seq.index,
                    "message": self._reply_message(seq),
                    "logprobs": None,
                    "finish_reason": seq.req.plan.finish_reason,
                    "stop_reason": None,
                    "token_ids": None,
                }
                for seq in self.seqs
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": self.usage(),
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "kv_transfer_params": None,
        }

    def _reply_message(self, seq: Sequence) -> Any:
        """The message of one choice, bent by the faults that bend a whole reply."""
        faults = self.cfg.faults
        content = seq.text("content")
        message = self._message(seq, content)
        if "content-parts" in faults and message["content"] is not None:
            message["content"] = [{"type": "text", "text": message["content"]}]
        if "tool-call-string" in faults:
            message["tool_calls"] = [json.dumps(call) for call in message["tool_calls"]]
        return content if "message-string" in faults else message

    def _message(self, seq: Sequence, content: str) -> dict:
        """The assistant's message: content, the tool call when the plan finished with it, reasoning."""
        tool, finish = seq.req.plan.tool_call, seq.req.plan.finish_reason
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
            reasoning = seq.text("reasoning")
            for key in self.reasoning_keys:
                message[key] = reasoning or None
        return message
