#!/usr/bin/env python3
"""Prefix affinity against round-robin before two real vLLM 0.25.0 engines on one GPU (issue 50;
docs/scaling.md "Prefix affinity").

    # here, in the project's virtualenv: the front's two configs (the meter on, two replicas)
    PYTHONPATH=. .venv/bin/python scripts/h200/prefix_affinity.py render .h200/part2
    # wherever the engines run (here against the simulator, there against vLLM 0.25.0):
    python3 scripts/h200/prefix_affinity.py run --engine vllm|sim --spec .h200/serve.json \\
        --confs .h200/part2 --nginx-root .h200/part2/nginx "$OUT"

``run`` starts two engines with the argv ``render_argv.py`` rendered (``.h200/serve.json``), on ports
8000 and 8001 of the one card (each with the argv's ``--gpu-memory-utilization``), with
``--enable-prompt-tokens-details`` (``glm:serving.enablePromptTokensDetails``) and
``--max-model-len 4096`` (the tiny model's limit); then, for each policy (``round-robin``,
``prefix-affinity``), empties both engines' prefix caches (``POST /reset_prefix_cache``, a dev route:
``VLLM_SERVER_DEV_MODE=1`` on the loopback only), starts the front (the real nginx with the meter,
``front-<policy>.conf`` as ``render`` wrote it) and runs the agent workload of
benchmarks/prefix_affinity.py scaled down: ``CONVERSATIONS`` at once, ``TURNS`` turns each,
histories growing to ~3,300 bytes (the tiny model's tokenizer is nearly a byte per token). Recorded per request: the client's time to first token and
``usage.prompt_tokens_details.cached_tokens`` from the engine; per engine: its own
``vllm:prefix_cache_hits_total`` / ``queries_total`` and ``vllm:request_success_total`` deltas.
``OUT``: ``prefix-affinity.json`` (every request), ``prefix-affinity.md`` (the table), ``serve-*.log``,
``front-*.log``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from meter_exactness import engine, front, wait_ready  # noqa: E402

from components.gate.metrics import parse_samples, total  # noqa: E402

KEY = {"agents": "sk-agents-1403f1510d19d5295321"}
POLICIES = ("round-robin", "prefix-affinity")
PORTS = (8000, 8001)
PLACES = {
    "front_port": 18080,
    "status_port": 19146,
    "engine_port": None,
    "runtime": "/tmp/h200-affinity-front",
}
CONVERSATIONS, TURNS, TOOL_WORDS, ANSWER_TOKENS = 12, 6, 80, 16
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
SYSTEM = "You are a coding agent working in a repository. " + " ".join(WORDS) * 5


def render(folder: Path) -> None:
    """``front-<policy>.conf``: the front as the stack renders it for the a800 profile with two
    replicas (the engines' ports), the meter on; ``places`` beside them."""
    from components.config import build_stack_config
    from components.render.nginx_conf import render_nginx_conf
    from components.render.nginx_meter import MeterRoute

    runtime = PLACES["runtime"]
    for policy in POLICIES:
        front_config = {
            "allowPlainHttp": True,
            "routing": {"policy": policy},
            "rateLimit": {"enabled": False},
        }
        config = build_stack_config({"hardware": "local", "front": front_config})
        route = MeterRoute(32, 2, f"{runtime}/usage/counters.json", max_model_len=4096)
        conf = render_nginx_conf(
            config.front, [f"127.0.0.1:{port}" for port in PORTS], KEY, listen=f"127.0.0.1:{PLACES['front_port']}",
            runtime_dir=runtime, meter=route, status_listen=f"127.0.0.1:{PLACES['status_port']}",
        )  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"front-{policy}.conf").write_text(conf)
    (folder / "front-affinity.json").write_text(json.dumps(PLACES, indent=1) + "\n")


def spec_for(spec: dict[str, Any], port: int) -> dict[str, Any]:
    """The rendered argv on ``port``, with the prompt's cache details and the tiny model's longest context."""
    argv = [a for a in spec["argv"] if not a.startswith(("--port=", "--max-model-len="))]
    argv += [f"--port={port}", "--max-model-len=4096", "--enable-prompt-tokens-details"]
    return {**spec, "argv": argv, "env": {**spec["env"], "VLLM_SERVER_DEV_MODE": "1"}}


def engine_counts(base: str) -> dict[str, float]:
    samples = parse_samples(httpx.get(f"{base}/metrics", timeout=10).text)
    return {
        name: total(samples, f"vllm:{name}") or 0.0
        for name in ("prefix_cache_hits_total", "prefix_cache_queries_total", "request_success_total")
    }


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def converse(
    base: str, model: str, policy: str, conversation: int, rows: list[dict], lock: threading.Lock
) -> None:
    rng = random.Random(conversation)
    messages: list[dict] = [
        {"role": "system", "content": f"Session {policy}. {SYSTEM}"},
        {"role": "user", "content": f"Task {conversation}: the tests fail on {words(rng, 10)}. Fix it."},
    ]
    with httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {KEY['agents']}"}, timeout=120
    ) as http:
        for turn in range(TURNS):
            if turn:
                messages.append(
                    {"role": "user", "content": f"Output of step {turn}: {words(rng, TOOL_WORDS)}"}
                )
            body = {"model": model, "messages": messages, "max_tokens": ANSWER_TOKENS, "stream": True,
                    "stream_options": {"include_usage": True}, "temperature": 0}  # fmt: skip
            started, first, usage, text, status = time.monotonic(), None, None, [], 0
            with http.stream("POST", "/v1/chat/completions", json=body) as response:
                status = response.status_code
                for line in response.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    event = json.loads(line[6:])
                    usage = event.get("usage") or usage
                    for choice in event.get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content")
                        if piece and first is None:
                            first = time.monotonic() - started
                        text.append(piece or "")
            details = (usage or {}).get("prompt_tokens_details") or {}
            with lock:
                rows.append({
                    "conversation": conversation, "turn": turn, "status": status, "ttft": first,
                    "prompt_tokens": (usage or {}).get("prompt_tokens"), "cached_tokens": details.get("cached_tokens"),
                })  # fmt: skip
            messages.append({"role": "assistant", "content": "".join(text)})
            time.sleep(rng.uniform(0.05, 0.2))


