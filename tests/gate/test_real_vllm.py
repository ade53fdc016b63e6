"""The gate's readers over what the real vLLM printed and answered: vLLM 0.25.0 serving a tiny Qwen2
config with ``--load-format dummy`` on the real H200 (tests/fixtures/vllm-0.25.0-h200/, copied from
the project's shared fixtures with their sha256). Expected values are read off those files (the
log's own clock, the stream's own lines), never from the code under test."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from components.gate.container import ContainerWatch
from components.gate.metrics import kv_pools, parse_samples
from components.gate.sse import DONE, chunk_deltas, delta_text, sse_events
from components.gate.startup import diagnose, failure, milestone
from components.gate.steps import MIN_STREAM_SPREAD

PROJECT = Path(__file__).resolve().parents[2]
REAL = PROJECT / "tests" / "fixtures" / "vllm-0.25.0-h200"
VLLM_CLOCK = re.compile(r"^\(\w+ pid=\d+\) \w+ (\d\d-\d\d \d\d:\d\d:\d\d) ")
# Where the project reads vLLM's metrics: the dashboards, the alert rules, the gate, the probes.
METRIC_USERS = [
    "dashboards/glm53-fleet.json",
    "components/render/dashboard.py",
    "components/render/prometheus_rules.py",
    *(f"components/gate/{m}.py" for m in ("messages", "metrics", "steps", "transport")),
    "components/semantic_probe/saturation.py",
    "components/semantic_probe/service.py",
    "capacity_probe/vllm_metrics.py",
    "capacity_probe/measure/hol.py",
    "capacity_probe/measure/server_info.py",
    "capacity_probe/measure/spec_decode.py",
]


def real(name: str) -> str:
    """The file as vLLM wrote it (tqdm's ``\r`` kept: no newline translation)."""
    return (REAL / name).read_bytes().decode("utf-8")


@pytest.mark.parametrize("line", real("SHA256SUMS").splitlines())
def test_the_fixtures_are_what_vllm_printed(line: str) -> None:
    digest, name = line.split()
    assert hashlib.sha256((REAL / name).read_bytes()).hexdigest() == digest


def _stamped(log: str) -> list[str]:
    """The log as ``docker logs --timestamps`` gives it: each line stamped with vLLM's own clock
    (a line without one, uvicorn's or tqdm's, takes the last line's). Docker stamps lines split at
    ``\n``; the gate reads them in text mode, where a tqdm bar's ``\r`` ends a line too, so a bar's
    redraws come unstamped."""
    stamped, at = [], None
    for line in log.split("\n"):
        if found := VLLM_CLOCK.match(line):
            at = datetime.strptime(f"2026-{found.group(1)}", "%Y-%m-%d %H:%M:%S")
        if at is not None:
            first, *redraws = line.split("\r")
            stamped += [f"{at:%Y-%m-%dT%H:%M:%S}.000000000Z {first}", *redraws]
    return stamped


def test_the_watcher_reads_the_real_start_up_in_order() -> None:
    """What the log shows (read off it): the logo banner at 04:01:31, no weights lines under
    ``--load-format dummy``, ``Model loading took`` at 04:01:53, the KV pool at 04:02:05, the
    capture bars (each drawn after a ``\r``, so unstamped: printed once) and the capture's end,
    ``init engine … took 27.83 s`` at 04:02:20, the server start and uvicorn's ``Application
    startup complete.`` at 04:02:25. Every milestone once, in the log's order."""
    printed: list[str] = []
    watch = ContainerWatch({"name": "vllm-0.25.0", "known_start_seconds": 116.0}, printed.append, set())
    lines = _stamped(real("serve-startup-and-drain.log"))
    watch.started_at = datetime.fromisoformat("2026-12-02T04:01:31+00:00").timestamp()
    for line in lines:
        watch.read_line(line)
    timeline = [re.match(r"start-up: (.+?) at (\d+:\d\d)", p).groups() for p in printed]  # type: ignore[union-attr]
    assert timeline == [
        ("vLLM started", "0:00"),
        ("model loaded", "0:22"),
        ("KV cache sized", "0:34"),
        ("CUDA graph capture", "0:34"),
        ("CUDA graphs captured", "0:34"),
        ("engine initialised", "0:49"),
        ("API server starting", "0:54"),
        ("startup complete", "0:54"),
    ]
    assert printed[0].endswith("▀▄▀ █  version 0.25.0")
    assert "Capturing CUDA graphs (PIECEWISE):   0%" in printed[3]
    assert printed[-2].endswith(": Starting vLLM server on http://127.0.0.1:8000")
    assert printed[-1].endswith(": Application startup complete.")
    assert watch.stage == "ready"


def test_the_real_log_has_no_known_failure_in_it() -> None:
    """A healthy start and a drain: not one line is taken for a start-up failure."""
    assert [line for line in real("serve-startup-and-drain.log").splitlines() if failure(line)] == []


def test_the_real_bad_flag_is_diagnosed_with_vllms_own_words() -> None:
    """``--max-num-seqs abc``: vLLM exited 2 with argparse's message (bad-flag.log)."""
    log = real("bad-flag.log").splitlines()
    said = "main.py serve: error: argument --max-num-seqs: invalid int value: 'abc'"
    assert said in log
    found = diagnose(log, {"--max-num-seqs"})
    assert (found.cause, found.key) == ("a flag value vLLM refuses", "glm:serving.maxNumSeqs")
    assert said in found.lines and said in found.describe()
    assert milestone(said) is None


def test_the_sse_reader_reads_the_real_stream() -> None:
    """chat-stream.sse: every ``data: {…}`` line a chunk of the same completion, ``data: [DONE]`` last."""
    text = real("chat-stream.sse")
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert text.rstrip().endswith("data: [DONE]")
    events = list(sse_events(text.splitlines()))
    assert events[-1] is DONE and events[:-1] == chunks
    streamed = "".join(delta_text(d) for chunk in chunks for d in chunk_deltas(chunk))
    assert streamed == "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert {c["id"] for c in chunks} == {chunks[0]["id"]} and chunks[0]["choices"][0]["delta"][
        "role"
    ] == "assistant"


