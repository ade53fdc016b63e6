"""The flags the config owns: each ``vllm serve`` flag it renders, the ``glm:`` key that sets it and
the value it is rendered from, in argv order.

vLLM's argparse keeps the *last* value of a repeated flag, so an extra ``--host=0`` after the
rendered ``--host=172.17.0.1`` would win: every flag here is refused in ``glm:serving.extraArgs``,
with the key to set instead (``checks.py``), and a start-up failure on one names its key
(``components/gate/startup.py``). The keys are written out, not rebuilt from the flag's text:
``--served-model-name`` is ``glm:model.servedName``, ``--speculative-config`` is
``glm:serving.numSpeculativeTokens``. This module is shipped in the gate's image: no imports beyond
the standard library and pydantic.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from pydantic.alias_generators import to_snake

Kind = Literal["value", "values", "switch", "toggle"]
"""``value``: ``--flag=value``; ``values``: ``--flag a b`` (argparse ``nargs="+"``); ``switch``:
``--flag`` when true; ``toggle``: true → ``--flag``, false → ``--no-flag``, unset → vLLM's default."""


@dataclass(frozen=True)
class OwnedFlag:
    """One flag the config renders."""

    flag: str
    key: str
    """The ``glm:`` key a stack sets: what a message names as the fix."""
    kind: Kind = "value"
    derived: str | None = None
    """The attribute of ``StackSections`` holding the value, where the key's field is only an input
    to it (the speculative config built from the token count, the shutdown timeout's default)."""

    @property
    def source(self) -> str:
        """The dotted attribute path on ``StackSections`` the value is read from.

        >>> OwnedFlag("--max-num-seqs", "glm:serving.maxNumSeqs").source
        'serving.max_num_seqs'
        """
        return self.derived or ".".join(to_snake(part) for part in self.key.removeprefix("glm:").split("."))

    @property
    def spellings(self) -> tuple[str, ...]:
        """The flag, and a toggle's ``--no-`` form."""
        return (self.flag, f"--no-{self.flag[2:]}") if self.kind == "toggle" else (self.flag,)


OWNED: tuple[OwnedFlag, ...] = (
    OwnedFlag("--host", "glm:serving.host"),
    OwnedFlag("--port", "glm:serving.port"),
    OwnedFlag("--served-model-name", "glm:model.servedName"),
    OwnedFlag("--max-model-len", "glm:serving.maxModelLen"),
    OwnedFlag("--tensor-parallel-size", "glm:serving.tensorParallelSize"),
    OwnedFlag("--seed", "glm:serving.seed"),
    OwnedFlag("--safetensors-load-strategy", "glm:serving.safetensorsLoadStrategy"),
    OwnedFlag("--kv-cache-dtype", "glm:serving.kvCacheDtype"),
    OwnedFlag("--block-size", "glm:serving.blockSize"),
    OwnedFlag("--max-num-seqs", "glm:serving.maxNumSeqs"),
    OwnedFlag("--max-num-batched-tokens", "glm:serving.maxNumBatchedTokens"),
    OwnedFlag("--gpu-memory-utilization", "glm:serving.gpuMemoryUtilization"),
    OwnedFlag("--quantization", "glm:serving.quantization"),
    OwnedFlag("--moe-backend", "glm:serving.moeBackend"),
    OwnedFlag(
        "--speculative-config", "glm:serving.numSpeculativeTokens", derived="serving.speculative_config"
    ),
    OwnedFlag("--tool-call-parser", "glm:serving.toolCallParser"),
    OwnedFlag("--reasoning-parser", "glm:serving.reasoningParser"),
    OwnedFlag("--limit-mm-per-prompt", "glm:serving.limitMmPerPrompt"),
    OwnedFlag("--allowed-media-domains", "glm:serving.allowedMediaDomains", "values"),
    OwnedFlag("--compilation-config", "glm:serving.compilationConfig"),
    OwnedFlag("--additional-config", "glm:serving.additionalConfig"),
    OwnedFlag("--api-server-count", "glm:serving.apiServerCount"),
    OwnedFlag("--shutdown-timeout", "glm:serving.shutdownTimeout", derived="shutdown_timeout"),
    OwnedFlag("--enable-expert-parallel", "glm:serving.enableExpertParallel", "switch"),
    OwnedFlag("--trust-remote-code", "glm:serving.trustRemoteCode", "switch"),
    OwnedFlag("--enable-auto-tool-choice", "glm:serving.enableAutoToolChoice", "switch"),
    OwnedFlag("--async-scheduling", "glm:serving.asyncScheduling", "switch"),
    OwnedFlag("--enforce-eager", "glm:serving.enforceEager", "switch"),
    OwnedFlag("--enable-prompt-tokens-details", "glm:serving.enablePromptTokensDetails", "switch"),
    OwnedFlag("--enable-prefix-caching", "glm:serving.enablePrefixCaching", "toggle"),
    OwnedFlag("--enable-flashinfer-autotune", "glm:serving.enableFlashinferAutotune", "toggle"),
)
"""Every flag the config renders, in argv order (value flags, then switches, then toggles)."""

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
EXTRA_ARGS = "glm:serving.extraArgs"


def owned_flags() -> dict[str, str]:
    """Every flag the config renders or owns → the ``glm:`` key that sets it."""
    owned = {spelling: row.key for row in OWNED for spelling in row.spellings}
    return {**owned, **OWNED_ELSEWHERE}


def config_key(flag: str, rendered: Collection[str]) -> str:
    """The config key behind ``--flag`` on a serving container that ran with the ``rendered`` flags:
    a flag the config owns comes from its key in the table, anything else the stack renders came
    from ``extraArgs``.

    >>> config_key("--served-model-name", {"--served-model-name"})
    'glm:model.servedName'
    >>> config_key("--max-log-len", {"--max-log-len"})
    'glm:serving.extraArgs'
    """
    if flag in rendered:
        return owned_flags().get(flag, EXTRA_ARGS)
    return EXTRA_ARGS
