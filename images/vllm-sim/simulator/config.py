"""vLLM's command line and the ``VLLM_SIM_*`` environment, read into one ``Config``.

Like ``vllm serve``, the simulator takes ``[vllm] [serve] <model> --flags...``: the flags that
change what a client can observe set a field; every other flag is kept in ``Config.ignored``
(logged, never refused). The ``VLLM_SIM_*`` variables are the simulator's own knobs
(README.md beside the package lists them).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field

from simulator.hardware import HARDWARE
from simulator.startup import START_FAILURES

DEFAULT_VERSION = "0.33.0"
DEFAULT_MODEL = "vllm-sim/model"
DEFAULT_MAX_MODEL_LEN = 131072

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


class UsageError(Exception):
    """Bad command line or environment: printed, exit status 2."""


@dataclass
class Config:
    """What the simulator was started with: vLLM's flags, then its own ``VLLM_SIM_*`` knobs."""

    model: str = DEFAULT_MODEL
    served_names: list = field(default_factory=list)
    host: str = "0.0.0.0"
    port: int = 8000
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    max_num_seqs: int = 256
    block_size: int = 16
    num_gpu_blocks_override: int | None = None
    gpu_memory_utilization: float = 0.9
    kv_cache_dtype: str = "auto"
    speculative: dict | None = None
    prefix_caching: bool = True
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    auto_tool_choice: bool = False
    force_include_usage: bool = False
    prompt_tokens_details: bool = False
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
    prefill_shared: bool = False
    spec_acceptance: float = 0.7
    default_max_tokens: int = 16
    reject_fields: frozenset = frozenset({"thinking_budget"})
    profile: str | None = None
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
    "--num-gpu-blocks-override": "num_gpu_blocks_override",
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
    "--enable-force-include-usage": ("force_include_usage", True),
    "--no-enable-force-include-usage": ("force_include_usage", False),
    "--enable-prompt-tokens-details": ("prompt_tokens_details", True),
    "--no-enable-prompt-tokens-details": ("prompt_tokens_details", False),  # vLLM < 0.33
    "--disable-prompt-tokens-details": ("prompt_tokens_details", False),  # vLLM 0.33
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


def env_bool(env: dict, key: str) -> bool:
    """A ``VLLM_SIM_*`` switch: on for 1, true, yes or on."""
    return env.get(key, "").strip().lower() in {"1", "true", "yes", "on"}


def parse_config(argv: list, env: dict | None = None) -> Config:
    """Parse a vLLM command line (``[vllm] [serve] <model> --flags...``) and VLLM_SIM_* env."""
    env = dict(os.environ if env is None else env)
    args = list(argv)
    if args and os.path.basename(args[0]) == "vllm":
        args = args[1:]
    if args and args[0] == "serve":
        args = args[1:]
    cfg = Config()
    raw, positionals = _read_flags(args, cfg.ignored)
    _apply_flags(cfg, raw, positionals, env)
    _apply_env(cfg, env)
    return cfg


def _read_flags(args: list, ignored: list) -> tuple[dict, list]:
    """The modelled flags' raw values by ``Config`` field, and the positionals. Every other flag
    (with its value when it takes one) is appended to ``ignored``."""
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
            skipped = [tok]
            if not eq and not _unknown_is_bool(name) and i + 1 < len(args) and not _is_flag(args[i + 1]):
                skipped.append(args[i + 1])
                i += 1
            ignored.append(" ".join(skipped))
        i += 1
    return raw, positionals


def _apply_flags(cfg: Config, raw: dict, positionals: list, env: dict) -> None:
    """Set what vLLM's flags set (and ``VLLM_API_KEY``, which vLLM reads too)."""
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
        if "num_gpu_blocks_override" in raw:
            cfg.num_gpu_blocks_override = int(raw["num_gpu_blocks_override"])
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
    cfg.force_include_usage = raw.get("force_include_usage", False)
    cfg.prompt_tokens_details = raw.get("prompt_tokens_details", False)
    if cfg.auto_tool_choice and not cfg.tool_call_parser:
        raise UsageError("--enable-auto-tool-choice requires --tool-call-parser")
    cfg.api_key = raw.get("api_key") or env.get("VLLM_API_KEY") or None
    try:
        cfg.shutdown_timeout = float(raw.get("shutdown_timeout", 0))
    except ValueError:
        raise UsageError("argument --shutdown-timeout: not a number") from None


