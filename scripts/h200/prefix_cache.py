"""vLLM's prefix cache, as its answers report it, against the simulator's (issue 50).

``run --engine vllm|sim --spec .h200/serve.json OUT``: the engine on ``serve.json``'s argv (the a800
profile's, fitted to one card and the tiny model; ``render_argv.py``) plus
``--enable-prompt-tokens-details`` and ``--num-gpu-blocks-override=160`` (a pool of 160 blocks of
16 tokens, so that eviction shows within a few requests), then one fixed sequence of
``/v1/completions`` requests with token-id prompts, one at a time, each ``max_tokens`` 1: a cold
prompt, its repeat, a conversation's next turns, another conversation, ``cache_salt``, and prompts
enough to evict. Token ids, not text, so the simulator gets exactly the same tokens
(``images/vllm-sim``: an id prompt is one token per id). It writes ``OUT/prefix-cache.json``:
per request its label, prompt tokens and ``usage`` as answered, and the engine's
``vllm:prefix_cache_{queries,hits}_total`` at the end.

``--engine sim``: ``images/vllm-sim/vllm_sim.py`` with the same argv (``--sim`` names the file).
Standard library only: it runs on the GPU host's bare python3 beside vLLM. No run on the GPU host
is recorded yet, so nothing compares the two; the simulator's prefix cache alone is tested in
``tests/sim/test_sim_prefix_cache.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

POOL_BLOCKS = 160
"""The KV pool: ``--num-gpu-blocks-override`` (160 x 16 = 2,560 tokens, above max-model-len 2048)."""
VOCAB = (3, 312)
"""Token ids the tiny Qwen2 config has (vocab 312), special ones left out."""


def sequence(seed: int = 50) -> list[dict[str, Any]]:
    """The requests, in order: label, token ids, and what else the body carries."""
    rng = random.Random(seed)

    def fresh(n: int) -> list[int]:
        return [rng.randrange(*VOCAB) for _ in range(n)]

    a, x, y = fresh(600), fresh(120), fresh(90)
    steps: list[dict[str, Any]] = [
        {"label": "A cold (600)", "ids": a},
        {"label": "A again", "ids": a},
        {"label": "A turn 2 (A + 120)", "ids": a + x},
        {"label": "A turn 3, streamed (A + 120 + 90)", "ids": a + x + y, "stream": True},
        {"label": "A + 40 (a whole number of blocks: 640)", "ids": a + x[:40]},
        {"label": "A with cache_salt", "ids": a, "cache_salt": "tenant-b"},
        {"label": "another conversation (300)", "ids": fresh(300)},
        {"label": "short (15, no full block)", "ids": a[:15]},
        {"label": "short repeat (15)", "ids": a[:15]},
        {"label": "17 tokens, repeat of a prefix", "ids": a[:17]},
    ]
    # Fill the pool: four 600-token prompts of 38 blocks each cannot all stay with A's chain.
    fills = [fresh(600) for _ in range(4)]
    steps += [{"label": f"fill {i + 1} (600)", "ids": ids} for i, ids in enumerate(fills)]
    steps += [
        {"label": "A after the fills", "ids": a},
        {"label": "fill 1 after", "ids": fills[0]},
        {"label": "fill 4 after", "ids": fills[3]},
        {"label": "A turn 3 after", "ids": a + x + y},
    ]
    return steps


def post(base: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{base}/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        raw = answer.read().decode()
    if not body.get("stream"):
        return {"usage": json.loads(raw)["usage"], "raw": raw[-600:]}
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    usages = [e["usage"] for e in events if e.get("usage")]
    return {"usage": usages[-1] if usages else None, "raw": raw[-600:]}


def metrics(base: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
            if line.startswith(name + "{") or line.startswith(name + " "):
                found[name] = found.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def wait_ready(base: str, proc: subprocess.Popen, seconds: float, log: Path) -> float:
    t0 = time.time()
    while time.time() - t0 < seconds:
        if proc.poll() is not None:
            raise SystemExit(f"the engine exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as answer:
                if answer.status == 200:
                    return time.time() - t0
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"not ready in {seconds} s:\n{log.read_text()[-4000:]}")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = json.loads(Path(args.spec).read_text())
    argv = [t for t in spec["argv"] if not t.startswith("--port=")]
    argv += [
        f"--port={args.port}",
        "--enable-prompt-tokens-details",
        f"--num-gpu-blocks-override={POOL_BLOCKS}",
    ]
    env = {**os.environ, **spec["env"]}
    if args.engine == "vllm":
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *argv]
    else:
        cmd = [sys.executable, args.sim, "serve", *argv]
        env.update(VLLM_SIM_DECODE_TOKEN_SECONDS="0", VLLM_SIM_QUIET="1")
    base = f"http://127.0.0.1:{args.port}"
    log = out / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    summary: dict[str, Any] = {"engine": args.engine, "argv": argv, "pool_blocks": POOL_BLOCKS}
    try:
        summary["ready_after_s"] = round(wait_ready(base, proc, args.ready_seconds, log), 1)
        with urllib.request.urlopen(f"{base}/version", timeout=5) as answer:
            summary["version"] = json.loads(answer.read())["version"]
        rows = []
        for step in sequence():
            body: dict[str, Any] = {"model": spec["served_name"], "prompt": step["ids"], "max_tokens": 1,
                                    "temperature": 0}  # fmt: skip
            if step.get("stream"):
                body.update(stream=True, stream_options={"include_usage": True})
            if step.get("cache_salt"):
                body["cache_salt"] = step["cache_salt"]
            answer = post(base, body)
            usage = answer["usage"] or {}
            details = usage.get("prompt_tokens_details") or {}
            row = {"label": step["label"], "prompt_tokens": len(step["ids"]), "usage": usage,
                   "cached_tokens": details.get("cached_tokens", 0)}  # fmt: skip
            rows.append(row)
            print(
                f"{row['label']:45} prompt {row['prompt_tokens']:5} cached {row['cached_tokens']:5}",
                flush=True,
            )
        summary["rows"] = rows
        summary["metrics"] = metrics(base)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
    (out / "prefix-cache.json").write_text(json.dumps(summary, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    running = sub.add_parser("run")
    running.add_argument("--engine", choices=("vllm", "sim"), required=True)
    running.add_argument("--spec", required=True, help="render_argv.py's JSON (.h200/serve.json)")
    running.add_argument(
        "--sim", default=str(Path(__file__).resolve().parents[2] / "images/vllm-sim/vllm_sim.py")
    )
    running.add_argument("--ready-seconds", type=float, default=300)
    running.add_argument("--port", type=int, default=8321)
    running.add_argument("out")
    args = parser.parse_args()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
