"""The one start-up table (components/gate/startup.py): vLLM's milestones and known failures.

The lines are vLLM's own messages: the seeds' logs, and per profile version the sample built from
the format string at a cited source line (components/gate/startup_lines.json, read here directly,
not through the code under test). The expected config keys are what the issue and the seeds name
as the fix."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from components.gate.startup import (
    MILESTONES,
    STARTUP_FAILURES,
    Milestone,
    Sample,
    StartupFailure,
    diagnose,
    failure,
    is_error,
    milestone,
)
from components.profiles import PROFILES

LINES = json.loads((Path(__file__).parents[2] / "components/gate/startup_lines.json").read_text("utf-8"))
SAMPLES = [
    (kind, name, version, sample)
    for kind in ("milestones", "failures")
    for name, by_version in LINES[kind].items()
    for version, samples in by_version.items()
    for sample in samples
]


@pytest.mark.parametrize(
    ("kind", "name", "version", "sample"), SAMPLES, ids=[f"{n}-{v}-{s['source']}" for _k, n, v, s in SAMPLES]
)
def test_every_versions_sample_is_read_as_its_entry(kind: str, name: str, version: str, sample: dict) -> None:
    mark, known = milestone(sample["sample"]), failure(sample["sample"])
    found = (mark.name if mark else None) if kind == "milestones" else (known.cause if known else None)
    assert found == name, f"{version} ({sample['source']}): {sample['sample']!r} is read as {found}"


@pytest.mark.parametrize(("kind", "name", "version", "sample"), SAMPLES)
def test_every_sample_is_built_from_its_format_string(
    kind: str, name: str, version: str, sample: dict
) -> None:
    """The quoted format, with its %-placeholders, {fields} and ${colour} slots as wildcards, reads the sample
    (composite formats, quoted as ``a + b``, are left to the pattern test)."""
    fmt = next(line for line in sample["format"].split("\n") if line.strip())  # the first line of the log
    if " + " in fmt:
        return
    parts = re.split(r"\$\{\w\}|%\(?\w*\)?[.\d]*[sdfr]|\{[^{}]*\}|\{\{.*?\}\}", fmt)
    wanted = ".*?".join(re.escape(part) for part in parts if part)
    assert re.search(wanted, sample["sample"]), (fmt, sample["sample"])


def test_every_entry_has_a_sample_for_every_profiles_version() -> None:
    """A profile's release has its own samples; a nightly/rc (0.28.1rc1.dev580) those of the releases
    either side of it, as the flag tables do."""
    releases = sorted(LINES["versions"], key=lambda v: tuple(int(x) for x in v.split(".")))
    wanted: set[str] = set()
    for profile in PROFILES.values():
        version = profile.defaults["image"]["vllmVersion"]
        if version in releases:
            wanted.add(version)
            continue
        base = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
        below = [r for r in releases if tuple(int(x) for x in r.split(".")) <= base]
        above = [r for r in releases if tuple(int(x) for x in r.split(".")) > base]
        assert below and above, f"{profile.name}: vLLM {version} has no release either side in the table"
        wanted |= {below[-1], above[0]}
    assert {"0.33.0", "0.23.0", "0.28.0", "0.29.0"} <= wanted
    entries: list[Milestone | StartupFailure] = [*MILESTONES, *STARTUP_FAILURES]
    for entry in entries:
        samples: tuple[Sample, ...] = entry.samples
        versions = {s.version for s in samples}
        assert wanted <= versions, f"{entry}: no sample for {sorted(wanted - versions)}"
        assert all(
            re.match(r"(vllm|vllm-ascend|CPython|uvicorn) v?[\d.]+: \S+:\d+", s.source) for s in entry.samples
        )


def test_the_two_lines_of_issue_35_are_milestones() -> None:
    """vLLM 0.33.0's banner and server start (vllm/entrypoints/common/startup.py:18,
    vllm/entrypoints/launchers/api_server/entry.py:139), as the issue quotes them."""
    banner = milestone(
        "(APIServer pid=1) INFO 12-02 04:01:31 [startup.py:51] vLLM server version 0.33.0, serving model /models/x"
    )
    start = milestone(
        "(APIServer pid=1) INFO 12-02 04:02:25 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000"
    )
    assert banner is not None and banner.name == "vLLM started"
    assert start is not None and start.name == "API server starting"


def test_the_older_wordings_stay_milestones() -> None:
    assert milestone("INFO 05-12 12:47:16 vLLM API server version 0.10.1")
    assert milestone("INFO 05-12 12:47:16 Starting vLLM API server 0 on http://0.0.0.0:8000")


def test_the_logo_banner_is_read_in_colour_too() -> None:
    """The logo's colour slots (``${w}…${r}`` of the 0.33.0 template) on a terminal."""
    line = (
        " \x1b[93m▄▄\x1b[0m \x1b[94m▄█\x1b[0m \x1b[1m█     █     █ ▀▄▀ █\x1b[0m  version \x1b[1m0.33.0\x1b[0m"
    )
    assert (found := milestone(line)) is not None and found.name == "vLLM started"


@pytest.mark.parametrize("version", sorted(LINES["not_failures"]["the engine's port retry"]))
def test_vllms_own_port_retry_is_not_a_taken_port(version: str) -> None:
    (sample,) = LINES["not_failures"]["the engine's port retry"][version]
    assert failure(sample["sample"]) is None
    assert failure("OSError: [Errno 98] Address already in use") is not None


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


FAILURES = [  # the --max-num-seqs lines: vLLM 0.25.0's own (tests/fixtures/vllm-0.25.0-h200/bad-flag.log)
    # the issue's own log line, on a flag from extraArgs
    (
        ["vllm serve: error: invalid numeric argument: invalid literal for int() with base 10: 'abc'"],
        set(),
        "glm:serving.extraArgs, or the glm:serving key that renders the flag",
    ),
    (["main.py serve: error: argument --max-num-seqs: invalid int value: 'abc'"], {"--max-num-seqs"}, "glm:serving.maxNumSeqs"),
    (["main.py serve: error: argument --max-num-seqs: invalid int value: 'abc'"], set(), "glm:serving.extraArgs"),
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
    loop = ["main.py serve: error: argument --max-num-seqs: invalid int value: 'abc'"] * 5
    found = diagnose(["CUDA out of memory. (an older run)", *loop], {"--max-num-seqs"})
    assert found.key == "glm:serving.maxNumSeqs"
    assert found.lines[-1] == loop[0] and found.lines.count(loop[0]) == 1


def test_an_unknown_failure_still_shows_the_error_lines() -> None:
    found = diagnose(["INFO fine", "ERROR something nobody catalogued", "Traceback (most recent call last):"])
    assert found.cause == "not one of the known start-up failures"
    assert found.lines == ("ERROR something nobody catalogued", "Traceback (most recent call last):")
