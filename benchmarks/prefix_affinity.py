"""An agent-like workload over three replicas, round-robin against prefix affinity, side by side in
one run (issue 50; docs/scaling.md "Prefix affinity").

The front as a stack runs it on loopback: the real ``nginx`` with the rendered config and the usage
meter, the rotation's own script (templates/rotation.sh) deciding which replicas are in, and three
vLLM-protocol simulators as the replicas, each with vLLM's prefix cache (block hashes, LRU eviction
within its KV pool) and a time to first token from the prompt's uncached tokens at the prefill rate.

The workload: ``--conversations`` agents at once, each ``--turns`` turns. Every turn resends the
whole history (a shared system prompt with the tools' descriptions, the task, then each turn's
answer and a tool's output of ``--tool-output-tokens``), so the last turns carry about 30K tokens;
every ``--tool-every`` turns the history holds a tool call and its result in OpenAI's shape. A
"token" of these flags is half a word of the text written, and the simulator counts about 1.4
tokens a word: 5,400 writes ~3,800 prompt tokens (the report prints the largest prompt counted).
Between turns an agent "runs its tool" for a seeded ``--tool-seconds`` (8-16 s: tests, a build);
round-robin's replicas are at their capacity already there (its run takes as long with 0.5-1 s:
docs/scaling.md's sweep), prefix affinity's are not. Every request streams.

``--document-tokens``: a variant common for agents, the conversation's bulk read early: its second
turn reads a file of that many tokens (a tool call and its result), later turns bring the smaller
``--tool-output-tokens``.

Runs, each on a fresh front and fresh replicas (empty caches):
- ``ideal``: one replica that sees every request and whose cache holds everything: the prefix
  hits no routing can beat (its times mean nothing: it prefills fast);
- ``round-robin`` and ``prefix-affinity`` over three replicas;
- ``affinity + ejection``: prefix affinity, one replica ejected (rotation.sh ``eject``) once a third
  of the requests are answered and readmitted (``readmit``) at two thirds: what that costs.

``--sweep 8-16 2-4 0.5-1``: the same workload at several loads (the tools' seconds between turns),
round-robin and prefix affinity at each (no ejection), then a table of them all. ``--floor-bound``
adds prefix affinity under a bound rounded down (at least the mean rounded up) beside the default
rounded up (docs/scaling.md "Measured": the rule kept).

Printed per run: TTFT p50/p99 (the client's, first content byte), the turn's p50/p99 (to the last
byte: what the agent waits for; a replica's prefills stall its decoding), the prefix-cache hit rate (the
replicas' own ``vllm:prefix_cache_hits_total`` / ``queries_total``) and its ratio to the ideal's,
prompt and completion tokens/s, and each replica's share of the requests and of the time-averaged
requests running (its own ``vllm:num_requests_running``, sampled every 0.2 s), as a multiple of the mean.

    .venv/bin/python benchmarks/prefix_affinity.py [--conversations 24] [--turns 8]
    .venv/bin/python benchmarks/prefix_affinity.py --sweep 8-16 2-4 0.5-1 [--floor-bound]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.config import build_stack_config
from components.render import nginx_meter
from tests.front_rig import SERVED
from tests.metered_front import MeteredFront, metered_front

KEY = {"agents": "sk-agents-1403f1510d19d5295321"}
WORDS = [
    "the",
    "parser",
    "reads",
    "each",
    "file",
    "then",
    "the",
    "test",
    "runner",
    "reports",
    "which",
    "case",
    "failed",
    "and",
    "why",
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ')} in the repository's working tree. "
            + " ".join(WORDS) * 8,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
    for name in ("read_file", "run_tests", "search_code", "apply_patch")
]
SYSTEM = "You are a coding agent working in a repository. " + " ".join(WORDS) * 60


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


@dataclass
class Tally:
    ttft: list[float] = field(default_factory=list)
    turn: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    largest_prompt: int = 0
    failed: list[str] = field(default_factory=list)
    answered: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def turn_body(
    conversation: int, history: list[dict], rng: random.Random, turn: int, args: argparse.Namespace
) -> dict:
    """The next request of a conversation: its history plus this turn's new message."""
    if turn == 0:
        history += [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": f"Task {conversation}: the test suite fails on {text(rng, 12)}. Fix it.",
            },
        ]
    elif turn % args.tool_every == 0 or (turn == 1 and args.document_tokens):
        call_id = f"call_{conversation}_{turn}"
        tool, path, tokens = "run_tests", f"tests/t{turn}.py", args.tool_output_tokens
        if turn == 1 and args.document_tokens:  # the agent reads the file its task is about
            tool, path, tokens = "read_file", f"src/module{conversation}.py", args.document_tokens
        history += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": tool,
                            "arguments": json.dumps({"path": path}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": text(rng, tokens // 2)},
        ]
    else:
        history.append(
            {"role": "user", "content": f"Output of step {turn}: " + text(rng, args.tool_output_tokens // 2)}
        )
    return {
        "model": SERVED,
        "messages": history,
        "tools": TOOLS,
        "max_tokens": args.answer_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def converse(
    base: str, conversation: int, args: argparse.Namespace, tally: Tally, progress: threading.Semaphore
) -> None:
    rng = random.Random(conversation)
    history: list[dict] = []
    headers = {"Authorization": f"Bearer {KEY['agents']}"}
    with httpx.Client(base_url=base, headers=headers, timeout=600) as http:
        for turn in range(args.turns):
            body = turn_body(conversation, history, rng, turn, args)
            started, first, answer, usage = time.monotonic(), None, [], None
            try:
                with http.stream("POST", "/v1/chat/completions", json=body) as response:
                    if response.status_code != 200:
                        raise RuntimeError(f"HTTP {response.status_code}: {response.read()[:200]!r}")
                    for line in response.iter_lines():
                        if not line.startswith("data: {"):
                            continue
                        event = json.loads(line[6:])
                        if event.get("usage"):
                            usage = event["usage"]
                        for choice in event.get("choices") or []:
                            piece = (choice.get("delta") or {}).get("content")
                            if piece:
                                first = first if first is not None else time.monotonic() - started
                                answer.append(piece)
            except (httpx.HTTPError, RuntimeError) as e:
                with tally.lock:
                    tally.failed.append(f"conversation {conversation} turn {turn}: {e}")
                return
            history.append({"role": "assistant", "content": "".join(answer)})
            with tally.lock:
                tally.answered += 1
                if first is not None:
                    tally.ttft.append(first)
                tally.turn.append(time.monotonic() - started)
                if usage:
                    tally.prompt_tokens += usage["prompt_tokens"]
                    tally.largest_prompt = max(tally.largest_prompt, usage["prompt_tokens"])
                    tally.completion_tokens += usage["completion_tokens"]
            progress.release()
            time.sleep(rng.uniform(*args.tool_seconds))  # the agent runs its tool


def metric(engine: str, name: str) -> float:
    body = httpx.get(f"{engine}/metrics", timeout=5).text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", body, re.M))


def sample_running(front: MeteredFront, stop: threading.Event, samples: list[list[float]]) -> None:
    while not stop.wait(0.2):
        samples.append([metric(e, "vllm:num_requests_running") for e in front.engines])


def answered(progress: threading.Semaphore, count: int, agents: list[threading.Thread]) -> None:
    """Wait until ``count`` more turns are answered, or every agent has stopped (one failed)."""
    while count > 0 and any(agent.is_alive() for agent in agents):
        if progress.acquire(timeout=1):
            count -= 1


CEIL_BOUND = "local bound = math.ceil(factor * (total + 1) / #names)"
FLOOR_BOUND = (
    "local bound = math.max(math.floor(factor * (total + 1) / #names), math.ceil((total + 1) / #names))"
)


@contextlib.contextmanager
def floor_bound() -> Iterator[None]:
    """The front rendered with meter_route.lua's bound rounded down (never under the mean rounded
    up, which some replica is always under): the alternative measured against the default."""
    source = (nginx_meter.METER_DIR / "meter_route.lua").read_text()
    assert source.count(CEIL_BOUND) == 1, "meter_route.lua's bound changed: update CEIL_BOUND"
    with tempfile.TemporaryDirectory() as directory:
        for module in nginx_meter.METER_DIR.glob("*.lua"):
            (Path(directory) / module.name).write_text(module.read_text())
        (Path(directory) / "meter_route.lua").write_text(source.replace(CEIL_BOUND, FLOOR_BOUND))
        with mock.patch.object(nginx_meter, "METER_DIR", Path(directory)):
            yield


def run(
    policy: str, replicas: int, args: argparse.Namespace, eject: bool = False, floor: bool = False
) -> dict:
    front = {
        "routing": {"policy": policy, "loadFactor": args.load_factor},
        "rateLimit": {"enabled": False},
    }  # agents: a burst of turns at once
    config = build_stack_config({"hardware": "local", "front": front})
    env = {
        "VLLM_SIM_PROFILE": args.profile,
        "VLLM_SIM_DECODE_TOKEN_SECONDS": str(args.decode_seconds),
        "VLLM_SIM_HOL_BLOCKING": "1",
        **({"VLLM_SIM_KV_POOL_TOKENS": str(args.kv_pool_tokens)} if args.kv_pool_tokens else {}),
    }
    if replicas == 1:  # the ideal: only its hits count, so it prefills fast, holds everything, never waits
        env |= {"VLLM_SIM_PREFILL_TOKENS_PER_S": "200000", "VLLM_SIM_KV_POOL_TOKENS": str(10_000_000)}
        args = argparse.Namespace(**{**vars(args), "tool_seconds": (0.0, 0.0)})
    with floor_bound() if floor else contextlib.nullcontext(), metered_front(
        config, KEY, replicas=replicas, rotation=True, max_num_seqs=args.max_num_seqs, sim_env=env,
        max_model_len=args.max_model_len, sim_args=("--enable-auto-tool-choice", "--tool-call-parser", "glm47"),
    ) as front:  # fmt: skip
        tally, progress, stop, samples = Tally(), threading.Semaphore(0), threading.Event(), []
        sampler = threading.Thread(target=sample_running, args=(front, stop, samples), daemon=True)
        sampler.start()
        agents = [
            threading.Thread(target=converse, args=(front.base, c, args, tally, progress))
            for c in range(args.conversations)
        ]
        started = time.monotonic()
        for agent in agents:
            agent.start()
        ejection = {}
        if eject:
            third = args.conversations * args.turns // 3
            answered(progress, third, agents)
            ejection["ejected_at"] = time.monotonic() - started
            front.rotate("eject", "replica2", str(int(time.time()) + 1), "benchmark ejection")
            answered(progress, third, agents)
            ejection["readmitted_at"] = time.monotonic() - started
            front.rotate("readmit", "replica2")
        for agent in agents:
            agent.join()
        seconds = time.monotonic() - started
        stop.set()
        sampler.join()
        hits = sum(metric(e, "vllm:prefix_cache_hits_total") for e in front.engines)
        queries = sum(metric(e, "vllm:prefix_cache_queries_total") for e in front.engines)
        served = [metric(e, "vllm:request_success_total") for e in front.engines]
    running = (
        [statistics.fmean(s[i] for s in samples) for i in range(replicas)] if samples else [0.0] * replicas
    )
    return {
        "tally": tally, "seconds": seconds, "hits": hits, "queries": queries, "served": served,
        "running": running, **ejection,
    }  # fmt: skip


def quantile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else float("nan")


def shares(values: list[float]) -> str:
    mean = statistics.fmean(values) if values else 0.0
    return " / ".join(f"{v / mean:.2f}" if mean else "-" for v in values)


def report(name: str, result: dict, ideal_hits: float | None) -> dict:
    t: Tally = result["tally"]
    rate = result["hits"] / result["queries"] if result["queries"] else 0.0
    against = f" = {result['hits'] / ideal_hits:.0%} of the ideal's cached tokens" if ideal_hits else ""
    print(f"\n{name}")
    print(f"  TTFT p50 {quantile(t.ttft, 50):.3f} s  p99 {quantile(t.ttft, 99):.3f} s  (n={len(t.ttft)})")
    print(f"  turn p50 {quantile(t.turn, 50):.3f} s  p99 {quantile(t.turn, 99):.3f} s")
    print(
        f"  prefix cache: {result['hits']:.0f} of {result['queries']:.0f} prompt tokens cached ({rate:.1%}){against}"
    )
    print(
        f"  {result['seconds']:.1f} s: {t.prompt_tokens / result['seconds']:.0f} prompt tokens/s, "
        f"{t.completion_tokens / result['seconds']:.0f} completion tokens/s; {t.answered} answered, {len(t.failed)} failed; "
        f"the largest prompt {t.largest_prompt} tokens"
    )
    print(
        f"  requests per replica {' / '.join(f'{v:.0f}' for v in result['served'])} (x mean: {shares(result['served'])})"
    )
    print(f"  requests running, time-averaged, x mean: {shares(result['running'])}")
    if "ejected_at" in result:
        print(
            f"  replica2 ejected at {result['ejected_at']:.1f} s, readmitted at {result['readmitted_at']:.1f} s"
        )
    for failure in t.failed[:5]:
        print(f"  failed: {failure}")
    return {
        "p50": quantile(t.ttft, 50), "p99": quantile(t.ttft, 99),
        "turn50": quantile(t.turn, 50), "turn99": quantile(t.turn, 99),
        "ideal": result["hits"] / ideal_hits if ideal_hits else 1.0, "seconds": result["seconds"],
        "tokens_s": t.prompt_tokens / result["seconds"], "served": shares(result["served"]),
        "running": shares(result["running"]), "failed": len(t.failed),
    }  # fmt: skip


def summary(rows: list[tuple[str, str, dict]]) -> None:
    """Every run of a sweep in one table, and each load's round-robin p50 over prefix affinity's."""
    print("\n| tools' seconds | run | TTFT p50 / p99 | turn p50 / p99 | hits, of the ideal | run time (prompt tokens/s) "
          "| requests per replica (x mean) | requests running (x mean) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    p50s: dict[str, dict[str, float]] = {}
    for load, name, row in rows:
        p50s.setdefault(load, {})[name] = row["p50"]
        print(f"| {load} | {name} | {row['p50']:.3f} s / {row['p99']:.3f} s | "
              f"{row['turn50']:.3f} s / {row['turn99']:.3f} s | {row['ideal']:.0%} | "
              f"{row['seconds']:.1f} s ({row['tokens_s']:,.0f}) | {row['served']} | {row['running']} |")  # fmt: skip
    for load, p50 in p50s.items():
        ratios = [
            f"{name} {p50['round-robin'] / value:.2f}x"
            for name, value in p50.items()
            if name != "round-robin"
        ]
        if "round-robin" in p50 and ratios:
            print(f"  {load} s: round-robin's TTFT p50 over {', '.join(ratios)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--tool-every", type=int, default=3)
    parser.add_argument("--tool-output-tokens", type=int, default=5400)
    parser.add_argument("--answer-tokens", type=int, default=60)
    parser.add_argument("--tool-seconds", type=float, nargs=2, default=(8.0, 16.0), metavar=("MIN", "MAX"))
    parser.add_argument(
        "--profile", default="a800", help="VLLM_SIM_PROFILE: the seeds' prefill rate and KV pool"
    )
    parser.add_argument("--decode-seconds", type=float, default=0.01)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--max-model-len", type=int, default=40960)
    parser.add_argument("--kv-pool-tokens", type=int, default=0, help="instead of the profile's KV pool")
    parser.add_argument("--load-factor", type=float, default=1.25, help="glm:front.routing.loadFactor")
    parser.add_argument("--only", choices=["round-robin", "prefix-affinity", "ejection"])
    parser.add_argument(
        "--document-tokens", type=int, default=0, help="the second turn reads a file this long"
    )
    parser.add_argument(
        "--sweep", nargs="+", metavar="MIN-MAX", help="tools' seconds of each load: no ejection"
    )
    parser.add_argument(
        "--floor-bound", action="store_true", help="also prefix affinity, its bound rounded down"
    )
    args = parser.parse_args()
    loads = [tuple(float(s) for s in load.split("-")) for load in args.sweep or []] or [
        tuple(args.tool_seconds)
    ]
    document = (
        f"a {args.document_tokens}-token file read at the second turn, " if args.document_tokens else ""
    )
    print(
        f"{args.conversations} conversations x {args.turns} turns, {document}a tool call every {args.tool_every} turns, "
        f"{args.tool_output_tokens}-token tool outputs, {args.answer_tokens}-token answers; each replica: the "
        f"simulator's {args.profile} profile (its prefill rate, one prefill at a time; a KV pool of "
        f"{args.kv_pool_tokens or 'the profile'} tokens), {1 / args.decode_seconds:.0f} tokens/s per sequence, "
        f"--max-num-seqs {args.max_num_seqs}; loadFactor {args.load_factor:g}; tools' seconds "
        f"{', '.join(f'{lo:g}-{hi:g}' for lo, hi in loads)}; load average {os.getloadavg()[0]:.1f}"
    )
    ideal = run("round-robin", 1, args)
    report("ideal (one replica that sees every request and holds everything: its hits only)", ideal, None)
    runs = [("round-robin", "round-robin", False, False), ("prefix-affinity", "prefix-affinity", False, False),
            ("prefix-affinity, floor bound", "prefix-affinity", False, True),
            ("ejection", "prefix-affinity", True, False)]  # fmt: skip
    rows = []
    for low, high in loads:
        at = argparse.Namespace(**{**vars(args), "tool_seconds": (low, high)})
        for name, policy, eject, floor in runs:
            if (
                (args.only and not name.startswith(args.only))
                or (floor and not args.floor_bound)
                or (eject and args.sweep)
            ):
                continue
            label = "prefix affinity, replica2 ejected and readmitted" if eject else f"{name}, 3 replicas"
            result = run(policy, 3, at, eject, floor)
            rows.append(
                (
                    f"{low:g}-{high:g}",
                    name,
                    report(f"{label}, tools {low:g}-{high:g} s", result, ideal["hits"]),
                )
            )
    summary(rows)


if __name__ == "__main__":
    main()