def quantile(values: list[float], q: int) -> float | None:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else None


def one_policy(policy: str, args: argparse.Namespace, model: str, out: Path) -> dict[str, Any]:
    bases = [f"http://127.0.0.1:{port}" for port in PORTS]
    for base in bases:  # and the policy's own system prompt: no prefix carries over either way
        with contextlib.suppress(httpx.HTTPError):
            print(
                f"{base}/reset_prefix_cache: {httpx.post(f'{base}/reset_prefix_cache', timeout=30).status_code}"
            )
    places = json.loads((args.confs / "front-affinity.json").read_text())
    before = [engine_counts(base) for base in bases]
    rows: list[dict] = []
    lock = threading.Lock()
    with front(args.confs / f"front-{policy}.conf", places, args.nginx_root, out):
        base = f"http://127.0.0.1:{places['front_port']}"
        started = time.monotonic()
        agents = [
            threading.Thread(target=converse, args=(base, model, policy, c, rows, lock))
            for c in range(CONVERSATIONS)
        ]
        for agent in agents:
            agent.start()
        for agent in agents:
            agent.join()
        seconds = time.monotonic() - started
        meter = httpx.get(f"http://127.0.0.1:{places['status_port']}/metrics/usage", timeout=10).text
    (out / "front.log").rename(out / f"front-{policy}.log")
    after = [engine_counts(base) for base in bases]
    delta = [{k: a[k] - b[k] for k in a} for a, b in zip(after, before, strict=True)]
    ttft = [r["ttft"] for r in rows if r["ttft"] is not None]
    later = [r for r in rows if r["turn"] > 0]
    hits = sum(d["prefix_cache_hits_total"] for d in delta)
    queries = sum(d["prefix_cache_queries_total"] for d in delta)
    return {
        "policy": policy, "seconds": seconds, "rows": sorted(rows, key=lambda r: (r["conversation"], r["turn"])),
        "ttft_p50": quantile(ttft, 50), "ttft_p99": quantile(ttft, 99),
        "ttft_p50_later_turns": quantile([r["ttft"] for r in later if r["ttft"] is not None], 50),
        "failed": sum(1 for r in rows if r["status"] != 200),
        "cached_tokens": sum(r["cached_tokens"] or 0 for r in rows),
        "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in rows),
        "engine_hits": hits, "engine_queries": queries,
        "requests_per_engine": [d["request_success_total"] for d in delta],
        "meter_routing": [line for line in meter.splitlines() if line.startswith(("glm_front_", "glm_key_cached"))],
    }  # fmt: skip


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| policy | TTFT p50 / p99 (s) | p50, turns 2+ | cached_tokens (clients' usage) | engines' prefix hits | requests per engine | failed |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        fmt = lambda v: "n/a" if v is None else f"{v:.4f}"  # noqa: E731
        lines.append(
            f"| {r['policy']} | {fmt(r['ttft_p50'])} / {fmt(r['ttft_p99'])} | {fmt(r['ttft_p50_later_turns'])} | "
            f"{r['cached_tokens']} of {r['prompt_tokens']} ({r['cached_tokens'] / max(r['prompt_tokens'], 1):.1%}) | "
            f"{r['engine_hits']:.0f} of {r['engine_queries']:.0f} | "
            f"{' / '.join(f'{v:.0f}' for v in r['requests_per_engine'])} | {r['failed']} |"
        )
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def engines(kind: str, spec: dict[str, Any], out: Path) -> Iterator[list[float]]:
    """Both engines, one after the other: each profiles the card's free memory as it starts, which
    the other's start would disturb. Yields the seconds each took to answer ``/v1/models``."""
    with contextlib.ExitStack() as stack:
        ready = []
        for port in PORTS:
            folder = out / f"engine-{port}"
            folder.mkdir(parents=True, exist_ok=True)
            proc = stack.enter_context(engine(kind, spec_for(spec, port), folder))
            ready.append(wait_ready(f"http://127.0.0.1:{port}/v1/models", proc, 280, folder / "serve.log"))
            print(f"engine on {port} ready in {ready[-1]:.0f} s", flush=True)
        yield ready


def run(args: argparse.Namespace) -> None:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    spec = json.loads(args.spec.read_text())
    model = next(a.split("=", 1)[1] for a in spec["argv"] if a.startswith("--served-model-name="))
    t0 = time.time()
    with engines(args.engine, spec, out) as ready:
        results = [one_policy(policy, args, model, out) for policy in POLICIES]
    summary = {
        "engine": args.engine,
        "engines_ready_seconds": ready,
        "total_seconds": time.time() - t0,
        "results": results,
    }
    (out / "prefix-affinity.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "prefix-affinity.md").write_text(table(results))
    print(table(results))
    for r in results:
        print(r["policy"], r["meter_routing"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render")
    r.add_argument("folder", type=Path)
    u = sub.add_parser("run")
    u.add_argument("--engine", choices=["vllm", "sim"], required=True)
    u.add_argument("--spec", type=Path, required=True)
    u.add_argument("--confs", type=Path, required=True)
    u.add_argument("--nginx-root", type=Path, required=True)
    u.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "render":
        render(args.folder)
    else:
        run(args)


if __name__ == "__main__":
    main()
