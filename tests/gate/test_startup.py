"""The one start-up table (components/gate/startup.py): vLLM's milestones and known failures.

The lines are vLLM's own messages (the seeds' logs and the vLLM 0.33.0 source, quoted), and the
expected config keys are what the issue and the seeds name as the fix."""

from __future__ import annotations

import pytest

from components.gate.startup import diagnose, is_error, milestone

SEED_MILESTONES = [
    # a800 seed §4 milestone table and rtx5090 seed §4 log
    ("INFO 05-12 12:58:36 Loading weights took 632.80 seconds", "weights loaded"),
    ("INFO Model loading took 39.8 GiB memory and 36.1 seconds", "model loaded"),
    ("INFO init engine (profile, create kv cache, warmup model) took 331.2 seconds", "engine initialised"),
    ("INFO Graph capturing finished in 66 secs, took 2.71 GiB", "CUDA graphs captured"),
    ("INFO 12:59:37 GPU KV cache size: 149,796 tokens", "KV cache sized"),
    ("INFO:     Application startup complete.", "startup complete"),
    ("Loading safetensors checkpoint shards:  40% Completed | 6/15 [00:14<00:21]", "weights shard"),
]


@pytest.mark.parametrize(("line", "name"), SEED_MILESTONES)
def test_the_seeds_milestones_are_known(line: str, name: str) -> None:
    found = milestone(line)
    assert found is not None and found.name == name


def test_request_lines_are_neither_milestones_nor_errors() -> None:
    line = 'INFO:     127.0.0.1:46508 - "GET /health HTTP/1.1" 200 OK'
    assert milestone(line) is None and not is_error(line)


FAILURES = [
    # the issue's own log line, on a flag from extraArgs
    (
        ["vllm serve: error: invalid numeric argument: invalid literal for int() with base 10: 'abc'"],
        set(),
        "glm:serving.extraArgs, or the glm:serving key that renders the flag",
    ),
    (["vllm serve: error: argument --max-num-seqs: invalid int value: 'abc'"], {"--max-num-seqs"}, "glm:serving.maxNumSeqs"),
    (["vllm serve: error: argument --max-num-seqs: invalid int value: 'abc'"], set(), "glm:serving.extraArgs"),
    (["vllm serve: error: unrecognized arguments: --enable-prefix-cacheing"], set(), "glm:serving.extraArgs"),
    (
        ["ValueError: Free memory on device cuda:0 (12.41/79.25 GiB) on startup is less than desired GPU memory utilization (0.95, 75.29 GiB)."],
        set(),
        "glm:serving.gpuMemoryUtilization",
    ),
    (
        ["ValueError: To serve at least one request with the model's max seq len (1048576), (64.00 GiB KV cache is needed"],
        set(),
        "glm:serving.maxModelLen",
    ),
    (["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.71 GiB."], set(), "glm:serving.gpuMemoryUtilization"),
    (["torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3690, unhandled system error"], set(), "glm:container.shmSize"),
    (["OSError: /models/GLM-5.3-Flash does not appear to have a file named config.json."], set(), "glm:model.hostDir"),
    (["KeyError: \"Tool parser 'glm48' not found.\""], set(), "glm:serving.toolCallParser"),
    (["KeyError: \"Reasoning parser 'glm46' not found. Available parsers: ['glm45']\""], set(), "glm:serving.reasoningParser"),
]  # fmt: skip


@pytest.mark.parametrize(("lines", "rendered", "key"), FAILURES)
def test_known_failures_name_the_key(lines: list[str], rendered: set[str], key: str) -> None:
    log = ["INFO 12-01 10:00:00 vLLM API server version 0.33.0", *lines, "INFO something after"]
    found = diagnose(log, rendered)
    assert found.key == key
    assert lines[-1] in found.lines


def test_a_restart_loop_shows_its_error_once_and_the_newest_cause_wins() -> None:
    loop = ["vllm serve: error: argument --max-num-seqs: invalid int value: 'abc'"] * 5
    found = diagnose(["CUDA out of memory. (an older run)", *loop], {"--max-num-seqs"})
    assert found.key == "glm:serving.maxNumSeqs"
    assert found.lines[-1] == loop[0] and found.lines.count(loop[0]) == 1


def test_an_unknown_failure_still_shows_the_error_lines() -> None:
    found = diagnose(["INFO fine", "ERROR something nobody catalogued", "Traceback (most recent call last):"])
    assert found.cause == "not one of the known start-up failures"
    assert found.lines == ("ERROR something nobody catalogued", "Traceback (most recent call last):")
