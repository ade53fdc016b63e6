"""A key at its tokens-per-minute budget through one front over 2 and 3 replicas (issue 48): how
close to its limit it is served, what its 429s said, and another key's time to first token beside
it. One front sees every replica's tokens, so the limit is the key's whatever the replicas (the
peers' "limit x replicas": BerriAI/litellm#10555).

The front as a stack runs it (real nginx with the meter inside, ``--replicas`` simulators, one
address each; tests/metered_front.py); key ``alice`` has ``tokensPerMinute`` ``--tpm``; 8 workers
send her chats (``max_tokens`` 64) back to back for ``--minutes`` whole UTC minutes, each worker
waiting a 429's ``Retry-After``; key ``bob``, with no budget, streams one short answer a second.
Printed per replica count: per minute the tokens served against the limit (the error in %), her
429s and their Retry-After values, and bob's TTFT p50/p99 during the run against alone.

    .venv/bin/python benchmarks/budgets.py [--minutes 3] [--tpm 6000] [--replicas 2 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.config import build_stack_config
from tests.metered_front import MeteredFront, metered_front

KEYS = {"alice": "sk-alice-1403f1510d19d5295321", "bob": "sk-bob-0d08fac0336e7974aa11"}
SERVED = "glm-5.3-flash"


def bob(front: MeteredFront, stop: float, ttfts: list[float]) -> None:
    body = {"model": SERVED, "messages": [{"role": "user", "content": "Write a poem."}], "max_tokens": 16,
            "stream": True}  # fmt: skip
    with httpx.Client(timeout=60) as client:
        while time.time() < stop:
            started = time.monotonic()
            headers = {"Authorization": f"Bearer {KEYS['bob']}"}
            with client.stream(
                "POST", f"{front.base}/v1/chat/completions", json=body, headers=headers
            ) as answer:
                for line in answer.iter_lines():
                    if line.startswith("data:"):
                        ttfts.append(time.monotonic() - started)
                        break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))


def alice(base: str, stop: float, results: multiprocessing.Queue) -> None:
    """One of alice's workers (a process of its own: in bob's, it would hold his reader back)."""
    body = {"model": SERVED, "messages": [{"role": "user", "content": "What is 13*17?"}], "max_tokens": 64}
    headers = {"Authorization": f"Bearer {KEYS['alice']}"}
    with httpx.Client(timeout=60) as client:
        while time.time() < stop:
            answer = client.post(f"{base}/v1/chat/completions", json=body, headers=headers)
            if answer.status_code == 429:
                wait = int(answer.headers.get("retry-after", "1"))
                results.put(("429", wait))
                time.sleep(min(wait, max(0.0, stop - time.time())))
            elif answer.status_code == 200:
                results.put((int(time.time() // 60), answer.json()["usage"]["total_tokens"]))


def run(replicas: int, minutes: int, tpm: int) -> None:
    config = build_stack_config(
        {
            "hardware": "local",
            "front": {
                "rateLimit": {"enabled": False},
                "usageMeter": {"limits": {"alice": {"tokensPerMinute": tpm}}},
            },
        }
    )
    sim = {"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.01"}
    with metered_front(config, KEYS, max_num_seqs=16, sim_env=sim, replicas=replicas) as front:
        alone: list[float] = []
        bob(front, time.time() + 10, alone)
        start = (int(time.time() // 60) + 1) * 60  # a whole minute: the budget's windows are UTC minutes
        time.sleep(max(0.0, start - time.time()))
        stop = start + 60 * minutes
        served: dict[int, int] = defaultdict(int)
        refusals: list[int] = []
        beside: list[float] = []
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        workers = [context.Process(target=alice, args=(front.base, stop, results)) for _ in range(8)]
        for worker in workers:
            worker.start()
        bob(front, stop, beside)
        for worker in workers:
            worker.join()
        while not results.empty():
            what, value = results.get()
            if what == "429":
                refusals.append(value)
            else:
                served[what] += value
    print(f"{replicas} replicas, alice's tokensPerMinute {tpm}:")
    for minute in sorted(served):
        if start // 60 <= minute < stop // 60:
            error = (served[minute] - tpm) / tpm * 100
            print(f"  minute {minute % 60:02d}: {served[minute]:6d} tokens served ({error:+.1f} %)")
    waits = sorted(set(refusals))
    print(f"  429s: {len(refusals)}, Retry-After values (s): {waits[:5]}{' ...' if len(waits) > 5 else ''}")

    def p(values: list[float], share: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000

    print(
        f"  bob's TTFT alone p50/p99 {p(alone, 0.5):.1f}/{p(alone, 0.99):.1f} ms, beside alice "
        f"{p(beside, 0.5):.1f}/{p(beside, 0.99):.1f} ms ({statistics.median(beside) / statistics.median(alone):.2f}x p50)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=int, default=3)
    parser.add_argument("--tpm", type=int, default=6000)
    parser.add_argument("--replicas", type=int, nargs="+", default=[2, 3])
    args = parser.parse_args()
    for replicas in args.replicas:
        run(replicas, args.minutes, args.tpm)


if __name__ == "__main__":
    main()
