"""The simulator's start-up (images/vllm-sim/simulator/startup.py, strict_flags.py): strict flags with argparse's own
words, vLLM's start-up failures, a crash after N seconds, the milestones at a chosen pace.

The expected messages are vLLM's (its parser's behaviour was checked on the real 0.33.0 parser:
abbreviations pass, `--max-num-seqs=abc` → "invalid int value: 'abc'")."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from .conftest import SIM

STRICT = {"VLLM_SIM_STRICT_FLAGS": "1"}


def run_sim(*args: str, env: dict[str, str], timeout: float = 20) -> tuple[int, str, float]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(SIM), "serve", "/models/m", "--host", "127.0.0.1", "--port", "0", *args],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return done.returncode, done.stderr, time.monotonic() - began


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--max-num-seqs=abc"], "vllm serve: error: argument --max-num-seqs: invalid int value: 'abc'"),
        (["--enable-prefix-cacheing"], "vllm serve: error: unrecognized arguments: --enable-prefix-cacheing"),
        (
            ["--gpu-memory-utilization", "high"],
            "argument --gpu-memory-utilization/--device-memory-utilization: invalid float value: 'high'",
        ),
        (["--dtype", "fp13"], "argument --dtype: invalid choice: 'fp13' (choose from"),
        (["--enable-p"], "ambiguous option: --enable-p could match"),
    ],
)
def test_strict_flags_exit_2_with_the_parsers_words(args: list[str], said: str) -> None:
    code, log, _ = run_sim(*args, env=STRICT)
    assert code == 2 and said in log
    assert log.startswith("usage: vllm serve")


def test_strict_flags_take_what_the_real_parser_takes() -> None:
    """An abbreviation, `_` spellings and dotted JSON keys: the real parser accepts them all."""
    code, log, _ = run_sim(
        "--enable-prefix-cachin", "--max_num_seqs=4", "--compilation-config.mode=3",
        env={**STRICT, "VLLM_SIM_CRASH_AFTER_SECONDS": "1"},
    )  # fmt: skip
    assert "error:" not in log and "Application startup complete" in log
    assert code == 1  # the crash that ended it


def test_without_strict_flags_unknown_ones_are_ignored_as_before() -> None:
    code, log, _ = run_sim("--enable-prefix-cacheing", env={"VLLM_SIM_CRASH_AFTER_SECONDS": "1"})
    assert "ignoring flags the simulator does not model: --enable-prefix-cacheing" in log and code == 1


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        ("gpu-memory", "is less than desired GPU memory utilization (0.9, 71.33 GiB)"),
        ("kv-too-small", "To serve at least one request with the model's max seq len (131072)"),
        ("oom", "torch.OutOfMemoryError: CUDA out of memory."),
        ("nccl", "NCCL error in: ProcessGroupNCCL.cpp"),
        ("missing-weights", "OSError: /models/m does not appear to have a file named config.json."),
    ],
)
def test_start_failures_exit_1_with_vllms_message(failure: str, said: str) -> None:
    code, log, _ = run_sim(env={"VLLM_SIM_START_FAILURE": failure})
    assert code == 1 and said in log
    assert "Application startup complete" not in log


def test_an_unknown_start_failure_is_a_usage_error() -> None:
    code, log, _ = run_sim(env={"VLLM_SIM_START_FAILURE": "gremlins"})
    assert code == 2 and "VLLM_SIM_START_FAILURE='gremlins'" in log


def test_the_milestones_come_at_the_chosen_pace() -> None:
    code, log, took = run_sim(
        env={"VLLM_SIM_LOADING_SECONDS": "3", "VLLM_SIM_SHARDS": "3", "VLLM_SIM_CRASH_AFTER_SECONDS": "3.5"}
    )
    assert code == 1 and 3.2 <= took < 8
    order = ["vLLM API server version 0.33.0", "Loading safetensors checkpoint shards:  33% Completed | 1/3",
             "Loading weights took 0.30 seconds", "GPU KV cache size:", "Capturing CUDA graphs",
             "Graph capturing finished in", "init engine (profile, create kv cache, warmup model) took 2.70 seconds",
             "Application startup complete", "Engine core proc EngineCore_DP0 died unexpectedly"]  # fmt: skip
    places = [log.find(line) for line in order]
    assert -1 not in places and places == sorted(places)
    assert re.search(r"Maximum concurrency for 131,072 tokens per request", log)
