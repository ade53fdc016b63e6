"""What the front costs a request: nginx alone, nginx with the usage meter, and LiteLLM's proxy, side by
side in one run, in front of the same simulator, with the same client (issue 46, "Nearly free").

Fronts, each started once for the whole run, all on loopback:

- ``nginx``: the rendered config, straight to the engine (``metered_front(..., meter=False)``);
- ``meter``: the same with the usage meter in the path (``metered_front(..., meter=True)``): whatever
  the meter is when this runs (a process of its own, or inside nginx);
- ``litellm``: ``litellm --config`` (its documented proxy config: one ``model_list`` entry,
  ``hosted_vllm/<name>`` at the simulator's ``/v1``, a master key, no database, one worker as its
  default), from ``--litellm`` (a venv outside the repository); absent, its column is skipped and
  the reason printed.

One simulator, shared by the three fronts. Per-front simulators would be three processes with their
own threads, allocator state and place in the scheduler of a 2-core box, and a difference between
them would read as a difference between fronts. Shared, every front meets the very same engine, and
as the loads are interleaved (one front at a time, the engine idle before each: checked on its
``/metrics``) none inherits another's queue. Its ``--max-num-seqs`` (``--max-num-seqs``, 64 by default) lets the
64 streams all run at once, so their figures are the fronts', not the engine queue's; its decode time
per token is ``VLLM_SIM_DECODE_TOKEN_SECONDS`` (``--decode-seconds``, 0.02 s as in fair_share.py:
50 tokens/s per stream). Prompts are the same for every front (the prefix cache is as warm for each).

Loads, each for each front (the client: httpx's asyncio client, a connection pool as large as the
concurrency, answers checked against what the simulator says itself):

- ``short c=1/16/64``: a one-token chat (13x17, thinking off: "221") by that many workers back to
  back for ``--short-seconds``: requests/s, p50, p99;
- ``streams 64``: 64 workers each streaming ``--stream-rounds`` answers of 96 tokens back to back
  (the simulator's filler, checked word for word, ``usage`` included): TTFT p50/p99, the gap between
  chunks p99, tokens/s;
- ``streams 3x``: 3 x maxNumSeqs workers the same way (``--queue-rounds``): two of every three wait
  for a slot, in the engine's queue (nginx) or in front of it: TTFT p50/p99.

Order: for each load, nginx -> meter -> litellm, ``--passes`` times (2: a -> b -> c -> a -> b -> c;
``--quick``: 1); each pass is printed beside the pooled figure. Each load stops starting requests at its
duration and is cut at 15 s (what is cut is counted); the run skips what would pass ``--budget``
(600 s, ``--quick``: 120 s). Also printed: each front's own CPU time per request or token (its
processes' user + system time, from /proc: on a 2-core box shared with others the steadier figure),
and per load the cores the front, the client, the engine and everything outside this benchmark
(other agents) kept busy. A stream cut at the bound before its first token counts its wait so far
as its TTFT, and the figure is printed as a bound (``>=``). Figures are printed, never asserted.

nginx closes each client connection after its answer (``keepalive_timeout 0``, see the rendered
config), LiteLLM keeps it open: the same client meets each front as it is configured.

    .venv/bin/python benchmarks/front_overhead.py [--quick] [--litellm /work/litellm-venv/bin/litellm]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.config import build_stack_config  # noqa: E402
from tests.engine import free_port  # noqa: E402
from tests.front_rig import NGINX, SERVED, SIM, running, wait_for_port  # noqa: E402
from tests.metered_front import MeteredFront, metered_front  # noqa: E402

KEYS = {"bench": "sk-bench-7f3a91c0d2e84b56a1"}
LITELLM_MASTER_KEY = "sk-litellm-bench-5c1e9a7d3b"
DEFAULT_LITELLM = os.environ.get("LITELLM", "/work/litellm-venv/bin/litellm")
ARITHMETIC = [{"role": "user", "content": "What is 13×17? Answer with the number only."}]
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
"""Else the simulator thinks aloud first (``<think>13*17=221</think>221``) and one token is ``<``."""
STREAM_PROMPT = [{"role": "user", "content": "Tell me about the sea."}]
STREAM_TOKENS = 96
LOAD_CAP_SECONDS = 15.0
NO_LIMITS = {"requestsPerSecond": 1_000_000, "burst": 1_000_000, "connectionsPerKey": 4096}
"""The per-key limits stay in nginx's path (the same directives run) but never refuse a request here."""
FRONTS = ("nginx", "meter", "litellm")
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Front:
    name: str
    base: str
    key: str
    processes: Callable[[], set[int]]
    """The pids whose CPU time is this front's (nginx's master and workers, the meter, LiteLLM)."""