def test_the_kv_pool_the_gate_reads_is_the_one_vllm_logged() -> None:
    """``num_gpu_blocks * block_size`` from the real ``vllm:cache_config_info`` is the log's
    ``GPU KV cache size: 43,606,896 tokens`` of the same run."""
    logged = re.search(r"GPU KV cache size: ([\d,]+) tokens", real("serve-startup-and-drain.log"))
    assert logged is not None
    (pool,) = kv_pools(parse_samples(real("metrics.txt")))
    assert pool["tokens"] == int(logged.group(1).replace(",", "")) == 43_606_896


def _used_metric_names() -> dict[str, set[str]]:
    used: dict[str, set[str]] = {}
    for rel in METRIC_USERS:
        for name in re.findall(r"vllm:[a-z_]+", (PROJECT / rel).read_text(encoding="utf-8")):
            used.setdefault(re.sub(r"_(bucket|sum|count)$", "", name), set()).add(rel)
    return used


def test_every_metric_the_project_reads_is_in_the_real_metrics_but_speculative_decodings() -> None:
    """The real ``/metrics`` of 0.25.0 (metrics.txt): every family and sample name. Speculative
    decoding's counters are exported only with it on, and this run had it off. A name that ends
    in ``_`` is a prefix (``vllm:spec_decode_*``)."""
    text = real("metrics.txt")
    exported = set(re.findall(r"^(vllm:[a-z_]+)", text, re.M)) | set(
        re.findall(r"^# TYPE (vllm:[a-z_]+)", text, re.M)
    )
    used = _used_metric_names()
    found = {n for n in used if n in exported or (n.endswith("_") and any(e.startswith(n) for e in exported))}
    missing = sorted(set(used) - found)
    print("found:", sorted(found), "\nmissing:", missing)
    assert missing == [n for n in missing if n.startswith("vllm:spec_decode_")], missing
    assert {
        "vllm:cache_config_info",
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_requests_waiting_by_reason",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
    } <= found


REHEARSAL = PROJECT / "tests" / "fixtures" / "h200-rehearsal-2026-12-02"


@pytest.mark.parametrize("line", (REHEARSAL / "SHA256SUMS").read_text().splitlines())
def test_the_rehearsal_files_are_what_came_back(line: str) -> None:
    digest, name = line.split()
    assert hashlib.sha256((REHEARSAL / name).read_bytes()).hexdigest() == digest


def test_the_watcher_reads_the_rehearsals_start_up_in_order() -> None:
    """The project's own rehearsal (scripts/h200) on the real H200, read off its log: the banner at
    17:53:48, ``Model loading took`` at 17:54:27, the KV pool at 17:54:39 (the capture bar that
    follows carries no clock of its own), the capture's end at 17:54:42, ``init engine`` at
    17:54:57, ``Starting vLLM server on`` at 17:55:01 and uvicorn's line after it."""
    printed: list[str] = []
    watch = ContainerWatch({"name": "rehearsal", "known_start_seconds": 116.0}, printed.append, set())
    watch.started_at = datetime.fromisoformat("2026-12-02T17:53:48+00:00").timestamp()
    for line in _stamped((REHEARSAL / "serve.log").read_bytes().decode("utf-8")):
        watch.read_line(line)
    timeline = [re.match(r"start-up: (.+?) at (\d+:\d\d)", p).groups() for p in printed]  # type: ignore[union-attr]
    assert timeline[:8] == [
        ("vLLM started", "0:00"),
        ("model loaded", "0:39"),
        ("KV cache sized", "0:51"),
        ("CUDA graph capture", "0:51"),
        ("CUDA graphs captured", "0:54"),
        ("engine initialised", "1:09"),
        ("API server starting", "1:13"),
        ("startup complete", "1:13"),
    ]
    assert watch.stage == "ready"


STREAMING_REHEARSAL = PROJECT / "tests" / "fixtures" / "h200-rehearsal-2026-12-02-streaming"


@pytest.mark.parametrize("line", (STREAMING_REHEARSAL / "SHA256SUMS").read_text().splitlines())
def test_the_second_rehearsals_files_are_what_came_back(line: str) -> None:
    digest, name = line.split()
    assert hashlib.sha256((STREAMING_REHEARSAL / name).read_bytes()).hexdigest() == digest


def test_the_real_fast_stream_passed_the_gate_with_a_spread_the_old_check_refused() -> None:
    """The first rehearsal's gate refused the real vLLM's stream as buffered (gate.err there); the
    second, after the fix, passed it. Its spread is still under the 30 % the old check demanded:
    what passed it is the 32 separate arrivals."""
    assert "failed at step 'streaming'" in (REHEARSAL / "gate.err").read_text()
    run = json.loads((STREAMING_REHEARSAL / "summary.json").read_text())["gate"][0]
    assert run["steps"] == "models,kv_pool,streaming" and run["rc"] == 0, run
    assert any(line.startswith("[smoke-gate] streaming: ok") for line in run["said"]), run["said"]
    report = run["report"]
    assert report["stream_spread"] < MIN_STREAM_SPREAD
    assert report["stream_chunks"] == 32 and report["stream_bursts"] == 32
