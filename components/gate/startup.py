"""The serving container's start-up as its own log tells it: milestones, and the failures we know.

One table for the gate (which prints the milestones while it waits for readiness, and names the
cause when the engine exits: ``components/gate/container.py``) and for ``make logs``
(``ops/__main__.py`` marks the same lines). The patterns are vLLM's own log messages: every entry
carries, for each profile's vLLM version (0.23.0 under vllm-ascend, 0.25.0 of the H200 rehearsal, the
rtx5090 nightly's 0.28.0/0.29.0, 0.33.0), the format string at a cited source line and a sample
line built from it (``startup_lines.json``); the patterns must match every sample. Older wordings
stay recognised (``vLLM API server version``, ``Starting vLLM API server``). No Pulumi, no I/O
beyond reading that table once: plain functions over log lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from components.vllm_flags.owned import EXTRA_ARGS, config_key


@dataclass(frozen=True)
class Sample:
    """How one vLLM version prints a line: the format string at ``source`` and a line built from it."""

    version: str
    source: str
    format: str
    line: str


_LINES = json.loads((Path(__file__).with_name("startup_lines.json")).read_text(encoding="utf-8"))


def _samples(kind: str, name: str) -> tuple[Sample, ...]:
    by_version = _LINES[kind].get(name, {})
    return tuple(
        Sample(version, s["source"], s["format"], s["sample"])
        for version, ss in by_version.items()
        for s in ss
    )


@dataclass(frozen=True)
class Milestone:
    """A line that marks a start-up stage. ``stage`` is the stage the engine is in *after* it."""

    name: str
    pattern: re.Pattern[str]
    stage: str
    samples: tuple[Sample, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", _samples("milestones", self.name))


WEIGHTS, ENGINE_INIT, SERVER, READY = "weights loading", "engine init", "API server start", "ready"

# The samples and their source lines: startup_lines.json (the file and line per version).
MILESTONES: tuple[Milestone, ...] = (
    # "vLLM server version %s, serving model %s", or the ASCII logo whose second line ends in
    # "version ${w}%s${r}" (colour codes only on a terminal); "vLLM API server version" before.
    Milestone(
        "vLLM started",
        re.compile(r"vLLM (?:API )?server version|▀▄▀ █(?:\x1b\[[\d;]*m)*\s+version\b"),
        WEIGHTS,
    ),
    # tqdm with vLLM's _BAR_FORMAT: "Loading safetensors checkpoint shards (eager):  40% Completed | 6/15"
    Milestone(
        "weights shard",
        re.compile(r"Loading safetensors checkpoint shards(?: \(\w+\))?:.*?(\d+)/(\d+)"),
        WEIGHTS,
    ),
    Milestone("weights loaded", re.compile(r"Loading weights took [\d.]+ ?s"), ENGINE_INIT),
    # vLLM's GPU runners, and vllm-ascend's NPU runner ("Loading model weights took %.4f GB").
    Milestone(
        "model loaded",
        re.compile(r"Model loading took [\d.]+ ?GiB|Loading model weights took [\d.]+ ?GB"),
        ENGINE_INIT,
    ),
    # "GPU KV cache size: %s tokens" (0.33.0: "%s KV cache size", the pool's device first)
    Milestone("KV cache sized", re.compile(r"KV cache size: [\d,]+ tokens"), ENGINE_INIT),
    Milestone("CUDA graph capture", re.compile(r"Capturing CUDA graphs?"), ENGINE_INIT),
    Milestone("CUDA graphs captured", re.compile(r"Graph capturing finished in \d+"), ENGINE_INIT),
    Milestone("engine initialised", re.compile(r"init engine \(.*\) took [\d.]+"), SERVER),
    # "Starting vLLM server on %s"; "Starting vLLM API server" before.
    Milestone("API server starting", re.compile(r"Starting vLLM (?:API )?server"), SERVER),
    # uvicorn: "INFO:     Application startup complete." (a800 seed)
    Milestone("startup complete", re.compile(r"Application startup complete"), READY),
)


@dataclass(frozen=True)
class StartupFailure:
    """A known start-up failure: how the log says it, what it means, and the key to change."""

    cause: str
    pattern: re.Pattern[str]
    key: str
    fix: str
    samples: tuple[Sample, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", _samples("failures", self.cause))


FLAG_KEY = f"{EXTRA_ARGS}, or the glm:serving key that renders the flag"

STARTUP_FAILURES: tuple[StartupFailure, ...] = (
    # argparse's own wording (vLLM's FlexibleArgumentParser is one): "vllm serve: error: unrecognized arguments: --x"
    StartupFailure(
        "a flag this vLLM does not have",
        re.compile(r"unrecognized arguments?:"),
        EXTRA_ARGS,
        "spell the flag as `vllm serve --help` of the image's version does (preview checks it "
        "against components/vllm_flags/<version>.json)",
    ),
    StartupFailure(
        "a flag value vLLM refuses",
        re.compile(r"error: argument [-\w/ ]+: (invalid|expected)|invalid (numeric|choice|\w+ value)"),
        FLAG_KEY,
        "give the flag a value of the type and choices vLLM lists for it",
    ),
    StartupFailure(
        "GPU memory utilization above the free memory",
        re.compile(r"is less than desired GPU memory utilization"),
        "glm:serving.gpuMemoryUtilization",
        "lower it, or stop what else holds the accelerators (nvidia-smi / npu-smi info)",
    ),
    StartupFailure(
        "KV pool too small for max-model-len",
        re.compile(
            r"To serve at least one request with the model's max seq len|larger than the available KV cache"
        ),
        "glm:serving.maxModelLen",
        "lower maxModelLen, raise gpuMemoryUtilization, or lower maxNumBatchedTokens (Ascend seed)",
    ),
    StartupFailure(
        "no memory left for the KV cache",
        re.compile(r"No available memory for the cache blocks"),
        "glm:serving.gpuMemoryUtilization",
        "raise it, or drop MTP (numSpeculativeTokens) / CUDA graphs (enforceEager) to free memory",
    ),
    StartupFailure(
        "out of accelerator memory",
        re.compile(r"CUDA out of memory|OutOfMemoryError|NPU out of memory"),
        "glm:serving.gpuMemoryUtilization",
        "lower gpuMemoryUtilization or maxNumSeqs (CUDA graph memory grows with it, a800 seed)",
    ),
    StartupFailure(
        "NCCL/HCCL communication failure or timeout",
        re.compile(
            r"NCCL (error|timeout|WARN)|ncclInternalError|ncclSystemError|Watchdog caught collective|HCCL.*(timeout|error)",
            re.I,
        ),
        "glm:container.shmSize",
        "give TP 8 a large /dev/shm (shmSize 64g or ipcMode host) and check the NCCL_*/HCCL_* env",
    ),
    StartupFailure(
        "weights missing at the model path",
        re.compile(
            r"No such file or directory: .*(config\.json|safetensors)|does not appear to have a file named|Invalid repository ID or local directory|not a local folder and is not a valid model identifier"
        ),
        "glm:model.hostDir",
        "point hostDir at the folder holding config.json and every shard (or enable glm:model.download)",
    ),
    StartupFailure(
        "tool-call parser not found",
        re.compile(r"Tool parser '.*' not found|invalid tool call parser", re.I),
        "glm:serving.toolCallParser",
        "use a parser this vLLM registers (GLM-5.3: glm47, vLLM >= 0.14)",
    ),
    StartupFailure(
        "reasoning parser not found",
        re.compile(r"Reasoning parser '.*' not found|invalid reasoning parser", re.I),
        "glm:serving.reasoningParser",
        "use a parser this vLLM registers (GLM-5.3: glm45)",
    ),
    StartupFailure(
        "the port is taken",
        # not vLLM's own "Address already in use. Retrying with a new port." (config/parallel.py): it retries
        re.compile(r"Address already in use(?!\. Retrying)|cannot bind"),
        "glm:serving.port",
        "pick a free port, or stop what listens on it",
    ),
)
ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL|Error|Exception|Traceback)\b|error:")
_ARGUMENT = re.compile(r"argument (--[\w-]+)")


def milestone(line: str) -> Milestone | None:
    """The milestone a log line marks, if any."""
    return next((m for m in MILESTONES if m.pattern.search(line)), None)


def failure(line: str) -> StartupFailure | None:
    """The known start-up failure a log line reports, if any."""
    return next((f for f in STARTUP_FAILURES if f.pattern.search(line)), None)


def is_error(line: str) -> bool:
    return failure(line) is not None or bool(ERROR_LINE.search(line))


@dataclass(frozen=True)
class Diagnosis:
    """Why the engine stopped, as far as its log says."""

    cause: str
    key: str
    fix: str
    lines: tuple[str, ...]

    def describe(self) -> str:
        shown = "\n    ".join(self.lines) if self.lines else "(no error line in the log)"
        return f"cause: {self.cause}. Look at: {self.key} ({self.fix}). The log says:\n    {shown}"


def diagnose(log_lines: list[str], rendered_flags: Collection[str] = (), keep: int = 6) -> Diagnosis:
    """The last known failure in ``log_lines`` (the newest wins: a restart loop repeats it), the
    config key most likely at fault, and the last lines that carry an error."""
    errors: list[str] = []
    for line in log_lines:  # a restart loop repeats its error: each distinct line once, newest last
        if line.strip() and is_error(line):
            errors = [e for e in errors if e != line.rstrip()] + [line.rstrip()]
    known = [(line, f) for line in errors if (f := failure(line)) is not None]
    if not known:
        return Diagnosis(
            "not one of the known start-up failures", "the lines below", "read them in full with `make logs`",
            tuple(errors[-keep:]),
        )  # fmt: skip
    line, found = known[-1]
    key = found.key
    if found.key in (FLAG_KEY, EXTRA_ARGS):
        flag = _ARGUMENT.search(line) or re.search(r"arguments?: (--[\w-]+)", line)
        if flag:
            key = config_key(flag.group(1), set(rendered_flags))
    return Diagnosis(found.cause, key, found.fix, tuple(errors[-keep:]))
