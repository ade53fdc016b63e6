"""What to answer: a plan of tokens on the channels reasoning / content / tool_name / tool_args.

A chat gets a tool call when the request offers tools, the arithmetic's answer (with reasoning)
when the prompt holds arithmetic, a summary after a tool result, or else filler text; a completion
gets the arithmetic's answer or filler. The faults that change what is said are applied here.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from simulator.arithmetic import Arithmetic, find_arithmetic, format_number
from simulator.config import Config
from simulator.tokenizer import content_text, tokenize
from simulator.tools import build_arguments, choose_function

FILLER = (
    "This is filler text from the vLLM protocol simulator, a test double that runs no "
    "model and knows nothing. "
)
_FILLER_PIECES = tokenize(FILLER)


def filler_pieces(n: int) -> list:
    """``n`` tokens of the filler text, repeated as needed."""
    reps = n // len(_FILLER_PIECES) + 1
    return (_FILLER_PIECES * reps)[:n]


@dataclass
class Plan:
    """The tokens of an answer in the order they are generated, and how the answer ends."""

    tokens: list  # [(channel, piece)], channel in reasoning/content/tool_name/tool_args
    finish_reason: str  # stop / length / tool_calls
    tool_call: dict | None  # {"id","name","arguments"} when complete
    inline_reasoning: bool


def _reasoning_effort(body: dict) -> tuple:
    """(thinking enabled, effort) from chat_template_kwargs or the top-level field."""
    kwargs = body.get("chat_template_kwargs")
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    effort = kwargs.get("reasoning_effort") or body.get("reasoning_effort")
    effort = str(effort).lower() if effort else None
    enabled = kwargs.get("enable_thinking", kwargs.get("thinking", True))
    if enabled is False or effort == "none":
        return False, None
    return True, effort


def _arith_reasoning(arith: Arithmetic, answer: str, effort: str | None) -> str:
    core = f"{arith.expression}={answer}"
    if effort in ("low", "minimal"):
        return core
    text = f"The user asks for {arith.expression}. Computing it: {core}. The answer is {answer}."
    if effort in ("max", "xhigh"):
        text += f" Double-checking the arithmetic once more: {core} holds. Final answer {answer}."
    return text


def last_user_text(messages: list) -> str:
    for msg in reversed(messages):
        if msg.get("role") == "user":
            return content_text(msg.get("content"))
    return ""


def _answer(arith: Arithmetic, faults: frozenset) -> str:
    """The arithmetic's result, one too many with the 'wrong-answer' fault."""
    if "wrong-answer" in faults and arith.value is not None:
        return format_number(arith.value + 1)
    return arith.result


def _tool_call(tools: list, tool_choice: object, prompt: str) -> dict | None:
    """The call of the function the prompt asks for, arguments built from its schema."""
    fn = choose_function(tools, tool_choice, prompt)
    if fn is None:
        return None
    args = build_arguments(fn.get("parameters") or {}, prompt)
    return {
        "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
        "name": fn["name"],
        "arguments": json.dumps(args, ensure_ascii=False),
    }


def make_plan(cfg: Config, body: dict, messages: list, max_tokens: int | None) -> Plan:
    """A chat's answer: a tool call, a tool result's summary, the arithmetic's answer, or filler."""
    faults = cfg.faults
    thinking, effort = _reasoning_effort(body)
    prompt = last_user_text(messages)
    tools = body.get("tools") or []
    tool_choice = body.get("tool_choice", "auto" if tools else "none")
    last_role = messages[-1].get("role") if messages else "user"
    reasoning = None
    content: str | None = None
    tool = None
    fixed_length = False

    wants_tool = bool(tools) and tool_choice != "none" and last_role != "tool"
    if wants_tool and "no-tool-calls" in faults:
        content = "I will answer without calling a tool: I do not know."
    elif wants_tool:
        tool = _tool_call(tools, tool_choice, prompt)
        if tool is not None:
            reasoning = f"The user's request needs the tool {tool['name']}; calling it."
            if effort in ("low", "minimal"):
                reasoning = f"call {tool['name']}"
    if tool is None and content is None:
        arith = find_arithmetic(prompt) if last_role != "tool" else None
        if last_role == "tool":
            result = content_text(messages[-1].get("content"))
            content = f"The tool returned: {result[:400]}"
            reasoning = "A tool result arrived; summarise it for the user."
        elif arith is not None:
            content = _answer(arith, faults)
            reasoning = _arith_reasoning(arith, content, effort)
        else:
            fixed_length = True

    if not thinking:
        reasoning = None
    inline = bool(reasoning) and (not cfg.reasoning_parser or "inline-reasoning" in faults)
    if inline:
        content = f"<think>{reasoning}</think>{content or ''}"
        reasoning = None

    if fixed_length:
        n = max_tokens if max_tokens is not None else cfg.default_max_tokens
        tokens = [("content", p) for p in filler_pieces(n)]
        return Plan(tokens, "length" if max_tokens is not None else "stop", None, inline)
    tokens = [("reasoning", p) for p in tokenize(reasoning or "")]
    tokens += [("content", p) for p in tokenize(content or "")]
    if tool is not None:
        tokens.append(("tool_name", tool["name"]))
        tokens += [("tool_args", p) for p in tokenize(tool["arguments"])]
    if max_tokens is not None and len(tokens) > max_tokens:
        return Plan(tokens[:max_tokens], "length", None, inline)
    return Plan(tokens, "tool_calls" if tool else "stop", tool, inline)


def completion_plan(cfg: Config, prompt: str, max_tokens: int) -> Plan:
    """A (legacy) completion's answer: the arithmetic's answer after a space, or filler to the limit."""
    arith = find_arithmetic(prompt)
    if arith is None:
        return Plan([("content", p) for p in filler_pieces(max_tokens)], "length", None, False)
    tokens = [("content", p) for p in tokenize(" " + _answer(arith, cfg.faults))]
    if len(tokens) > max_tokens:
        return Plan(tokens[:max_tokens], "length", None, False)
    return Plan(tokens, "stop", None, False)
