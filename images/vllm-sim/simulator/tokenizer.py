"""Tokens, as the simulator counts them.

A token is a run of 1-4 word characters or one other non-space character, together with the
whitespace before it. Concatenating the pieces gives the text back (trailing whitespace aside),
so streamed pieces add up to the final content.
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

VOCAB_SIZE = 151552

_TOKEN_RE = re.compile(r"\s*(?:\w{1,4}|[^\w\s])")


def tokenize(text: str) -> list:
    return _TOKEN_RE.findall(text or "")


def token_id(piece: str) -> int:
    return zlib.crc32(piece.encode("utf-8")) % VOCAB_SIZE


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                if part.get("type") == "text" or "text" in part:
                    out.append(str(part.get("text", "")))
                else:
                    out.append(f"<|{part.get('type', 'media')}|>")
        return "".join(out)
    return str(content)


def render_chat(messages: list, tools: list | None) -> str:
    """The simulator's 'chat template': what the prompt token count is computed on."""
    parts = ["[gMASK]<sop>"]
    if tools:
        parts.append("<|system|>\n# Tools\n" + json.dumps(tools, ensure_ascii=False))
    for msg in messages:
        role = msg.get("role", "user")
        parts.append(f"<|{role}|>\n{content_text(msg.get('content'))}")
        if msg.get("tool_calls"):
            parts.append(json.dumps(msg["tool_calls"], ensure_ascii=False))
    parts.append("<|assistant|>")
    return "\n".join(parts)
