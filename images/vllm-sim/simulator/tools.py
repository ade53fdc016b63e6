"""Tool calls from the request's own JSON schema: which function, and plausible arguments taken
from the prompt (a place name for ``city``, a number in range, an enum value it mentions)."""

from __future__ import annotations

import re
import time
from typing import Any

_STOP_CAPS = {
    "A", "An", "And", "Are", "At", "Call", "Can", "Check", "Could", "Do", "Does", "Find",
    "For", "Get", "Give", "Hello", "Hi", "How", "I", "If", "In", "Is", "It", "Let", "Look",
    "Me", "My", "Of", "On", "Or", "Please", "Show", "Tell", "That", "The", "This", "Today",
    "Tomorrow", "Use", "Weather", "What", "What's", "Whats", "When", "Where", "Which",
    "Who", "Why", "Will", "Would", "You", "Your",
}  # fmt: skip
_PLACE_PROPS = re.compile(
    r"city|location|place|town|country|region|destination|origin|address|where", re.IGNORECASE
)
_TEXT_PROPS = re.compile(r"^(q|query|question|text|prompt|input|message|content|search)$", re.IGNORECASE)


def _capitalised_phrases(text: str) -> list:
    words = re.findall(r"[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*", text)
    out = []
    for phrase in words:
        kept = [w for w in phrase.split() if w not in _STOP_CAPS]
        if kept:
            out.append(" ".join(kept))
    return out


def _pick_place(text: str) -> str | None:
    m = re.search(r"\b(?:in|at|for|to|from|near|of)\s+([A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*)", text)
    if m:
        kept = [w for w in m.group(1).split() if w not in _STOP_CAPS]
        if kept:
            return " ".join(kept).rstrip("'’")
    phrases = _capitalised_phrases(text)
    return phrases[0] if phrases else None


def build_value(name: str, schema: Any, prompt: str) -> Any:
    """A plausible value for one JSON-schema property, taken from the prompt when possible."""
    if not isinstance(schema, dict):
        schema = {}
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        for option in schema["enum"]:
            if isinstance(option, str) and option.lower() in prompt.lower():
                return option
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = [o for o in schema.get(key) or [] if isinstance(o, dict)]
        options = [o for o in options if o.get("type") != "null"] or options
        if options:
            return build_value(name, options[0], prompt)
    typ = schema.get("type", "string")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), "null")
    if typ == "object":
        return build_arguments(schema, prompt)
    if typ == "array":
        count = int(schema.get("minItems") or 0)
        return [build_value(name, schema.get("items") or {}, prompt) for _ in range(count)]
    if typ in ("integer", "number"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        for num in re.findall(r"-?\d+(?:\.\d+)?", prompt):
            value = float(num)
            if (lo is None or value >= lo) and (hi is None or value <= hi):
                return int(value) if typ == "integer" else value
        if lo is not None:
            return int(lo) if typ == "integer" else lo
        return 1
    if typ == "boolean":
        return False
    if typ == "null":
        return None
    if schema.get("format") == "date":
        return time.strftime("%Y-%m-%d")
    if _TEXT_PROPS.match(name or ""):
        return prompt.strip()[:200] or "example"
    if _PLACE_PROPS.search(name or ""):
        return _pick_place(prompt) or "example"
    phrases = _capitalised_phrases(prompt)
    return phrases[0] if phrases else "example"


def build_arguments(schema: Any, prompt: str) -> dict:
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties") or {}
    if not isinstance(props, dict):
        return {}
    required = schema.get("required")
    names = [n for n in required if n in props] if isinstance(required, list) else list(props)
    return {n: build_value(n, props[n], prompt) for n in names}


def choose_function(tools: list, tool_choice: Any, prompt: str) -> dict | None:
    functions: list[dict] = [
        t["function"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    functions = [f for f in functions if f.get("name")]
    if not functions:
        return None
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        for fn in functions:
            if fn["name"] == wanted:
                return fn
        return None
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", prompt)}
    best, best_score = functions[0], 0
    for fn in functions:
        score = sum(1 for part in re.split(r"[_\W]+", fn["name"].lower()) if part in words)
        if score > best_score:
            best, best_score = fn, score
    return best
