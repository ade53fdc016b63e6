#!/usr/bin/env python3
"""vllm_sim -- a vLLM-protocol simulator.

THIS IS A TEST DOUBLE, NOT A MODEL.  It loads no weights, runs no neural network and
knows nothing.  It speaks vLLM's OpenAI-compatible HTTP protocol (the 0.33.0 wire
format) closely enough that the local stack, the Nginx front, the smoke gate, the
Prometheus rules and the tests can run against it instead of a real 8-accelerator box:

* it is started with vLLM's own command line (``vllm_sim.py serve <model> --port ...``),
  understands the flags that change what a client can observe and ignores the rest;
* it refuses connections while "loading", like vLLM does while weights load;
* it computes simple arithmetic for real (``13*17`` -> ``221``, also with a ``x`` sign), answers tool calls built
  from the request's own JSON schema, and otherwise returns deterministic filler text;
* it models time and capacity: prefill rate, per-token decode latency, a prefix cache,
  ``--max-num-seqs``, a KV pool in tokens with FCFS admission (a request bigger than
  the pool waits forever, as in the Ascend 910B3 article) and optional head-of-line
  blocking;
* it exposes ``/metrics`` with vLLM's metric names, and can be told to misbehave in the
  ways the seeds saw (``VLLM_SIM_FAULT``).

Python standard library only: it runs in a minimal Debian image that has python3 and
nothing else.  See README.md beside this file for the CLI and every ``VLLM_SIM_*`` knob.
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import signal
import socket
import sys
import threading
import time
import uuid
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

# Its companion module sits beside it; `python3 -I` (isolated, as the tests run it) leaves the
# script's folder off sys.path.
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import sim_startup

DEFAULT_VERSION = "0.33.0"
DEFAULT_MODEL = "vllm-sim/model"
DEFAULT_MAX_MODEL_LEN = 131072
VOCAB_SIZE = 151552
ENGINE_ID = "0"

FAULTS = frozenset(
    {
        "wrong-answer",
        "no-tool-calls",
        "inline-reasoning",
        "silent",
        "http-500",
        "reasoning-content",
        # Malformed replies (what a foreign server or a rewriting proxy sends; the gate must say so).
        "content-parts",
        "message-string",
        "tool-call-string",
        "stream-choices-string",
        "stream-delta-string",
        "stream-error",
        "stream-bad-json",
        "sse-no-space",
        "models-trickle",
    }
)
STREAM_FAULT_AT = 3
"""The stream faults strike at this token: the first chunks are well formed."""


class UsageError(Exception):
    """Bad command line or environment: printed, exit status 2."""


# --------------------------------------------------------------------------------------
# configuration: vLLM's argv + VLLM_SIM_* environment
# --------------------------------------------------------------------------------------


@dataclass
class Config:
    model: str = DEFAULT_MODEL
    served_names: list = field(default_factory=list)
    host: str = "0.0.0.0"
    port: int = 8000
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    max_num_seqs: int = 256
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    kv_cache_dtype: str = "auto"
    speculative: dict | None = None
    prefix_caching: bool = True
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    auto_tool_choice: bool = False
    api_key: str | None = None
    shutdown_timeout: float = 0.0
    ignored: list = field(default_factory=list)
    # simulator-only knobs (VLLM_SIM_*)
    loading_seconds: float = 0.0
    never_ready: bool = False
    kv_pool_tokens: int = 0
    faults: frozenset = frozenset()
    runtime_faults: bool = False
    version: str = DEFAULT_VERSION
    prefill_tokens_per_s: float = 200000.0
    decode_token_seconds: float = 0.01
    hol_blocking: bool = False
    spec_acceptance: float = 0.7
    default_max_tokens: int = 16
    reject_fields: frozenset = frozenset({"thinking_budget"})
    prefix_block_tokens: int = 0
    quiet: bool = False
    shards: int = 0
    start_failure: str | None = None
    crash_after_seconds: float = 0.0

    @property
    def num_gpu_blocks(self) -> int:
        return self.kv_pool_tokens // self.block_size

    @property
    def pool_tokens(self) -> int:
        """The KV pool as vLLM reports it: num_gpu_blocks * block_size."""
        return self.num_gpu_blocks * self.block_size

    @property
    def spec_tokens(self) -> int:
        if not self.speculative:
            return 0
        try:
            return max(0, int(self.speculative.get("num_speculative_tokens") or 0))
        except (TypeError, ValueError):
            return 0

    @property
    def name(self) -> str:
        return self.served_names[0]

    @property
    def version_tuple(self) -> tuple:
        return _version_tuple(self.version)


def _version_tuple(text: str) -> tuple:
    nums = []
    for part in re.split(r"[.+-]", text):
        if not part.isdigit():
            break
        nums.append(int(part))
    while len(nums) < 3:
        nums.append(0)
    return tuple(nums[:3])


_VALUE_FLAGS = {
    "--model": "model",
    "--host": "host",
    "--port": "port",
    "--max-model-len": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    "--block-size": "block_size",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--speculative-config": "speculative",
    "--reasoning-parser": "reasoning_parser",
    "--tool-call-parser": "tool_call_parser",
    "--api-key": "api_key",
    "--shutdown-timeout": "shutdown_timeout",
}
_MULTI_FLAGS = {"--served-model-name": "served_names"}
_BOOL_FLAGS = {
    "--enable-prefix-caching": ("prefix_caching", True),
    "--no-enable-prefix-caching": ("prefix_caching", False),
    "--enable-auto-tool-choice": ("auto_tool_choice", True),
    "--no-enable-auto-tool-choice": ("auto_tool_choice", False),
}
# vLLM store_true flags that do not start with --enable-/--disable-/--no-: an unknown flag
# in this set never eats the next token as its value.
_UNKNOWN_BOOLS = {
    "--trust-remote-code",
    "--enforce-eager",
    "--async-scheduling",
    "--headless",
    "--skip-tokenizer-init",
    "--calculate-kv-scales",
    "--data-parallel-hybrid-lb",
    "--data-parallel-external-lb",
    "--fully-sharded-loras",
    "--return-tokens-as-token-ids",
    "--use-tqdm-on-load",
    "--allow-credentials",
}
_NUMBER_RE = re.compile(r"^-\d")


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and len(tok) > 1 and not _NUMBER_RE.match(tok)


def _unknown_is_bool(name: str) -> bool:
    return name in _UNKNOWN_BOOLS or name.startswith(("--enable-", "--disable-", "--no-"))


def parse_human_int(text: str) -> int:
    """vLLM's human-readable ints: 128k = 128000, 128K = 131072, 1m = 10**6, 1M = 2**20."""
    s = str(text).strip()
    if s.lower() == "auto":
        return -1
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)([kKmMgG]?)", s)
    if not m:
        raise ValueError(s)
    mult = {"": 1, "k": 10**3, "K": 2**10, "m": 10**6, "M": 2**20, "g": 10**9, "G": 2**30}
    value = float(m.group(1)) * mult[m.group(2)]
    if value != int(value):
        raise ValueError(s)
    return int(value)


def _env_float(env: dict, key: str, default: float, minimum: float = 0.0) -> float:
    raw = env.get(key, "")
    if raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{key}={raw!r}: not a number") from None
    if not value >= minimum or math.isinf(value):
        raise UsageError(f"{key}={raw!r}: must be a finite number >= {minimum}")
    return value