@dataclass(frozen=True)
class Load:
    name: str
    stream: bool
    workers: int
    seconds: float = 0.0
    """Short loads: how long the workers keep sending."""
    rounds: int = 0
    """Streams: how many each worker sends, back to back."""


@dataclass
class Sample:
    """One load through one front. A stream's TTFT, gaps and tokens are taken as they arrive, so a
    stream still running at the 15 s bound counts what it had; one with no token yet by then counts
    its wait so far as its TTFT (``censored``: the true one is longer)."""

    ok: int = 0
    wrong: int = 0
    errors: int = 0
    cut: int = 0
    """Requests still running at the 15 s bound."""
    censored: int = 0
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    tokens: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds during the load: ``front`` (its processes), ``client`` (this process), ``engine``
    (the simulator) and ``others`` (every process outside this benchmark: other agents)."""
    notes: list[str] = field(default_factory=list)
    in_flight: dict[int, float | None] = field(default_factory=dict)
    """Requests running now: their start, or None once a stream's first token came."""

    def merge(self, other: Sample) -> Sample:
        return Sample(
            self.ok + other.ok, self.wrong + other.wrong, self.errors + other.errors, self.cut + other.cut,
            self.censored + other.censored, self.wall + other.wall, self.latencies + other.latencies,
            self.ttft + other.ttft, self.gaps + other.gaps, self.tokens + other.tokens,
            {k: self.cpu.get(k, 0.0) + other.cpu.get(k, 0.0) for k in {*self.cpu, *other.cpu}},
            self.notes + other.notes,
        )  # fmt: skip


# ---- the client ----------------------------------------------------------------------------------


