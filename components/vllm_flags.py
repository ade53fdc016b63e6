"""The `vllm serve` flags the config renders, and the rules for what a stack may add to them.

``components/vllm_server.py`` renders the tables below into the argv; ``components/config/rules.py``
checks ``glm:serving.extraArgs`` and the env names against them. vLLM's argparse keeps the *last*
value of a repeated flag, so an extra ``--host=0`` after the rendered ``--host=172.17.0.1`` would
win: every flag the config owns is refused in ``extraArgs``, with the key to set instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from pydantic.alias_generators import to_camel

VALUE_FLAGS = [
    ("host", "--host"),
    ("port", "--port"),
    ("served_model_name", "--served-model-name"),
    ("max_model_len", "--max-model-len"),
    ("tensor_parallel_size", "--tensor-parallel-size"),
    ("seed", "--seed"),
    ("safetensors_load_strategy", "--safetensors-load-strategy"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
    ("block_size", "--block-size"),
    ("max_num_seqs", "--max-num-seqs"),
    ("max_num_batched_tokens", "--max-num-batched-tokens"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("quantization", "--quantization"),
    ("moe_backend", "--moe-backend"),
    ("speculative_config", "--speculative-config"),
    ("tool_call_parser", "--tool-call-parser"),
    ("reasoning_parser", "--reasoning-parser"),
    ("limit_mm_per_prompt", "--limit-mm-per-prompt"),
    ("allowed_media_domains", "--allowed-media-domains"),
    ("compilation_config", "--compilation-config"),
    ("additional_config", "--additional-config"),
    ("api_server_count", "--api-server-count"),
    ("shutdown_timeout", "--shutdown-timeout"),
]
"""(config attribute, vLLM flag) rendered as ``--flag=value``, in argv order."""
SWITCHES = [
    ("enable_expert_parallel", "--enable-expert-parallel"),
    ("trust_remote_code", "--trust-remote-code"),
    ("enable_auto_tool_choice", "--enable-auto-tool-choice"),
    ("async_scheduling", "--async-scheduling"),
    ("enforce_eager", "--enforce-eager"),
]
"""Rendered as ``--flag`` when true."""
TOGGLES = [
    ("enable_prefix_caching", "prefix-caching"),
    ("enable_flashinfer_autotune", "flashinfer-autotune"),
]
"""Tri-state: true → ``--enable-<name>``, false → ``--no-enable-<name>``, unset → vLLM's default."""

_KEY_OF_ATTRIBUTE = {
    "served_model_name": "glm:model.servedName",
    "speculative_config": "glm:serving.numSpeculativeTokens",
}
OWNED_ELSEWHERE = {
    "--api-key": "glm:apiKeys (the front checks the keys; vLLM runs without one behind it, and a key "
    "in the argv is in plain text in the state and `docker inspect`)",
    "--model": "glm:model.directory (the model path is the argv's first element)",
    # vLLM's short spellings of flags above (`vllm serve --help`).
    "-tp": "glm:serving.tensorParallelSize",
    "-q": "glm:serving.quantization",
    "-O": "glm:serving.compilationConfig",
}
"""Flags the config sets another way; refused in ``extraArgs`` like the rendered ones."""


def owned_flags() -> dict[str, str]:
    """Every flag the config renders or owns → the ``glm:`` key that sets it."""
    owned = {
        flag: _KEY_OF_ATTRIBUTE.get(attr, f"glm:serving.{to_camel(attr)}")
        for attr, flag in [*VALUE_FLAGS, *SWITCHES]
    }
    for attr, name in TOGGLES:
        owned[f"--enable-{name}"] = owned[f"--no-enable-{name}"] = f"glm:serving.{to_camel(attr)}"
    return {**owned, **OWNED_ELSEWHERE}


def _flag_name(arg: str) -> str:
    """How vLLM's parser reads an argument's name: ``--max_model_len=8`` → ``--max-model-len``,
    ``--compilation-config.mode=3`` → ``--compilation-config``, ``-O3`` → ``-O``."""
    name = arg.split("=", 1)[0]
    if re.fullmatch(r"-O[0-9.].*", name):
        return "-O"
    if name.startswith("--"):
        name = "--" + name[2:].split(".", 1)[0].replace("_", "-")
    return name


def extra_args_problems(extra_args: Iterable[str]) -> list[str]:
    """``glm:serving.extraArgs`` entries that would override a flag the config renders (argparse
    keeps the last value), by exact name or by an abbreviation argparse would expand. The value
    after a flag is never quoted: it may be a secret."""
    owned = owned_flags()
    found = []
    for i, arg in enumerate(extra_args):
        name = _flag_name(arg)
        if not name.startswith("-"):
            continue
        key = owned.get(name)
        if key is None and name.startswith("--") and len(name) > 3:
            # argparse expands an unambiguous prefix: `--hos=0` is `--host=0`.
            expanded = [flag for flag in owned if flag.startswith(name)]
            key = owned[expanded[0]] if len(expanded) == 1 else None
            name = f"{name} (argparse reads it as {expanded[0]})" if key else name
        if key is not None:
            found.append(
                f"glm:serving.extraArgs[{i}] sets {name}, which the config already renders: vLLM keeps "
                f"the last value, so it would silently replace the checked one. Fix: remove it from "
                f"extraArgs and set {key} instead."
            )
    return found


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A POSIX environment variable name (what `docker run -e NAME=value` splits on the first `=`)."""


def env_name_problems(env: Mapping[str, object], key: str) -> list[str]:
    """Names in ``key`` (e.g. ``glm:serving.env``) that are not environment variable names."""
    return [
        f"{key}.{name!r} is not an environment variable name: Docker splits `NAME=value` at the first "
        "`=`, so it would set another variable than the one written (and skip the checks on it). "
        "Fix: letters, digits and `_`, not starting with a digit (e.g. TZ or VLLM_ENGINE_READY_TIMEOUT_S)."
        for name in sorted(env)
        if not ENV_NAME.fullmatch(name)
    ]