def _env_int(env: dict, key: str, default: int, minimum: int = 0) -> int:
    raw = env.get(key, "")
    if raw.strip() == "":
        return default
    try:
        value = parse_human_int(raw)
    except ValueError:
        raise UsageError(f"{key}={raw!r}: not an integer") from None
    if value < minimum:
        raise UsageError(f"{key}={raw!r}: must be >= {minimum}")
    return value


def _env_bool(env: dict, key: str) -> bool:
    return env.get(key, "").strip().lower() in {"1", "true", "yes", "on"}


def parse_config(argv: list, env: dict | None = None) -> Config:
    """Parse a vLLM command line (``[vllm] [serve] <model> --flags...``) and VLLM_SIM_* env."""
    env = dict(os.environ if env is None else env)
    cfg = Config()
    args = list(argv)
    if args and os.path.basename(args[0]) == "vllm":
        args = args[1:]
    if args and args[0] == "serve":
        args = args[1:]
    raw: dict = {}
    positionals: list = []
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            positionals.extend(args[i + 1 :])
            break
        if not _is_flag(tok):
            positionals.append(tok)
            i += 1
            continue
        name, eq, inline = tok.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        if name in _MULTI_FLAGS:
            values = [inline] if eq else []
            while not eq and i + 1 < len(args) and not _is_flag(args[i + 1]):
                values.append(args[i + 1])
                i += 1
            if not values:
                raise UsageError(f"argument {name}: expected at least one argument")
            raw[_MULTI_FLAGS[name]] = values
        elif name in _VALUE_FLAGS:
            if eq:
                value = inline
            elif i + 1 < len(args):
                value = args[i + 1]
                i += 1
            else:
                raise UsageError(f"argument {name}: expected one argument")
            raw[_VALUE_FLAGS[name]] = value
        elif name in _BOOL_FLAGS:
            attr, value = _BOOL_FLAGS[name]
            raw[attr] = value
        else:
            ignored = [tok]
            if not eq and not _unknown_is_bool(name) and i + 1 < len(args) and not _is_flag(args[i + 1]):
                ignored.append(args[i + 1])
                i += 1
            cfg.ignored.append(" ".join(ignored))
        i += 1

    if positionals:
        cfg.model = positionals[0]
        cfg.ignored.extend(positionals[1:])
    if "model" in raw:
        cfg.model = raw["model"]
    cfg.served_names = list(raw.get("served_names") or [cfg.model])
    cfg.host = raw.get("host", cfg.host) or "0.0.0.0"
    try:
        cfg.port = int(raw.get("port", cfg.port))
        mml = parse_human_int(raw.get("max_model_len", str(DEFAULT_MAX_MODEL_LEN)))
        cfg.max_model_len = DEFAULT_MAX_MODEL_LEN if mml <= 0 else mml
        cfg.max_num_seqs = int(raw.get("max_num_seqs", cfg.max_num_seqs))
        cfg.block_size = int(raw.get("block_size", cfg.block_size))
        cfg.gpu_memory_utilization = float(raw.get("gpu_memory_utilization", cfg.gpu_memory_utilization))
    except ValueError as exc:
        raise UsageError(f"invalid numeric argument: {exc}") from None
    if not 0 <= cfg.port <= 65535 or cfg.max_num_seqs < 1 or cfg.block_size < 1:
        raise UsageError("--port, --max-num-seqs or --block-size out of range")
    cfg.kv_cache_dtype = raw.get("kv_cache_dtype", cfg.kv_cache_dtype)
    if "speculative" in raw:
        try:
            spec = json.loads(raw["speculative"])
        except ValueError:
            raise UsageError("argument --speculative-config: not valid JSON") from None
        if not isinstance(spec, dict):
            raise UsageError("argument --speculative-config: must be a JSON object")
        cfg.speculative = spec
    cfg.prefix_caching = raw.get("prefix_caching", cfg.prefix_caching)
    cfg.reasoning_parser = raw.get("reasoning_parser") or None
    cfg.tool_call_parser = raw.get("tool_call_parser") or None
    cfg.auto_tool_choice = raw.get("auto_tool_choice", False)
    if cfg.auto_tool_choice and not cfg.tool_call_parser:
        raise UsageError("--enable-auto-tool-choice requires --tool-call-parser")
    cfg.api_key = raw.get("api_key") or env.get("VLLM_API_KEY") or None
    try:
        cfg.shutdown_timeout = float(raw.get("shutdown_timeout", 0))
    except ValueError:
        raise UsageError("argument --shutdown-timeout: not a number") from None

    cfg.loading_seconds = _env_float(env, "VLLM_SIM_LOADING_SECONDS", 0.0)
    cfg.never_ready = _env_bool(env, "VLLM_SIM_NEVER_READY")
    cfg.kv_pool_tokens = _env_int(env, "VLLM_SIM_KV_POOL_TOKENS", 4 * cfg.max_model_len)
    faults = {f.strip() for f in env.get("VLLM_SIM_FAULT", "").split(",") if f.strip()}
    unknown = faults - FAULTS
    if unknown:
        raise UsageError(f"VLLM_SIM_FAULT: unknown fault(s) {sorted(unknown)}; known: {sorted(FAULTS)}")
    cfg.faults = frozenset(faults)
    cfg.runtime_faults = _env_bool(env, "VLLM_SIM_RUNTIME_FAULTS")
    cfg.version = env.get("VLLM_SIM_VERSION", "").strip() or DEFAULT_VERSION
    cfg.prefill_tokens_per_s = _env_float(env, "VLLM_SIM_PREFILL_TOKENS_PER_S", 200000.0)
    if cfg.prefill_tokens_per_s <= 0:
        raise UsageError("VLLM_SIM_PREFILL_TOKENS_PER_S must be > 0")
    cfg.decode_token_seconds = _env_float(env, "VLLM_SIM_DECODE_TOKEN_SECONDS", 0.01)
    cfg.hol_blocking = _env_bool(env, "VLLM_SIM_HOL_BLOCKING")
    cfg.spec_acceptance = _env_float(env, "VLLM_SIM_SPEC_ACCEPTANCE", 0.7)
    if cfg.spec_acceptance > 1:
        raise UsageError("VLLM_SIM_SPEC_ACCEPTANCE must be in [0, 1]")
    cfg.default_max_tokens = _env_int(env, "VLLM_SIM_DEFAULT_MAX_TOKENS", 16, minimum=1)
    if "VLLM_SIM_REJECT_FIELDS" in env:
        cfg.reject_fields = frozenset(
            f.strip() for f in env["VLLM_SIM_REJECT_FIELDS"].split(",") if f.strip()
        )
    cfg.prefix_block_tokens = _env_int(env, "VLLM_SIM_PREFIX_BLOCK_TOKENS", cfg.block_size, minimum=1)
    cfg.quiet = _env_bool(env, "VLLM_SIM_QUIET")
    cfg.shards = _env_int(env, "VLLM_SIM_SHARDS", 0)
    cfg.start_failure = env.get("VLLM_SIM_START_FAILURE", "").strip() or None
    if cfg.start_failure and cfg.start_failure not in sim_startup.START_FAILURES:
        raise UsageError(
            f"VLLM_SIM_START_FAILURE={cfg.start_failure!r}; known: {sorted(sim_startup.START_FAILURES)}"
        )
    cfg.crash_after_seconds = _env_float(env, "VLLM_SIM_CRASH_AFTER_SECONDS", 0.0)
    return cfg


