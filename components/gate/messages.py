"""What the gate says: the failure of a step, and the excerpts and hints its messages quote.

Pure functions of what came back, of the serving container's flags and of where its target shows
it (:class:`LookAt`); no I/O but the progress line on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

EXCERPT_CHARS = 300
NO_ANSWER = "got no complete answer within"
"""In the failure of a request that timed out (the probe tells a queue from a wrong answer by it)."""

Progress = Callable[[str], None]


class GateFailure(Exception):
    """One gate step failed; ``message`` says what came back and what to look at."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"smoke gate failed at step '{step}': {message}")
        self.step = step
        self.message = message


@dataclass(frozen=True)
class LookAt:
    """The commands a failure names for seeing the serving container, on its target: a Docker
    host's by default (:meth:`docker`), or those the stack passed (``look_at``: kubectl's on Kubernetes).

    >>> LookAt.docker("glm53-flash-local").log_of
    'the log of glm53-flash-local'
    >>> LookAt("kubectl -n glm logs deploy/glm53-vllm -c vllm", "kubectl -n glm get pods", "…").log_of
    "the serving container's log (kubectl -n glm logs deploy/glm53-vllm -c vllm)"
    """

    logs: str
    """The serving container's log: ``docker logs <container>``."""
    running: str
    """What runs, the front among it: ``docker ps``."""
    inspect: str
    """The serving container as it runs, its argv among it: ``docker inspect <container>``."""
    container: str | None = None
    """The Docker container the commands name: a message then says ``the log of <container>``."""

    @classmethod
    def docker(cls, container: str) -> LookAt:
        return cls(f"docker logs {container}", "docker ps", f"docker inspect {container}", container)

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> LookAt:
        """The gate's ``look_at`` parameter when given, else Docker's commands for ``container_name``."""
        given = params.get("look_at")
        if given:
            return cls(str(given["logs"]), str(given["running"]), str(given["inspect"]))
        return cls.docker(params.get("container_name") or "the serving container")

    @property
    def log_of(self) -> str:
        """The serving container's log as a sentence names it."""
        return (
            f"the log of {self.container}" if self.container else f"the serving container's log ({self.logs})"
        )

    def params(self) -> dict[str, str]:
        """The gate's ``look_at`` parameter."""
        return {"inspect": self.inspect, "logs": self.logs, "running": self.running}


def stderr_progress(line: str) -> None:
    """Progress for the operator: ``pulumi.log`` in a dynamic provider only writes to stderr anyway."""
    print(f"[smoke-gate] {line}", file=sys.stderr, flush=True)


def excerpt(text: Any, limit: int = EXCERPT_CHARS) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def kind(value: Any) -> str:
    """What a JSON value is, in the words of a failure message.

    >>> kind([{"type": "text", "text": "221"}]), kind("x"), kind(None)
    ('a list', 'a string', 'null')
    """
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def mentions(flags: Mapping[str, str | bool], *names: str) -> str:
    """How the serving container sets these flags, for a failure message.

    >>> mentions({"--tool-call-parser": "glm47", "--enable-auto-tool-choice": True},
    ...          "--enable-auto-tool-choice", "--tool-call-parser")
    '--enable-auto-tool-choice, --tool-call-parser=glm47'
    >>> mentions({}, "--reasoning-parser")
    'none of --reasoning-parser'
    """
    found = [n if flags[n] is True else f"{n}={flags[n]}" for n in names if n in flags]
    return ", ".join(found) if found else "none of " + ", ".join(names)


def thinking_disabled(chat_template_kwargs: Mapping[str, Any]) -> bool:
    """Whether the request turns GLM's thinking off (then no separate reasoning is expected)."""
    kw = chat_template_kwargs
    return (
        kw.get("enable_thinking") is False
        or kw.get("thinking") is False
        or str(kw.get("reasoning_effort", "")).lower() == "none"
    )


def kv_pool_message(pool: dict[str, Any], max_model_len: int, flags: Mapping[str, str | bool]) -> str:
    """Why a KV pool below max_model_len must not ship, and which flags move it (Ascend seed)."""
    gmu = flags.get("--gpu-memory-utilization")
    mnbt = flags.get("--max-num-batched-tokens")
    spec = flags.get("--speculative-config")
    return (
        f"KV pool is {pool['tokens']:,} tokens (num_gpu_blocks {pool['num_gpu_blocks']:,} × "
        f"block_size {pool['block_size']}, engine {pool['engine']}) but --max-model-len is "
        f"{max_model_len:,}: a request longer than the pool is accepted, then waits forever "
        '(vllm:num_requests_waiting_by_reason{reason="capacity"}) while HTTP says 200, and blocks '
        "every request behind it (the Ascend 910B3 seed saw one hang for 2,171 s). Levers, in "
        f"order: lower --max-num-batched-tokens (now {mnbt or 'vLLM default'}; the Ascend seed went "
        "32768 → 8192 and the pool grew 4,584 → 9,072); raise --gpu-memory-utilization (now "
        f"{gmu or 'vLLM default'}); drop MTP --speculative-config (now {spec or 'off'}; its drafts "
        f"cost KV); or lower --max-model-len to at most {pool['tokens']:,} "
        "(glm:serving.maxNumBatchedTokens / gpuMemoryUtilization / numSpeculativeTokens / maxModelLen)."
    )


def describe(err: BaseException) -> str:
    """A transport error in words; "connection refused" is what a loading vLLM looks like."""
    chain: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and len(chain) < 8:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "refused" in str(err).lower():
        return "connection refused"
    name = type(err).__name__
    return f"{name}: {excerpt(str(err), 160)}" if str(err) else name