def _client(front: Front, workers: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    return httpx.AsyncClient(
        base_url=front.base,
        headers={"Authorization": f"Bearer {front.key}"},
        limits=limits,
        timeout=httpx.Timeout(60.0, pool=None),
    )


async def _short_worker(http: httpx.AsyncClient, until: float, sample: Sample) -> None:
    body = {"model": SERVED, "messages": ARITHMETIC, "max_tokens": 1, **NO_THINKING}
    me = id(asyncio.current_task())
    while time.monotonic() < until:
        started = time.monotonic()
        sample.in_flight[me] = started
        try:
            response = await http.post("/v1/chat/completions", json=body)
            answer = (
                response.json()["choices"][0]["message"]["content"] if response.status_code == 200 else None
            )
        except (httpx.HTTPError, ValueError, LookupError, TypeError) as e:
            sample.errors += 1
            sample.notes.append(type(e).__name__)
            continue
        finally:
            sample.in_flight.pop(me, None)
        if response.status_code != 200:
            sample.errors += 1
            sample.notes.append(f"HTTP {response.status_code}")
        elif (answer or "").strip() != "221":
            sample.wrong += 1
            sample.notes.append(f"answer {answer!r}")
        else:
            sample.ok += 1
            sample.latencies.append(time.monotonic() - started)


async def _stream_worker(http: httpx.AsyncClient, rounds: int, expected: str, sample: Sample) -> None:
    body = {
        "model": SERVED,
        "messages": STREAM_PROMPT,
        "max_tokens": STREAM_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    me = id(asyncio.current_task())
    for _ in range(rounds):
        started = time.monotonic()
        sample.in_flight[me] = started
        text, last, finish, usage = [], 0.0, None, None
        try:
            async with http.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    sample.errors += 1
                    sample.notes.append(f"HTTP {response.status_code}")
                    continue
                async for line in response.aiter_lines():
                    if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                        continue
                    event = json.loads(line[5:])
                    usage = event.get("usage") or usage
                    for choice in event.get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            now = time.monotonic()
                            if text:
                                sample.gaps.append(now - last)
                            else:
                                sample.ttft.append(now - started)
                                sample.in_flight[me] = None
                            last = now
                            sample.tokens += 1
                            text.append(piece)
                        finish = choice.get("finish_reason") or finish
        except (httpx.HTTPError, ValueError, LookupError, TypeError, AttributeError) as e:
            sample.errors += 1
            sample.notes.append(type(e).__name__)
            continue
        finally:
            sample.in_flight.pop(me, None)
        completion = (usage or {}).get("completion_tokens")
        if "".join(text) != expected or finish != "length" or completion != STREAM_TOKENS:
            sample.wrong += 1
            sample.notes.append(f"{len(text)} pieces, finish {finish}, usage {completion}")
        else:
            sample.ok += 1


async def _drive(front: Front, load: Load, expected: str) -> Sample:
    sample = Sample()
    async with _client(front, load.workers) as http:
        started = time.monotonic()
        if load.stream:
            jobs = [_stream_worker(http, load.rounds, expected, sample) for _ in range(load.workers)]
        else:
            until = started + load.seconds
            jobs = [_short_worker(http, until, sample) for _ in range(load.workers)]
        tasks = [asyncio.ensure_future(job) for job in jobs]
        done, pending = await asyncio.wait(tasks, timeout=LOAD_CAP_SECONDS)
        sample.wall = time.monotonic() - started
        sample.cut = len(sample.in_flight)
        for waiting_since in sample.in_flight.values():
            if load.stream and waiting_since is not None:
                sample.ttft.append(time.monotonic() - waiting_since)
                sample.censored += 1
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                sample.errors += 1
                sample.notes.append(repr(task.exception()))
    return sample


# ---- CPU accounting from /proc ---------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, float, list[str]]]:
    """pid -> (parent pid, CPU seconds user + system, argv) of every process that can be read."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
            table[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, argv)
    return table


def _with_descendants(table: dict, roots: set[int]) -> set[int]:
    found, grew = set(roots) & set(table), True
    while grew:
        more = {pid for pid, (ppid, _, _) in table.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return found


def _machine_busy() -> float:
    """CPU seconds every core spent busy since boot (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / TICK


def nginx_front_processes(directory: Path | None, meter_port: int | None) -> Callable[[], set[int]]:
    """nginx's master (its argv names the front's directory) and workers, and a meter of its own
    (a process listening on ``meter_port``, when there is one)."""

    def pids() -> set[int]:
        table = _proc_table()
        roots = {
            pid for pid, (_, _, argv) in table.items() if directory and any(str(directory) in a for a in argv)
        }
        if meter_port is not None:
            roots |= {
                pid
                for pid, (_, _, argv) in table.items()
                if any(a == "--port" and b == str(meter_port) for a, b in itertools.pairwise(argv))
            }
        return _with_descendants(table, roots)

    return pids


@contextlib.contextmanager
def cpu_meter(front: Front, engine_pid: int) -> Iterator[dict[str, float]]:
    """The CPU seconds spent while the block runs, by whom (see ``Sample.cpu``)."""
    parts = {"front": front.processes(), "client": {os.getpid()}, "engine": {engine_pid}}
    spent: dict[str, float] = {}
    before_table, busy_before = _proc_table(), _machine_busy()
    yield spent
    after_table, busy_after = _proc_table(), _machine_busy()
    mine = _with_descendants(after_table, {os.getpid()}) | _with_descendants(before_table, {os.getpid()})

    def used(pids: set[int]) -> float:
        return sum(
            after_table[p][1] - before_table[p][1] for p in pids if p in after_table and p in before_table
        )

    # No pid found (a front whose processes cannot be told apart): no figure rather than a zero.
    spent.update({name: used(pids) for name, pids in parts.items() if pids})
    spent["others"] = max(0.0, (busy_after - busy_before) - used(mine))


# ---- the engine and LiteLLM ----------------------------------------------------------------------


def engine_queue(engine: str) -> tuple[int, int]:
    """The simulator's requests running and waiting (its /metrics)."""
    text = httpx.get(f"{engine}/metrics", timeout=5).text
    counts = []
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        found = re.search(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)
        counts.append(int(float(found[1])) if found else -1)
    return counts[0], counts[1]


def wait_idle(engine: str, timeout: float = 30.0) -> str | None:
    """Wait until the engine runs and queues nothing (the previous load's cut requests aborted)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running_now, waiting = engine_queue(engine)
        if running_now == 0 and waiting == 0:
            return None
        time.sleep(0.1)
    return f"the engine still had {running_now} running, {waiting} waiting after {timeout:.0f} s"


@contextlib.contextmanager
def simulator(max_num_seqs: int, decode_seconds: float) -> Iterator[tuple[str, int]]:
    """The vLLM-protocol simulator with the argv metered_front gives it, on a port of its own."""
    port = free_port()
    argv = [
        sys.executable, str(SIM), "serve", "/models/x", "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", SERVED, "--max-model-len", "32768", "--max-num-seqs", str(max_num_seqs),
    ]  # fmt: skip
    env = {**os.environ, "VLLM_SIM_QUIET": "1", "VLLM_SIM_DECODE_TOKEN_SECONDS": str(decode_seconds)}
    directory = Path(tempfile.mkdtemp(prefix="glm-bench-sim-"))
    try:
        with running(argv, directory / "sim.log", env) as proc:
            wait_for_port(port, proc, timeout=30)
            yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def litellm_config(engine: str) -> str:
    """LiteLLM's documented proxy config for an OpenAI-compatible server: the model, its base, a
    master key; no database (no ``database_url``), nothing else."""
    return (
        "model_list:\n"
        f"  - model_name: {SERVED}\n"
        "    litellm_params:\n"
        f"      model: hosted_vllm/{SERVED}\n"
        f"      api_base: {engine}/v1\n"
        '      api_key: "none"\n'
        "general_settings:\n"
        f"  master_key: {LITELLM_MASTER_KEY}\n"
    )


def litellm_version(litellm: str) -> str:
    python = Path(litellm).parent / "python"
    code = "import importlib.metadata as m; print(m.version('litellm'))"
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    return result.stdout.strip() or f"unknown ({result.stderr.strip()[-200:]})"


@contextlib.contextmanager
def litellm_proxy(litellm: str, engine: str) -> Iterator[Front]:
    directory = Path(tempfile.mkdtemp(prefix="glm-bench-litellm-"))
    (directory / "config.yaml").write_text(litellm_config(engine))
    port = free_port()
    argv = [litellm, "--config", str(directory / "config.yaml"), "--host", "127.0.0.1", "--port", str(port)]
    # The model cost map is fetched from GitHub at start-up unless told to use the packaged copy
    # (documented); this box reaches no GitHub, and the fetch's retries would only delay the start.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    try:
        with running(argv, directory / "litellm.log", env) as proc:
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"litellm exited: {(directory / 'litellm.log').read_text()[-2000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("litellm not live after 120 s")
                time.sleep(0.25)

            def pids() -> set[int]:
                return _with_descendants(_proc_table(), {proc.pid})

            yield Front("litellm", f"http://127.0.0.1:{port}", LITELLM_MASTER_KEY, pids)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def reference_stream(engine: str) -> str:
    """What the simulator itself answers the stream prompt (its filler), asked straight."""
    body = {"model": SERVED, "messages": STREAM_PROMPT, "max_tokens": STREAM_TOKENS}
    reply = httpx.post(f"{engine}/v1/chat/completions", json=body, timeout=60).json()
    short = httpx.post(
        f"{engine}/v1/chat/completions",
        json={"model": SERVED, "messages": ARITHMETIC, "max_tokens": 1, **NO_THINKING},
        timeout=60,
    ).json()
    assert short["choices"][0]["message"]["content"] == "221", short
    return reply["choices"][0]["message"]["content"]


def warm_up(front: Front, expected: str) -> Sample:
    """A few answers through each front before anything is measured (LiteLLM builds its clients at
    the first request)."""
    return asyncio.run(_drive(front, Load("warm-up", True, 4, rounds=1), expected)).merge(
        asyncio.run(_drive(front, Load("warm-up", False, 4, seconds=1.0), expected))
    )


# ---- the report ----------------------------------------------------------------------------------


def pct(values: list[float], q: int) -> float | None:
    if len(values) < 2:
        return None
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


@dataclass(frozen=True)
class Figure:
    label: str
    unit: str
    value: Callable[[Sample], float | None]
    higher_is_better: bool
    goal: str = ""
    """ratio>=X, ratio<=X or added<=X (ms), against nginx alone."""
    scale: float = 1.0
    censorable: bool = False
    """A TTFT: a lower bound (printed with >=) where streams were cut before their first token."""


def _rate(s: Sample) -> float | None:
    return s.ok / s.wall if s.wall and s.ok else None


def _tokens_rate(s: Sample) -> float | None:
    return s.tokens / s.wall if s.wall and s.tokens else None


def _cpu_per_request(s: Sample) -> float | None:
    return s.cpu["front"] / s.ok * 1e6 if s.ok and "front" in s.cpu else None


def _cpu_per_token(s: Sample) -> float | None:
    return s.cpu["front"] / s.tokens * 1e6 if s.tokens and "front" in s.cpu else None


SHORT_FIGURES = (
    Figure("requests/s", "/s", _rate, True, "ratio>=0.95"),
    Figure("p50", "ms", lambda s: pct(s.latencies, 50), False, "added<=1", 1e3),
    Figure("p99", "ms", lambda s: pct(s.latencies, 99), False, "", 1e3),
    Figure("front CPU/request", "us", _cpu_per_request, False),
)
STREAM_FIGURES = (
    Figure("TTFT p50", "ms", lambda s: pct(s.ttft, 50), False, "", 1e3, True),
    Figure("TTFT p99", "ms", lambda s: pct(s.ttft, 99), False, "", 1e3, True),
    Figure("gap p99", "ms", lambda s: pct(s.gaps, 99), False, "ratio<=1.05", 1e3),
    Figure("tokens/s", "/s", _tokens_rate, True, "ratio>=0.95"),
    Figure("front CPU/token", "us", _cpu_per_token, False),
)
QUEUE_FIGURES = (
    Figure("TTFT p50", "ms", lambda s: pct(s.ttft, 50), False, "", 1e3, True),
    Figure("TTFT p99", "ms", lambda s: pct(s.ttft, 99), False, "ratio<=1.05", 1e3, True),
    Figure("tokens/s", "/s", _tokens_rate, True),
    Figure("front CPU/token", "us", _cpu_per_token, False),
)


def _fmt(value: float | None, at_least: bool = False) -> str:
    if value is None:
        return "–"
    if at_least:
        return ">=" + _fmt(value)
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _pool(samples: list[Sample]) -> Sample:
    pooled = samples[0]
    for s in samples[1:]:
        pooled = pooled.merge(s)
    return pooled


def _measure(figure: Figure, sample: Sample | None) -> tuple[float | None, bool]:
    """The figure in its unit, and whether it is only a lower bound (streams cut before a token)."""
    if sample is None:
        return None, False
    value = figure.value(sample)
    return (None if value is None else value * figure.scale), figure.censorable and sample.censored > 0


def _cell(figure: Figure, passes: list[Sample]) -> str:
    if not passes:
        return "skipped"
    text = _fmt(*_measure(figure, _pool(passes)))
    if len(passes) > 1:
        text += " (" + "|".join(_fmt(*_measure(figure, s)) for s in passes) + ")"
    return text


def _ratio(figure: Figure, mine: Sample, base: Sample) -> str:
    (x, at_least), (y, _) = _measure(figure, mine), _measure(figure, base)
    return "–" if x is None or not y else (">=" if at_least else "") + f"{x / y:.2f}"


def _ratio_cell(figure: Figure, mine: list[Sample], base: list[Sample]) -> str:
    if not mine or not base:
        return "–"
    text = _ratio(figure, _pool(mine), _pool(base)) + "x"
    if len(mine) > 1 and len(mine) == len(base):
        text += " (" + "|".join(_ratio(figure, a, b) for a, b in zip(mine, base, strict=True)) + ")"
    return text


def _goal(figure: Figure, meter: Sample | None, nginx: Sample | None) -> tuple[str, bool | None]:
    """The goal's verdict for the meter against nginx alone: (text, met), met None where unknown."""
    (m, _), (n, _) = _measure(figure, meter), _measure(figure, nginx)
    if not figure.goal:
        return "", None
    if m is None or not n:
        return "n/a", None
    if figure.goal.startswith("added<="):
        limit = float(figure.goal.removeprefix("added<="))
        met = m - n <= limit
        return f"{m - n:+.2f} {figure.unit} (<={limit:g}): {'met' if met else 'NOT met'}", met
    limit = float(figure.goal[len("ratio>=") :])
    met = m / n >= limit if figure.goal.startswith("ratio>=") else m / n <= limit
    sign = ">=" if figure.goal.startswith("ratio>=") else "<="
    return f"{m / n:.2f}x ({sign}{limit:g}x): {'met' if met else 'NOT met'}", met


def _ahead(figure: Figure, meter: Sample | None, litellm: Sample | None) -> str:
    """Whether the meter does better than LiteLLM; '?' where LiteLLM's figure is only a bound."""
    (m, _), (lite, bound) = _measure(figure, meter), _measure(figure, litellm)
    if m is None or lite is None:
        return ""
    better = m >= lite if figure.higher_is_better else m <= lite
    return "yes" if better else "?" if bound else "NO"


def _figures(load: Load) -> tuple[Figure, ...]:
    if not load.stream:
        return SHORT_FIGURES
    return QUEUE_FIGURES if load.name.endswith("3x") else STREAM_FIGURES


def report(loads: list[Load], results: dict[tuple[str, str], list[Sample]], passes: int) -> None:
    def got(load: Load, front: str) -> list[Sample]:
        return results.get((load.name, front), [])

    def pooled(load: Load, front: str) -> Sample | None:
        return _pool(got(load, front)) if got(load, front) else None

    width = 17 if passes < 2 else 11 + 8 * passes
    head = f"{'load':11} {'figure':22} " + " ".join(
        f"{h:>{width}}" for h in ("nginx alone", "nginx + meter", "litellm")
    )
    head += f" {'meter/nginx':>{width}} {'litellm/nginx':>{width}}  {'meter vs litellm':16}"
    print("\nOne pass." if passes < 2 else f"\nPooled over {passes} passes, each pass in brackets.")
    print(head)
    print("-" * len(head))
    verdicts: list[tuple[str, str, bool | None]] = []
    behind: list[str] = []
    for load in loads:
        for figure in _figures(load):
            row = f"{load.name:11} {figure.label + ' (' + figure.unit + ')':22} "
            row += " ".join(f"{_cell(figure, got(load, f)):>{width}}" for f in FRONTS)
            row += f" {_ratio_cell(figure, got(load, 'meter'), got(load, 'nginx')):>{width}}"
            row += f" {_ratio_cell(figure, got(load, 'litellm'), got(load, 'nginx')):>{width}}"
            ahead = _ahead(figure, pooled(load, "meter"), pooled(load, "litellm"))
            row += f"  {'meter ahead' if ahead == 'yes' else 'meter BEHIND' if ahead == 'NO' else ahead}"
            if ahead in ("NO", "?"):
                behind.append(
                    f"{load.name} {figure.label}{' (LiteLLM figure a bound)' if ahead == '?' else ''}"
                )
            print(row.rstrip())
            text, met = _goal(figure, pooled(load, "meter"), pooled(load, "nginx"))
            if text:
                verdicts.append((f"{load.name} {figure.label}", text, met))
    print("\nGoals (issue 46), the meter against nginx alone, pooled figures:")
    for name, text, _ in verdicts:
        print(f"  {name:28} {text}")
    if any(got(load, "litellm") for load in loads):
        print(
            "  ahead of LiteLLM on every figure: "
            + ("met" if not behind else f"NOT met or unknown: {', '.join(behind)}")
        )
    print(
        "\nAnswers (all passes): ok / wrong / errors / cut at the 15 s bound; the load's seconds; "
        "cores busy meanwhile: the front / the client / the engine / processes outside this benchmark"
    )
    for load in loads:
        for front in FRONTS:
            s = pooled(load, front)
            if s is None:
                print(f"  {load.name:11} {front:8} skipped")
                continue
            cores = " / ".join(
                f"{s.cpu.get(k, 0.0) / s.wall:.2f}" for k in ("front", "client", "engine", "others")
            )
            said = f"; {', '.join(sorted(set(s.notes))[:3])}" if s.notes else ""
            print(
                f"  {load.name:11} {front:8} {s.ok}/{s.wrong}/{s.errors}/{s.cut}, {s.wall:.1f} s, cores {cores}{said}"
            )


# ---- the run -------------------------------------------------------------------------------------


def loads_for(args: argparse.Namespace) -> list[Load]:
    return [
        Load("short c=1", False, 1, seconds=args.short_seconds),
        Load("short c=16", False, 16, seconds=args.short_seconds),
        Load("short c=64", False, 64, seconds=args.short_seconds),
        Load("streams 64", True, 64, rounds=args.stream_rounds),
        Load("streams 3x", True, 3 * args.max_num_seqs, rounds=args.queue_rounds),
    ]


def expected_seconds(load: Load, args: argparse.Namespace) -> float:
    if not load.stream:
        return load.seconds + 0.5
    waves = -(-load.workers // args.max_num_seqs) * load.rounds
    return min(LOAD_CAP_SECONDS, waves * STREAM_TOKENS * args.decode_seconds * 1.3 + 0.5)


def header(args: argparse.Namespace, litellm: str | None, why_not: str | None) -> None:
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True)
    nginx = subprocess.run([NGINX, "-v"], capture_output=True, text=True).stderr.strip()
    print(f"front_overhead: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, commit {commit.stdout.strip()}"
          f"{' (uncommitted changes)' if dirty.stdout.strip() else ''}, {os.cpu_count()} cores, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
    print(
        f"engine: the simulator, --max-num-seqs {args.max_num_seqs}, decode {args.decode_seconds} s/token "
        f"({1 / args.decode_seconds:.0f} tokens/s per stream); client: httpx {httpx.__version__} asyncio, "
        f"pool = concurrency; {nginx}; "
        + (
            f"LiteLLM {litellm_version(litellm)} ({litellm}, 1 worker)"
            if litellm
            else f"LiteLLM skipped: {why_not}"
        )
    )
    print(
        f"loads: short {args.short_seconds} s each; streams of {STREAM_TOKENS} tokens, "
        f"{args.stream_rounds} per worker (64 workers), {args.queue_rounds} per worker "
        f"(3 x {args.max_num_seqs} workers); {args.passes} pass{'es' if args.passes != 1 else ''} nginx -> meter -> litellm; "
        f"each load cut at {LOAD_CAP_SECONDS:.0f} s; budget {args.budget:.0f} s"
    )


@contextlib.contextmanager
def routes_lister(front: MeteredFront, engine: str) -> Iterator[None]:
    """What a Kubernetes front pod's ``routes`` lister does (components/host/k8s_targets.py
    ``--routes``): the routes file, naming the engine as the one pod, rewritten every 2 s."""
    stop = threading.Event()

    def keep() -> None:
        while not stop.is_set():
            front.set_pods({"pod-1": engine})
            stop.wait(2.0)

    front.set_pods({"pod-1": engine})
    worker = threading.Thread(target=keep, daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join(timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short loads, within 2 minutes")
    parser.add_argument("--litellm", default=DEFAULT_LITELLM, help="LiteLLM's CLI (env LITELLM)")
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--decode-seconds", type=float, default=0.02)
    parser.add_argument("--short-seconds", type=float)
    parser.add_argument("--stream-rounds", type=int)
    parser.add_argument("--queue-rounds", type=int)
    parser.add_argument("--passes", type=int, help="a -> b -> c, that many times (2; --quick 1)")
    parser.add_argument("--budget", type=float, help="seconds for the whole run (600; --quick 120)")
    parser.add_argument(
        "--kubernetes",
        action="store_true",
        help="the meter as on a Kubernetes front: it routes each request to its pod itself, through the "
        "glm_pods balancer (meter_pods.lua; the routes file names the engine as the one pod)",
    )
    args = parser.parse_args()
    quick = args.quick
    args.short_seconds = args.short_seconds or (1.5 if quick else 10.0)
    args.stream_rounds = args.stream_rounds or (1 if quick else 3)
    args.queue_rounds = args.queue_rounds or (1 if quick else 2)
    args.budget = args.budget or (120.0 if quick else 600.0)
    args.passes = args.passes or (1 if quick else 2)
    run_started = time.monotonic()

    litellm, why_not = args.litellm, None
    if not (litellm and Path(litellm).is_file() and os.access(litellm, os.X_OK)):
        why_not = (
            f"{litellm!r} is not an executable (python3 -m venv /work/litellm-venv && "
            "/work/litellm-venv/bin/pip install 'litellm[proxy]', then --litellm or LITELLM)"
        )
        litellm = None
    header(args, litellm, why_not)
    config = build_stack_config({"hardware": "local", "front": {"rateLimit": NO_LIMITS}})
    loads = loads_for(args)
    results: dict[tuple[str, str], list[Sample]] = {}
    skipped: list[str] = []
    with contextlib.ExitStack() as stack:
        engine, engine_pid = stack.enter_context(simulator(args.max_num_seqs, args.decode_seconds))
        expected = reference_stream(engine)
        fronts: list[Front] = []
        for name, meter in (("nginx", False), ("meter", True)):
            routed = meter and args.kubernetes
            front = stack.enter_context(
                metered_front(
                    config, KEYS, meter=meter, max_num_seqs=args.max_num_seqs, upstream=engine.split("//")[1],
                    service=1 if routed else None,
                )
            )  # fmt: skip
            if routed:
                stack.enter_context(routes_lister(front, engine.split("//")[1]))
            fronts.append(
                Front(
                    name,
                    front.base,
                    KEYS["bench"],
                    nginx_front_processes(
                        # The meter is being rewritten (into nginx): read what the front still tells.
                        getattr(front, "directory", None),
                        getattr(front, "meter_port", None),
                    ),
                )
            )
        if litellm:
            fronts.append(stack.enter_context(litellm_proxy(litellm, engine)))
        for front in fronts:
            warm = warm_up(front, expected)
            if warm.wrong or warm.errors or warm.cut:
                print(
                    f"warm-up through {front.name}: {warm.ok} ok, {warm.wrong} wrong, {warm.errors} errors {warm.notes[:2]}"
                )
        print(f"started and warmed up in {time.monotonic() - run_started:.0f} s")
        for load in loads:
            for n in range(args.passes):
                for front in fronts:
                    left = args.budget - (time.monotonic() - run_started)
                    if expected_seconds(load, args) + 2 > left:
                        skipped.append(f"{load.name} pass {n + 1} {front.name}")
                        continue
                    why = wait_idle(engine)
                    with cpu_meter(front, engine_pid) as cpu:
                        measured = asyncio.run(_drive(front, load, expected))
                    measured.cpu = cpu
                    if why:
                        measured.notes.append(f"before: {why}")
                    results.setdefault((load.name, front.name), []).append(measured)
                    print(
                        f"  {load.name:11} pass {n + 1} {front.name:8} ok {measured.ok:5} wrong {measured.wrong} "
                        f"errors {measured.errors} cut {measured.cut} in {measured.wall:.1f} s",
                        flush=True,
                    )
    passes = max((len(v) for v in results.values()), default=0)
    report(loads, results, passes)
    if skipped:
        print(f"\nSkipped to stay within the {args.budget:.0f} s budget: {', '.join(skipped)}")
    print(
        f"\nwhole run {time.monotonic() - run_started:.0f} s; load average now "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