# --------------------------------------------------------------------------------------
# tokenizer: a token is a run of 1-4 word characters or one other non-space character,
# together with the whitespace before it.  Concatenating the pieces gives the text back
# (trailing whitespace aside), so streamed pieces add up to the final content.
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------
# arithmetic: found in the last user message and evaluated without eval()
# --------------------------------------------------------------------------------------

_CHAR_MAP = {
    "×": "*",
    "✕": "*",
    "✖": "*",
    "·": "*",
    "⋅": "*",
    "∗": "*",
    "＊": "*",
    "÷": "/",
    "／": "/",
    "−": "-",
    "－": "-",
    "＋": "+",
    "（": "(",
    "）": ")",
    "＝": "=",
}
_CHAR_MAP.update({chr(0xFF10 + d): str(d) for d in range(10)})
_TRANSLATE = str.maketrans(_CHAR_MAP)
_WORD_OPS = [
    (re.compile(r"\bmultiplied\s+by\b|\btimes\b|\bmultiply\b", re.IGNORECASE), "*"),
    (re.compile(r"\bdivided\s+by\b", re.IGNORECASE), "/"),
    (re.compile(r"\bplus\b", re.IGNORECASE), "+"),
    (re.compile(r"\bminus\b", re.IGNORECASE), "-"),
    (re.compile(r"\bto\s+the\s+power\s+of\b", re.IGNORECASE), "^"),
    (re.compile(r"乘以?"), "*"),
    (re.compile(r"除以"), "/"),
    (re.compile(r"加上?"), "+"),
    (re.compile(r"减去?"), "-"),
]
_X_MUL = re.compile(r"(?<=[\d)])\s*[xX]\s*(?=[\d(])")
_CANDIDATE = re.compile(r"[\d.()+\-*/^ \t]+")
_ATOM_RE = re.compile(r"\s*(\d+(?:\.\d+)?|\*\*|[-+*/^()])")


class _ParseError(Exception):
    pass


class _Parser:
    def __init__(self, tokens: list):
        self.toks = tokens
        self.i = 0
        self.binops = 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self):
        tok = self.peek()
        if tok is None:
            raise _ParseError("unexpected end")
        self.i += 1
        return tok

    def parse(self) -> Fraction:
        value = self.expr()
        if self.i != len(self.toks):
            raise _ParseError("trailing tokens")
        return value

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            self.binops += 1
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.unary()
            self.binops += 1
            if op == "*":
                value = value * rhs
            else:
                if rhs == 0:
                    raise ZeroDivisionError
                value = value / rhs
        return value

    def unary(self) -> Fraction:
        if self.peek() in ("-", "+"):
            op = self.take()
            value = self.unary()
            return -value if op == "-" else value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() in ("^", "**"):
            self.take()
            exp = self.unary()
            self.binops += 1
            if exp.denominator != 1 or abs(exp) > 64:
                raise _ParseError("exponent out of range")
            if base == 0 and exp < 0:
                raise ZeroDivisionError
            if abs(base.numerator) > 10**12 or base.denominator > 10**12:
                raise _ParseError("base out of range")
            return base ** int(exp)
        return base

    def atom(self) -> Fraction:
        tok = self.take()
        if tok == "(":
            value = self.expr()
            if self.take() != ")":
                raise _ParseError("expected )")
            return value
        if tok[0].isdigit():
            if len(tok) > 40:
                raise _ParseError("number too long")
            return Fraction(tok)
        raise _ParseError(f"unexpected {tok}")


def _lex(text: str) -> list | None:
    toks = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _ATOM_RE.match(text, pos)
        if not m:
            return None
        toks.append(m.group(1))
        pos = m.end()
    return toks


def format_number(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.10f}".rstrip("0").rstrip(".")
    return text if text not in ("-0", "") else "0"


@dataclass
class Arithmetic:
    expression: str
    value: Fraction | None  # None: division by zero
    result: str


def find_arithmetic(text: str) -> Arithmetic | None:
    """Find and evaluate the last arithmetic expression in text (13*17, 13 x 17, 12+30, with a multiplication sign ...)."""
    s = (text or "").translate(_TRANSLATE)
    for pattern, op in _WORD_OPS:
        s = pattern.sub(f" {op} ", s)
    s = _X_MUL.sub("*", s)
    candidates = [m.group().strip(" \t.") for m in _CANDIDATE.finditer(s)]
    for cand in reversed(candidates):
        if len(cand) > 400 or not re.search(r"\d", cand):
            continue
        toks = _lex(cand)
        if not toks:
            continue
        found = _best_window(toks)
        if found is not None:
            return found
    return None


def _best_window(toks: list) -> Arithmetic | None:
    n = len(toks)
    for length in range(n, 2, -1):
        for start in range(n - length, -1, -1):
            window = toks[start : start + length]
            parser = _Parser(window)
            try:
                value = parser.parse()
            except ZeroDivisionError:
                expr = "".join(window)
                return Arithmetic(expr, None, "undefined")
            except _ParseError:
                continue
            if parser.binops >= 1:
                return Arithmetic("".join(window), value, format_number(value))
    return None


# --------------------------------------------------------------------------------------
# tool-call arguments from the request's JSON schema
# --------------------------------------------------------------------------------------

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
    functions = [
        t.get("function") for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)
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


# --------------------------------------------------------------------------------------
# what to answer: a plan of tokens on channels reasoning / content / tool
# --------------------------------------------------------------------------------------

FILLER = (
    "This is filler text from the vLLM protocol simulator, a test double that runs no "
    "model and knows nothing. "
)
_FILLER_PIECES = tokenize(FILLER)


def filler_pieces(n: int) -> list:
    reps = n // len(_FILLER_PIECES) + 1
    return (_FILLER_PIECES * reps)[:n]


@dataclass
class Plan:
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


def make_plan(cfg: Config, body: dict, messages: list, max_tokens: int | None) -> Plan:
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
        fn = choose_function(tools, tool_choice, prompt)
        if fn is not None:
            args = build_arguments(fn.get("parameters") or {}, prompt)
            tool = {
                "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
                "name": fn["name"],
                "arguments": json.dumps(args, ensure_ascii=False),
            }
            reasoning = f"The user's request needs the tool {fn['name']}; calling it."
            if effort in ("low", "minimal"):
                reasoning = f"call {fn['name']}"
    if tool is None and content is None:
        arith = find_arithmetic(prompt) if last_role != "tool" else None
        if last_role == "tool":
            result = content_text(messages[-1].get("content"))
            content = f"The tool returned: {result[:400]}"
            reasoning = "A tool result arrived; summarise it for the user."
        elif arith is not None:
            answer = arith.result
            if "wrong-answer" in faults and arith.value is not None:
                answer = format_number(arith.value + 1)
            content = answer
            reasoning = _arith_reasoning(arith, answer, effort)
        else:
            fixed_length = True

    if not thinking:
        reasoning = None
    inline = bool(reasoning) and (not cfg.reasoning_parser or "inline-reasoning" in faults)
    if inline:
        content = f"<think>{reasoning}</think>{content or ''}"
        reasoning = None

    tokens: list = []
    if fixed_length:
        n = max_tokens if max_tokens is not None else cfg.default_max_tokens
        tokens = [("content", p) for p in filler_pieces(n)]
        return Plan(tokens, "length" if max_tokens is not None else "stop", None, inline)
    tokens += [("reasoning", p) for p in tokenize(reasoning or "")]
    tokens += [("content", p) for p in tokenize(content or "")]
    if tool is not None:
        tokens.append(("tool_name", tool["name"]))
        tokens += [("tool_args", p) for p in tokenize(tool["arguments"])]
    if max_tokens is not None and len(tokens) > max_tokens:
        return Plan(tokens[:max_tokens], "length", None, inline)
    return Plan(tokens, "tool_calls" if tool else "stop", tool, inline)


