"""The simulator's start-up: vLLM's milestones at a chosen pace, and the ways a real start fails.

Standard library only, like the whole simulator. What a real vLLM 0.33.0 prints is copied
from its source (file noted beside each message); the seeds' logs use the same words.

- **Milestones**: during ``VLLM_SIM_LOADING_SECONDS`` the log shows the stages of a real start in
  the a800 seed's proportions (weights ~10 %, then engine init with the KV cache size and the CUDA
  graph capture), one shard line per ``VLLM_SIM_SHARDS`` shard.
- **Start-up failures** (``VLLM_SIM_START_FAILURE``): the engine exits 1 at the stage where a real
  one fails, with vLLM's message.
- **Crash** (``VLLM_SIM_CRASH_AFTER_SECONDS``): the process exits 1 that long after it started,
  loading or serving.
"""

from __future__ import annotations

import os
import sys
import threading
import time

# (stage fraction of the load, message); {shard}/{shards}/{pool}/{seconds} filled in.
MILESTONES = (
    (0.0, "vLLM API server version {version}"),
    (0.10, "Loading weights took {weights:.2f} seconds"),  # model_loader/default_loader.py
    (0.10, "Model loading took 39.80 GiB memory and {weights:.6f} seconds"),  # v1/worker/gpu_model_runner.py
    (0.30, "GPU KV cache size: {pool:,} tokens"),  # v1/core/kv_cache_utils.py
    (0.30, "Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"),
    (0.70, "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 0%"),  # gpu_model_runner.py tqdm
    (0.88, "Graph capturing finished in {graphs:.0f} secs, took 2.71 GiB"),
    (
        1.0,
        "init engine (profile, create kv cache, warmup model) took {init:.2f} seconds",
    ),  # v1/engine/core.py
)
WEIGHTS_FRACTION = 0.10

ENGINE_FAILED = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{'EngineCore_DP0': 1}}"
# name: (stage fraction where it strikes, vLLM's lines)
START_FAILURES: dict[str, tuple[float, list[str]]] = {
    "gpu-memory": (
        0.12,
        [  # v1/worker/utils.py
            "ERROR [core.py] EngineCore failed to start.",
            "ValueError: Free memory on device cuda:0 (12.41/79.25 GiB) on startup is less than desired GPU "
            "memory utilization ({gmu}, {budget:.2f} GiB). Decrease GPU memory utilization or reduce GPU "
            "memory used by other processes.",
            ENGINE_FAILED,
        ],
    ),
    "kv-too-small": (
        0.30,
        [  # v1/core/kv_cache_planning.py
            "ERROR [core.py] EngineCore failed to start.",
            "ValueError: To serve at least one request with the model's max seq len ({max_model_len}), "
            "(64.00 GiB KV cache is needed, which is larger than the available KV cache memory (18.39 GiB). "
            "Based on the available memory, the estimated maximum model length is 301056. Try increasing "
            "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
            "`max_model_len` when initializing the engine.",
            ENGINE_FAILED,
        ],
    ),
    "oom": (
        0.75,
        [
            "ERROR [core.py] EngineCore failed to start.",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.71 GiB. GPU 0 has a total "
            "capacity of 79.25 GiB of which 1.02 GiB is free.",
            ENGINE_FAILED,
        ],
    ),
    "nccl": (
        0.05,
        [
            "ERROR [multiproc_executor.py] Worker proc VllmWorker-3 died unexpectedly",
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3690, unhandled system "
            "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3 ncclSystemError: System call "
            "(e.g. socket, malloc) or external library call failed or device error. Last error: Error while "
            "creating shared memory segment /dev/shm/nccl-2dHp1X (size 9637888)",
            ENGINE_FAILED,
        ],
    ),
    "missing-weights": (
        0.01,
        [
            "OSError: {model} does not appear to have a file named config.json.",
        ],
    ),
}


def _values(cfg: object, seconds: float) -> dict:
    pool = int(getattr(cfg, "pool_tokens", 0))
    mml = int(getattr(cfg, "max_model_len", 1)) or 1
    gmu = float(getattr(cfg, "gpu_memory_utilization", 0.9))
    return {
        "version": getattr(cfg, "version", "?"), "pool": pool, "max_model_len": mml,
        "concurrency": pool / mml, "weights": seconds * WEIGHTS_FRACTION,
        "graphs": seconds * 0.18, "init": seconds * (1 - WEIGHTS_FRACTION),
        "gmu": gmu, "budget": 79.25 * gmu, "model": getattr(cfg, "model", "?"),
    }  # fmt: skip


def log(message: str, quiet: bool = False) -> None:
    """One line of the simulator's own log on stderr, vLLM's way (nothing when ``quiet``)."""
    if quiet:
        return
    sys.stderr.write(f"INFO {time.strftime('%m-%d %H:%M:%S')} [vllm_sim.py] {message}\n")
    sys.stderr.flush()


def play_startup(
    cfg: object, seconds: float, shards: int, failure: str | None, stop: threading.Event, quiet: bool = False
) -> bool:
    """Log the milestones over ``seconds`` (shards during the weights stage); with ``failure``,
    print vLLM's error at its stage and return False (the caller exits 1). True when loaded,
    False too when ``stop`` was set."""
    began = time.monotonic()
    values = _values(cfg, seconds)
    strike = START_FAILURES[failure][0] if failure else 2.0

    def wait_until(fraction: float) -> bool:
        return not stop.wait(max(0.0, began + fraction * seconds - time.monotonic()))

    steps = [(f, text) for f, text in MILESTONES]
    for shard in range(1, shards + 1):
        done = int(100 * shard / shards)
        steps.append((WEIGHTS_FRACTION * shard / (shards + 1),
                      f"Loading safetensors checkpoint shards: {done:3d}% Completed | {shard}/{shards}"))  # fmt: skip
    for fraction, text in sorted(steps, key=lambda s: s[0]):
        if fraction > strike:
            break
        if not wait_until(fraction):
            return False
        log(text.format(**values), quiet)
    if failure:
        if not wait_until(strike):
            return False
        for line in START_FAILURES[failure][1]:
            sys.stderr.write(line.format(**values) + "\n")
        sys.stderr.flush()
        return False
    return wait_until(1.0)


def crash_after(seconds: float) -> None:
    """Exit 1 ``seconds`` after now, whatever the process is doing (a daemon timer)."""

    def crash() -> None:
        sys.stderr.write(
            "ERROR [core_client.py] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.\n"
        )
        sys.stderr.flush()
        os._exit(1)

    timer = threading.Timer(seconds, crash)
    timer.daemon = True
    timer.start()