def _apply_env(cfg: Config, env: dict) -> None:
    """Set the simulator's own knobs (``VLLM_SIM_*``)."""
    cfg.loading_seconds = _env_float(env, "VLLM_SIM_LOADING_SECONDS", 0.0)
    cfg.never_ready = env_bool(env, "VLLM_SIM_NEVER_READY")
    cfg.profile = env.get("VLLM_SIM_PROFILE", "").strip() or None
    if cfg.profile and cfg.profile not in HARDWARE:
        raise UsageError(f"VLLM_SIM_PROFILE={cfg.profile!r}: unknown; known: {sorted(HARDWARE)}")
    hardware = HARDWARE[cfg.profile or "local"]
    cfg.kv_pool_tokens = _env_int(
        env, "VLLM_SIM_KV_POOL_TOKENS", hardware.kv_pool_tokens or 4 * cfg.max_model_len
    )
    if cfg.num_gpu_blocks_override is not None:  # vLLM's override replaces the pool it measured
        cfg.kv_pool_tokens = cfg.num_gpu_blocks_override * cfg.block_size
    faults = {f.strip() for f in env.get("VLLM_SIM_FAULT", "").split(",") if f.strip()}
    unknown = faults - FAULTS
    if unknown:
        raise UsageError(f"VLLM_SIM_FAULT: unknown fault(s) {sorted(unknown)}; known: {sorted(FAULTS)}")
    cfg.faults = frozenset(faults)
    cfg.runtime_faults = env_bool(env, "VLLM_SIM_RUNTIME_FAULTS")
    cfg.version = env.get("VLLM_SIM_VERSION", "").strip() or DEFAULT_VERSION
    cfg.prefill_tokens_per_s = _env_float(env, "VLLM_SIM_PREFILL_TOKENS_PER_S", hardware.prefill_tokens_per_s)
    if cfg.prefill_tokens_per_s <= 0:
        raise UsageError("VLLM_SIM_PREFILL_TOKENS_PER_S must be > 0")
    cfg.decode_token_seconds = _env_float(env, "VLLM_SIM_DECODE_TOKEN_SECONDS", 0.01)
    cfg.hol_blocking = env_bool(env, "VLLM_SIM_HOL_BLOCKING")
    cfg.prefill_shared = env_bool(env, "VLLM_SIM_PREFILL_SHARED")
    cfg.spec_acceptance = _env_float(env, "VLLM_SIM_SPEC_ACCEPTANCE", 0.7)
    if cfg.spec_acceptance > 1:
        raise UsageError("VLLM_SIM_SPEC_ACCEPTANCE must be in [0, 1]")
    cfg.default_max_tokens = _env_int(env, "VLLM_SIM_DEFAULT_MAX_TOKENS", 16, minimum=1)
    if "VLLM_SIM_REJECT_FIELDS" in env:
        cfg.reject_fields = frozenset(
            f.strip() for f in env["VLLM_SIM_REJECT_FIELDS"].split(",") if f.strip()
        )
    cfg.quiet = env_bool(env, "VLLM_SIM_QUIET")
    cfg.shards = _env_int(env, "VLLM_SIM_SHARDS", 0)
    cfg.start_failure = env.get("VLLM_SIM_START_FAILURE", "").strip() or None
    if cfg.start_failure and cfg.start_failure not in START_FAILURES:
        raise UsageError(f"VLLM_SIM_START_FAILURE={cfg.start_failure!r}; known: {sorted(START_FAILURES)}")
    cfg.crash_after_seconds = _env_float(env, "VLLM_SIM_CRASH_AFTER_SECONDS", 0.0)