# --------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------


def fmt_float(value: float) -> str:
    """prometheus_client's floatToGoString."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


def _labels(pairs: list) -> str:
    if not pairs:
        return ""
    body = ",".join(
        '{}="{}"'.format(k, str(v).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\""))
        for k, v in pairs
    )
    return "{" + body + "}"


def _one_two_five(limit: int) -> list:
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > limit:
                return out
            out.append(float(v))
        exp += 1


TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0]  # fmt: skip
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip


class Histogram:
    def __init__(self, buckets: list):
        self.buckets = list(buckets)
        self.counts = [0] * len(self.buckets)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
                break

    def lines(self, name: str, base: list) -> list:
        out, cum = [], 0
        for i, bound in enumerate(self.buckets):
            cum += self.counts[i]
            out.append(f"{name}_bucket{_labels([*base, ('le', fmt_float(bound))])} {cum}.0")
        out.append(f"{name}_bucket{_labels([*base, ('le', '+Inf')])} {self.count}.0")
        out.append(f"{name}_count{_labels(base)} {self.count}.0")
        out.append(f"{name}_sum{_labels(base)} {fmt_float(self.total)}")
        return out


class Metrics:
    FINISH_REASONS = ("stop", "length", "abort", "error")

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.preemptions = 0
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted = 0
        self.success = {r: 0 for r in self.FINISH_REASONS}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(LATENCY_BUCKETS)
        self.queue = Histogram(LATENCY_BUCKETS)
        self.prefill = Histogram(LATENCY_BUCKETS)
        self.decode = Histogram(LATENCY_BUCKETS)
        self.req_prompt = Histogram(_one_two_five(cfg.max_model_len))
        self.req_gen = Histogram(_one_two_five(cfg.max_model_len))

    def render(self, running: int, waiting: int, by_reason: dict, usage: float) -> str:
        cfg = self.cfg
        base = [("engine", ENGINE_ID), ("model_name", cfg.name)]
        v = cfg.version_tuple
        out: list = []

        def family(name: str, typ: str, help_: str, samples: list) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {typ}")
            out.extend(samples)

        def simple(name: str, typ: str, help_: str, value: float) -> None:
            family(name, typ, help_, [f"{name}{_labels(base)} {fmt_float(value)}"])

        simple(
            "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", running
        )
        simple("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting)
        if v >= (0, 20, 0):
            family(
                "vllm:num_requests_waiting_by_reason",
                "gauge",
                "Number of requests waiting to be processed, by reason.",
                [
                    f"vllm:num_requests_waiting_by_reason{_labels([*base, ('reason', r)])} "
                    f"{fmt_float(by_reason.get(r, 0))}"
                    for r in ("capacity", "deferred")
                ],
            )
        simple("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage)
        if v < (0, 12, 0):
            simple(
                "vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.", usage
            )
        simple(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            self.prefix_queries,
        )
        simple(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            self.prefix_hits,
        )
        simple(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            self.preemptions,
        )
        simple(
            "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", self.prompt_tokens
        )
        simple(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            self.generation_tokens,
        )
        family(
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            [
                f"vllm:request_success_total"
                f"{_labels([base[0], ('finished_reason', r), base[1]])} {fmt_float(n)}"
                for r, n in self.success.items()
            ],
        )
        hists = [
            ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", self.req_prompt),
            ("vllm:request_generation_tokens", "Number of generation tokens processed.", self.req_gen),
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl),
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e),
            (
                "vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
                self.queue,
            ),
            (
                "vllm:request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
                self.prefill,
            ),
            (
                "vllm:request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                self.decode,
            ),
        ]
        for name, help_, hist in hists:
            family(name, "histogram", help_, hist.lines(name, base))
        if cfg.spec_tokens:
            simple(
                "vllm:spec_decode_num_drafts_total",
                "counter",
                "Number of spec decoding drafts.",
                self.spec_drafts,
            )
            simple(
                "vllm:spec_decode_num_draft_tokens_total",
                "counter",
                "Number of draft tokens.",
                self.spec_draft_tokens,
            )
            simple(
                "vllm:spec_decode_num_accepted_tokens_total",
                "counter",
                "Number of accepted tokens.",
                self.spec_accepted,
            )
        info = {
            "block_size": str(cfg.block_size),
            "cache_dtype": cfg.kv_cache_dtype,
            "calculate_kv_scales": "False",
            "cpu_offload_gb": "0",
            "enable_prefix_caching": str(bool(cfg.prefix_caching)),
            "engine": ENGINE_ID,
            "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
            "is_attention_free": "False",
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(cfg.num_gpu_blocks),
            "num_gpu_blocks_override": "None",
            "prefix_caching_hash_algo": "sha256",
            "sliding_window": "None",
            "swap_space": "4",
        }
        family(
            "vllm:cache_config_info",
            "gauge",
            "Information of the LLMEngine CacheConfig",
            [f"vllm:cache_config_info{_labels(sorted(info.items()))} 1.0"],
        )
        return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------
# the engine: FCFS admission into a KV pool, prefix cache, prefill, decode
# --------------------------------------------------------------------------------------


class Aborted(Exception):
    """The client went away or the server is stopping."""


WAITING, RUNNING, DONE = "waiting", "running", "done"


@dataclass(eq=False)
class SimRequest:
    request_id: str
    prompt_pieces: list
    plan: Plan
    reserve: int  # KV tokens held while running: prompt + (max_tokens or planned output)
    arrival: float = field(default_factory=time.monotonic)
    state: str = WAITING
    admitted_at: float = 0.0
    first_token_at: float = 0.0
    generated: int = 0
    cached_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_pieces)


class Engine:
    def __init__(self, cfg: Config, stop: threading.Event):
        self.cfg = cfg
        self.stop = stop
        self.cond = threading.Condition()
        self.waiting: deque = deque()
        self.running: set = set()
        self.reserved = 0
        self.metrics = Metrics(cfg)
        self.hol = threading.Lock()
        self.prefix: OrderedDict = OrderedDict()
        self.prefix_capacity = max(1, cfg.pool_tokens // cfg.prefix_block_tokens)
        self.prefix_lock = threading.Lock()

    # ---- scheduler -------------------------------------------------------------------
    def _schedule(self) -> None:
        """Admit from the head of the queue, in order (FCFS), while the head fits."""
        while self.waiting:
            head = self.waiting[0]
            if len(self.running) >= self.cfg.max_num_seqs:
                break
            if head.reserve > self.cfg.pool_tokens - self.reserved:
                break
            self.waiting.popleft()
            head.state = RUNNING
            head.admitted_at = time.monotonic()
            self.running.add(head)
            self.reserved += head.reserve
        self.cond.notify_all()

    def waiting_reasons(self) -> dict:
        """capacity: the head of the queue does not fit in the free KV pool;
        deferred: everyone else (held by --max-num-seqs or queued behind the head)."""
        counts = {"capacity": 0, "deferred": 0}
        for i, req in enumerate(self.waiting):
            if i == 0 and req.reserve > self.cfg.pool_tokens - self.reserved:
                counts["capacity"] += 1
            else:
                counts["deferred"] += 1
        return counts

    def snapshot(self) -> tuple:
        with self.cond:
            pool = self.cfg.pool_tokens
            usage = min(1.0, self.reserved / pool) if pool else 0.0
            return len(self.running), len(self.waiting), self.waiting_reasons(), usage

    def render_metrics(self) -> str:
        running, waiting, reasons, usage = self.snapshot()
        with self.cond:
            return self.metrics.render(running, waiting, reasons, usage)

    def _wait_admitted(self, req: SimRequest, alive: Callable[[], bool]) -> None:
        with self.cond:
            self.waiting.append(req)
            self._schedule()
            while req.state == WAITING:
                if self.stop.is_set() or not alive():
                    self.waiting.remove(req)
                    self.metrics.success["abort"] += 1
                    self._schedule()
                    raise Aborted
                self.cond.wait(0.1)

    def _release(self, req: SimRequest, reason: str) -> None:
        with self.cond:
            if req.state == RUNNING:
                self.running.discard(req)
                self.reserved -= req.reserve
            req.state = DONE
            self.metrics.success[reason] = self.metrics.success.get(reason, 0) + 1
            self._schedule()

    # ---- timing helpers --------------------------------------------------------------
    def _sleep_until(self, deadline: float, alive: Callable[[], bool]) -> None:
        next_check = time.monotonic() + 0.1
        while True:
            now = time.monotonic()
            if now >= deadline:
                return
            if self.stop.wait(min(deadline - now, 0.05)):
                raise Aborted
            if time.monotonic() >= next_check:
                if not alive():
                    raise Aborted
                next_check = time.monotonic() + 0.1

    def _acquire_engine(self, alive: Callable[[], bool]) -> None:
        while not self.hol.acquire(timeout=0.1):
            if self.stop.is_set() or not alive():
                raise Aborted

    # ---- prefix cache ----------------------------------------------------------------
    def _block_hashes(self, pieces: list) -> list:
        bs = self.cfg.prefix_block_tokens
        out, h = [], None
        for b in range(len(pieces) // bs):
            h = hash((h, tuple(pieces[b * bs : (b + 1) * bs])))
            out.append(h)
        return out

    def _prefix_lookup(self, hashes: list, n_prompt: int) -> int:
        if not self.cfg.prefix_caching:
            return 0
        hits = 0
        with self.prefix_lock:
            for h in hashes:
                if h not in self.prefix:
                    break
                self.prefix.move_to_end(h)
                hits += self.cfg.prefix_block_tokens
        return max(0, min(hits, n_prompt - 1))

    def _prefix_insert(self, hashes: list) -> None:
        if not self.cfg.prefix_caching:
            return
        with self.prefix_lock:
            for h in hashes:
                self.prefix[h] = None
                self.prefix.move_to_end(h)
            while len(self.prefix) > self.prefix_capacity:
                self.prefix.popitem(last=False)

    # ---- a request's life ------------------------------------------------------------
    def execute(
        self,
        req: SimRequest,
        on_token: Callable[[int, str, str], None],
        alive: Callable[[], bool],
        on_admitted: Callable[[], None] | None = None,
    ) -> None:
        """Queue, prefill, decode.  on_token(i, channel, piece) runs at each token's time."""
        self._wait_admitted(req, alive)
        reason = "abort"
        try:
            if on_admitted:
                on_admitted()
            cfg = self.cfg
            hashes = self._block_hashes(req.prompt_pieces)
            req.cached_tokens = self._prefix_lookup(hashes, req.prompt_tokens)
            prefill_s = (req.prompt_tokens - req.cached_tokens) / cfg.prefill_tokens_per_s
            if cfg.hol_blocking:
                self._acquire_engine(alive)
                try:
                    self._sleep_until(time.monotonic() + prefill_s, alive)
                finally:
                    self.hol.release()
            else:
                self._sleep_until(time.monotonic() + prefill_s, alive)
            self._prefix_insert(hashes)
            now = time.monotonic()
            req.first_token_at = now
            with self.cond:
                m = self.metrics
                m.prompt_tokens += req.prompt_tokens
                m.prefix_queries += req.prompt_tokens if cfg.prefix_caching else 0
                m.prefix_hits += req.cached_tokens
                m.req_prompt.observe(req.prompt_tokens)
                m.queue.observe(req.admitted_at - req.arrival)
                m.prefill.observe(now - req.admitted_at)
                m.ttft.observe(now - req.arrival)
            last = now
            for i, (channel, piece) in enumerate(req.plan.tokens):
                if i:
                    self._sleep_until(last + cfg.decode_token_seconds, alive)
                    if cfg.hol_blocking:  # a decode step waits for a prefill in progress
                        self._acquire_engine(alive)
                        self.hol.release()
                    t = time.monotonic()
                    with self.cond:
                        self.metrics.itl.observe(t - last)
                    last = t
                with self.cond:
                    self.metrics.generation_tokens += 1
                req.generated = i + 1
                on_token(i, channel, piece)
            end = time.monotonic()
            with self.cond:
                m = self.metrics
                m.e2e.observe(end - req.arrival)
                m.decode.observe(end - req.first_token_at)
                m.req_gen.observe(req.generated)
                k = cfg.spec_tokens
                if k and req.generated > 1:
                    steps = max(1, math.ceil(req.generated / (1 + k * cfg.spec_acceptance)))
                    m.spec_drafts += steps
                    m.spec_draft_tokens += steps * k
                    m.spec_accepted += min(round(steps * k * cfg.spec_acceptance), req.generated - 1)
            reason = "length" if req.plan.finish_reason == "length" else "stop"
        finally:
            self._release(req, reason)


# --------------------------------------------------------------------------------------
# HTTP layer
# --------------------------------------------------------------------------------------


class HTTPError(Exception):
    def __init__(self, status: int, message: str, err_type: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param


def error_body(status: int, message: str, err_type: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def bad_request(message: str, param: str | None = None) -> HTTPError:
    return HTTPError(400, message, "BadRequestError", param)


def _reason_phrase(status: int) -> str:
    return BaseHTTPRequestHandler.responses.get(status, ("",))[0]


class SimServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(self, address: tuple, cfg: Config, engine: Engine, stop: threading.Event):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.cfg = cfg
        self.engine = engine
        self.stop = stop
        self.vocab: dict = {}
        self.vocab_lock = threading.Lock()
        self.in_flight = 0
        self.in_flight_lock = threading.Lock()
        self.draining = threading.Event()
        super().__init__(address, Handler)

    def drain(self, timeout: float) -> None:
        """``--shutdown-timeout``: new connections are refused (the socket is closed), requests
        in flight get up to ``timeout`` seconds to finish; then the rest are aborted."""
        self.draining.set()
        self.server_close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.in_flight_lock:
                if self.in_flight == 0:
                    return
            time.sleep(0.05)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: SimServer

    # ---- plumbing ----------------------------------------------------------------------
    def version_string(self) -> str:
        return "uvicorn"

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        if self.server.cfg.quiet:
            return
        try:
            status = int(code)
        except (TypeError, ValueError):
            status = 0
        host, port = self.client_address[:2]
        sys.stderr.write(
            f'INFO:     {host}:{port} - "{self.requestline}" {status} {_reason_phrase(status)}\n'
        )

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.cfg.quiet:
            sys.stderr.write("WARNING:  " + (format % args) + "\n")

    def alive(self) -> bool:
        """False once the client has closed (or reset) its connection."""
        if self.server.stop.is_set():
            return False
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return True
            return bool(self.connection.recv(1, socket.MSG_PEEK))
        except (OSError, ValueError):
            return False

    def send_body(
        self, status: int, body: bytes, content_type: str | None, headers: dict | None = None
    ) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, obj: Any) -> None:
        self.send_body(
            status, json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode(), "application/json"
        )

    def send_error_json(self, err: HTTPError) -> None:
        self.send_json(err.status, error_body(err.status, err.message, err.err_type, err.param))

    def read_body(self) -> bytes:
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def read_json(self) -> dict:
        raw = self.read_body()
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            raise bad_request(f"JSON decode error: {exc}") from None
        if not isinstance(body, dict):
            raise bad_request("Request body must be a JSON object")
        return body

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def write_chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError:
            raise Aborted from None

    def _data_field(self) -> bytes:
        # The SSE spec allows `data:` with or without one space; vLLM sends the space.
        return b"data:" if "sse-no-space" in self.server.cfg.faults else b"data: "

    def write_sse(self, obj: Any) -> None:
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
        self.write_chunk(self._data_field() + data + b"\n\n")

    def end_stream(self) -> None:
        self.write_chunk(self._data_field() + b"[DONE]\n\n")
        self.write_chunk(b"")

    # ---- dispatch ----------------------------------------------------------------------
    ROUTES: ClassVar[dict] = {
        ("GET", "/health"): "health",
        ("GET", "/ping"): "health",
        ("POST", "/ping"): "health",
        ("GET", "/version"): "version",
        ("GET", "/v1/models"): "models",
        ("GET", "/metrics"): "metrics",
        ("POST", "/tokenize"): "tokenize",
        ("POST", "/detokenize"): "detokenize",
        ("POST", "/v1/chat/completions"): "chat",
        ("POST", "/v1/completions"): "completions",
        ("GET", "/sim/faults"): "sim_faults",
        ("PUT", "/sim/faults"): "sim_faults",
    }

    def dispatch(self) -> None:
        with self.server.in_flight_lock:
            self.server.in_flight += 1
        try:
            self._dispatch()
        finally:
            if self.server.draining.is_set():
                self.close_connection = True  # what uvicorn does while shutting down
            with self.server.in_flight_lock:
                self.server.in_flight -= 1

    def _dispatch(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        method = "GET" if self.command == "HEAD" else self.command
        route = self.ROUTES.get((method, path))
        if route == "sim_faults" and not self.server.cfg.runtime_faults:
            route = None  # the switch exists only with VLLM_SIM_RUNTIME_FAULTS=1
            self.read_body()  # so that the connection's next request starts where it should
        try:
            if route is None:
                known = any(p == path for (_, p) in self.ROUTES) and path != "/sim/faults"
                status = 405 if known else 404
                detail = "Method Not Allowed" if known else "Not Found"
                self.send_json(status, {"detail": detail})
                return
            api_key = self.server.cfg.api_key
            authorization = self.headers.get("authorization", "")
            if api_key and path.startswith("/v1") and authorization != f"Bearer {api_key}":
                self.send_json(401, {"error": "Unauthorized"})
                return
            getattr(self, "route_" + route)()
        except HTTPError as err:
            self.send_error_json(err)
        except Aborted:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = dispatch

    # ---- simple endpoints --------------------------------------------------------------
    def route_sim_faults(self) -> None:
        """The runtime fault switch (``VLLM_SIM_RUNTIME_FAULTS=1``): ``PUT {"faults": [...]}`` replaces
        the faults of the running simulator (``[]`` heals it); ``GET`` shows them."""
        cfg = self.server.cfg
        if self.command == "PUT":
            body = self.read_json()
            wanted = body.get("faults")
            if not isinstance(wanted, list) or not all(isinstance(f, str) for f in wanted):
                raise bad_request('faults must be a list of fault names, e.g. {"faults": ["wrong-answer"]}')
            unknown = set(wanted) - FAULTS
            if unknown:
                raise bad_request(f"unknown fault(s) {sorted(unknown)}; known: {sorted(FAULTS)}")
            # One assignment of an immutable set: a request in flight sees the old or the new faults.
            cfg.faults = frozenset(wanted)
            log(cfg, f"faults switched at runtime: {sorted(cfg.faults)}")
        self.send_json(200, {"faults": sorted(cfg.faults)})

    def route_health(self) -> None:
        self.send_body(200, b"", None)

    def route_version(self) -> None:
        self.send_json(200, {"version": self.server.cfg.version})

    def _trickle(self, body: bytes) -> None:
        """The 'models-trickle' fault: headers at once, then the body one byte a second."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        for i in range(len(body)):
            if not self.alive() or self.server.stop.wait(0 if i == 0 else 1.0):
                break
            self.wfile.write(body[i : i + 1])
            self.wfile.flush()
        self.close_connection = True

    def route_models(self) -> None:
        cfg = self.server.cfg
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": cfg.model,
                "parent": None,
                "max_model_len": cfg.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid.uuid4().hex}",
                        "object": "model_permission",
                        "created": created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in cfg.served_names
        ]
        if "models-trickle" in cfg.faults:
            self._trickle(json.dumps({"object": "list", "data": data}).encode())
            return
        self.send_json(200, {"object": "list", "data": data})

    def route_metrics(self) -> None:
        body = self.server.engine.render_metrics().encode()
        self.send_body(200, body, "text/plain; version=0.0.4; charset=utf-8")

    def check_model(self, body: dict) -> None:
        model = body.get("model")
        cfg = self.server.cfg
        if model not in (None, "") and model not in cfg.served_names:
            raise HTTPError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")

    def route_tokenize(self) -> None:
        body = self.read_json()
        self.check_model(body)
        if "messages" in body:
            messages = body.get("messages")
            if not isinstance(messages, list):
                raise bad_request("messages must be a list")
            text = render_chat(messages, body.get("tools"))
        elif "prompt" in body:
            text = str(body.get("prompt"))
        else:
            raise bad_request("Either prompt or messages is required")
        pieces = tokenize(text)
        ids = [token_id(p) for p in pieces]
        with self.server.vocab_lock:
            if len(self.server.vocab) < 1_000_000:
                self.server.vocab.update({token_id(p): p for p in pieces})
        self.send_json(
            200,
            {
                "count": len(pieces),
                "max_model_len": self.server.cfg.max_model_len,
                "tokens": ids,
                "token_strs": pieces if body.get("return_token_strs") else None,
            },
        )

    def route_detokenize(self) -> None:
        body = self.read_json()
        self.check_model(body)
        tokens = body.get("tokens")
        if not isinstance(tokens, list):
            raise bad_request("tokens must be a list of integers")
        with self.server.vocab_lock:
            text = "".join(self.server.vocab.get(t, "<unk>") for t in tokens)
        self.send_json(200, {"prompt": text})

    # ---- generation --------------------------------------------------------------------
    def _common_checks(self, body: dict) -> int | None:
        cfg = self.server.cfg
        for name in sorted(cfg.reject_fields & set(body)):
            detail = [
                {
                    "type": "extra_forbidden",
                    "loc": ("body", name),
                    "msg": "Extra inputs are not permitted",
                    "input": body[name],
                }
            ]
            raise bad_request(str(detail), name)
        self.check_model(body)
        max_tokens = body.get("max_completion_tokens")
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        return max_tokens

    def _length_check(self, n_prompt: int, max_tokens: int | None) -> None:
        limit = self.server.cfg.max_model_len
        if n_prompt >= limit:
            raise bad_request(
                f"This model's maximum context length is {limit} tokens. However, your "
                f"request has {n_prompt} input tokens. Please reduce the length of the "
                "input messages.",
                "input_tokens",
            )
        if max_tokens is not None and n_prompt + max_tokens > limit:
            raise bad_request(
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                f"model's maximum context length is {limit} tokens and your request has "
                f"{n_prompt} input tokens ({max_tokens} > {limit} - {n_prompt}).",
                "max_tokens",
            )

    def _stream_fault(self, faults: frozenset, chunk: dict) -> dict | None:
        """A stream chunk bent the way a fault says (None: something else was sent instead)."""
        if "stream-error" in faults:
            # What vLLM sends when the engine fails mid-stream: an error object, then [DONE].
            self.write_sse(error_body(500, "EngineCore encountered an issue.", "InternalServerError"))
            self.end_stream()
            raise Aborted
        if "stream-bad-json" in faults:
            self.write_chunk(self._data_field() + b'{"choices": [{"delta": \n\n')
            return None
        if "stream-choices-string" in faults:
            chunk["choices"] = ["x"]
        elif "stream-delta-string" in faults:
            chunk["choices"][0]["delta"] = "abc"
        return chunk

    def _hold_silently(self) -> None:
        """The 'silent' fault: the request was read; nothing is ever sent back."""
        while self.alive():
            if self.server.stop.wait(0.1):
                break
        self.close_connection = True

    def route_chat(self) -> None:
        cfg = self.server.cfg
        if "http-500" in cfg.faults:
            self.read_body()
            self.send_json(500, error_body(500, "EngineCore encountered an issue.", "InternalServerError"))
            return
        body = self.read_json()
        max_tokens = self._common_checks(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("messages: Field required (a non-empty list)", "messages")
        if not all(isinstance(m, dict) for m in messages):
            raise bad_request("messages: every message must be an object", "messages")
        tools = body.get("tools") or None
        if tools is not None and not isinstance(tools, list):
            raise bad_request("tools must be a list", "tools")
        tool_choice = body.get("tool_choice")
        if tools and tool_choice is None:
            tool_choice = "auto"
        if tool_choice == "auto" and tools and not cfg.auto_tool_choice:
            raise bad_request(
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                "tool_choice",
            )
        if tool_choice not in (None, "auto", "none", "required") and not isinstance(tool_choice, dict):
            raise bad_request(f"Invalid tool_choice: {tool_choice!r}", "tool_choice")
        if tool_choice not in (None, "none") and not tools:
            raise bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice")
        if isinstance(tool_choice, dict):
            wanted = (tool_choice.get("function") or {}).get("name")
            names = [(t.get("function") or {}).get("name") for t in tools or []]
            if wanted not in names:
                raise bad_request(f"Tool '{wanted}' has not been passed in `tools`.", "tool_choice")
        pieces = tokenize(render_chat(messages, tools))
        self._length_check(len(pieces), max_tokens)
        if "silent" in cfg.faults:
            self._hold_silently()
            return
        body = dict(body, tool_choice=tool_choice) if tools else body
        plan = make_plan(cfg, body, messages, max_tokens)
        self._generate(body, pieces, plan, max_tokens, chat=True)

    def route_completions(self) -> None:
        cfg = self.server.cfg
        if "http-500" in cfg.faults:
            self.read_body()
            self.send_json(500, error_body(500, "EngineCore encountered an issue.", "InternalServerError"))
            return
        body = self.read_json()
        max_tokens = self._common_checks(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            prompt = "".join(str(p) for p in prompt)
        if not isinstance(prompt, str):
            raise bad_request("prompt: Field required", "prompt")
        if max_tokens is None:
            max_tokens = cfg.default_max_tokens
        pieces = tokenize(prompt)
        self._length_check(len(pieces), max_tokens)
        if "silent" in cfg.faults:
            self._hold_silently()
            return
        arith = find_arithmetic(prompt)
        if arith is not None:
            answer = arith.result
            if "wrong-answer" in cfg.faults and arith.value is not None:
                answer = format_number(arith.value + 1)
            toks = [("content", p) for p in tokenize(" " + answer)]
            finish = "stop"
            if len(toks) > max_tokens:
                toks, finish = toks[:max_tokens], "length"
        else:
            toks, finish = [("content", p) for p in filler_pieces(max_tokens)], "length"
        plan = Plan(toks, finish, None, False)
        self._generate(body, pieces, plan, max_tokens, chat=False)

    def _reasoning_keys(self) -> list:
        cfg = self.server.cfg
        if "reasoning-content" in cfg.faults:
            return ["reasoning_content"]
        v = cfg.version_tuple
        if v < (0, 11, 1):
            return ["reasoning_content"]
        if v < (0, 15, 0):
            return ["reasoning", "reasoning_content"]
        return ["reasoning"]

    def _usage(self, req: SimRequest, reasoning_tokens: int, chat: bool = True) -> dict:
        cfg = self.server.cfg
        usage: dict = {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + req.generated,
            "completion_tokens": req.generated,
            "prompt_tokens_details": None,
        }
        parsed = chat and cfg.reasoning_parser and not req.plan.inline_reasoning
        if parsed and cfg.version_tuple >= (0, 30, 0):
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
        return usage

    def _generate(self, body: dict, pieces: list, plan: Plan, max_tokens: int | None, chat: bool) -> None:
        cfg = self.server.cfg
        engine = self.server.engine
        planned = len(plan.tokens) if max_tokens is None else max_tokens
        req = SimRequest(
            request_id=("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
            prompt_pieces=pieces,
            plan=plan,
            reserve=len(pieces) + planned,
        )
        created = int(time.time())
        stream = bool(body.get("stream"))
        stream_options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
        include_usage = bool(stream_options.get("include_usage"))
        continuous = bool(stream_options.get("continuous_usage_stats"))
        reasoning_keys = self._reasoning_keys()
        counts = {"reasoning": 0}
        collected: list = []
        tool = plan.tool_call

        def base_chunk(choices: list) -> dict:
            return {
                "id": req.request_id,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created,
                "model": cfg.name,
                "choices": choices,
            }

        def chunk_usage(obj: dict) -> dict:
            if include_usage and continuous:
                obj["usage"] = self._usage(req, counts["reasoning"], chat)
            return obj

        def on_token(i: int, channel: str, piece: str) -> None:
            if channel == "reasoning":
                counts["reasoning"] += 1
            if not stream:
                collected.append((channel, piece))
                return
            if not chat:
                choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": None}
                self.write_sse(chunk_usage(base_chunk([choice])))
                return
            if i == 0:
                first = {"role": "assistant", "content": ""}
                choice = {"index": 0, "delta": first, "logprobs": None, "finish_reason": None}
                self.write_sse(chunk_usage(base_chunk([choice])))
            if channel == "reasoning":
                delta = {key: piece for key in reasoning_keys}
            elif channel == "content":
                delta = {"content": piece}
            elif channel == "tool_name":
                call_id = tool["id"] if tool else f"chatcmpl-tool-{uuid.uuid4().hex}"
                delta = {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": piece, "arguments": ""},
                        }
                    ]
                }
            else:
                delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
            chunk: dict | None = chunk_usage(base_chunk([choice]))
            if i >= STREAM_FAULT_AT and cfg.faults:
                chunk = self._stream_fault(cfg.faults, chunk)
            if chunk is not None:
                self.write_sse(chunk)

        if stream:
            # Headers go out at once (so access logs say 200 even if the engine never
            # schedules the request, as in the Ascend article); the body waits.
            self.start_stream()
        engine.execute(req, on_token, self.alive)
        finish = plan.finish_reason

        if stream:
            choice = {"index": 0, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            if chat:
                choice["delta"] = {}
            else:
                choice["text"] = ""
            self.write_sse(chunk_usage(base_chunk([choice])))
            if include_usage:
                final = base_chunk([])
                final["usage"] = self._usage(req, counts["reasoning"], chat)
                self.write_sse(final)
            self.end_stream()
            return

        usage = self._usage(req, counts["reasoning"], chat)
        if not chat:
            text = "".join(p for _, p in collected)
            self.send_json(
                200,
                {
                    "id": req.request_id,
                    "object": "text_completion",
                    "created": created,
                    "model": cfg.name,
                    "choices": [
                        {
                            "index": 0,
                            "text": text,
                            "logprobs": None,
                            "finish_reason": finish,
                            "stop_reason": None,
                            "prompt_logprobs": None,
                        }
                    ],
                    "usage": usage,
                },
            )
            return
        reasoning = "".join(p for c, p in collected if c == "reasoning")
        content = "".join(p for c, p in collected if c == "content")
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
        if "inline-reasoning" not in cfg.faults:
            for key in reasoning_keys:
                message[key] = reasoning or None
        if "content-parts" in cfg.faults and message["content"] is not None:
            message["content"] = [{"type": "text", "text": message["content"]}]
        if "tool-call-string" in cfg.faults:
            message["tool_calls"] = [json.dumps(call) for call in tool_calls]
        reply_message: Any = content if "message-string" in cfg.faults else message
        self.send_json(
            200,
            {
                "id": req.request_id,
                "object": "chat.completion",
                "created": created,
                "model": cfg.name,
                "choices": [
                    {
                        "index": 0,
                        "message": reply_message,
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                        "token_ids": None,
                    }
                ],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": usage,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "kv_transfer_params": None,
            },
        )


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------


def log(cfg: Config | None, message: str) -> None:
    if cfg is not None and cfg.quiet:
        return
    stamp = time.strftime("%m-%d %H:%M:%S")
    sys.stderr.write(f"INFO {stamp} [vllm_sim.py] {message}\n")
    sys.stderr.flush()


def main(argv: list | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if _env_bool(dict(os.environ), "VLLM_SIM_STRICT_FLAGS"):
        # The real parser's table (scripts/vllm_flags.py): vLLM refuses what it does not know.
        refused = sim_startup.strict_check(list(argv), sim_startup.known_flags())
        if refused:
            sys.stderr.write(f"{sim_startup.USAGE}\nvllm serve: error: {refused}\n")
            return 2
    try:
        cfg = parse_config(argv)
    except UsageError as exc:
        sys.stderr.write(f"vllm serve: error: {exc}\n")
        return 2
    if cfg.crash_after_seconds > 0:
        sim_startup.crash_after(cfg.crash_after_seconds)

    stop = threading.Event()
    holder: dict = {}

    def on_signal(signum: int, _frame: Any) -> None:
        server = holder.get("server")
        if server is None or cfg.shutdown_timeout <= 0:
            stop.set()  # in-flight requests are cut, as vLLM does without --shutdown-timeout
        if server is not None:
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    log(cfg, f"vLLM-protocol simulator (a test double, NOT a model) speaking vLLM {cfg.version}")
    log(
        cfg,
        f"model={cfg.model!r} served_model_name={cfg.served_names} "
        f"max_model_len={cfg.max_model_len} max_num_seqs={cfg.max_num_seqs} "
        f"block_size={cfg.block_size}",
    )
    if cfg.ignored:
        log(cfg, "ignoring flags the simulator does not model: " + " ".join(cfg.ignored))
    if cfg.faults:
        log(cfg, f"faults injected: {sorted(cfg.faults)}")
    if cfg.never_ready:
        log(cfg, "VLLM_SIM_NEVER_READY: the port will never be bound")
        stop.wait()
        return 0
    if cfg.loading_seconds > 0:
        log(
            cfg,
            f"loading weights (simulated) for {cfg.loading_seconds:g} s; "
            f"port {cfg.port} refuses connections meanwhile",
        )
    # vLLM's start-up milestones over the load (all at once without one); a start-up failure
    # strikes at its stage and exits 1, as the engine does.
    loaded = sim_startup.play_startup(
        cfg, cfg.loading_seconds, cfg.shards, cfg.start_failure, stop, quiet=cfg.quiet
    )
    if cfg.start_failure and not stop.is_set():
        return 1
    if not loaded:
        return 0

    engine = Engine(cfg, stop)
    try:
        server = SimServer((cfg.host, cfg.port), cfg, engine, stop)
    except OSError as exc:
        sys.stderr.write(f"ERROR: cannot bind {cfg.host}:{cfg.port}: {exc}\n")
        return 1
    holder["server"] = server
    if stop.is_set():
        server.server_close()
        return 0
    log(cfg, f"Starting vLLM API server 0 on http://{cfg.host}:{server.server_address[1]}")
    if not cfg.quiet:
        sys.stderr.write("INFO:     Application startup complete.\n")
        sys.stderr.flush()
    try:
        server.serve_forever(poll_interval=0.1)
        if cfg.shutdown_timeout > 0:
            log(cfg, f"draining: new connections refused, in-flight requests get {cfg.shutdown_timeout:g} s")
            server.drain(cfg.shutdown_timeout)
    finally:
        stop.set()
        server.server_close()
        if not cfg.quiet:
            sys.stderr.write("INFO:     Shutting down\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
