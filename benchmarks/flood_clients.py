"""Key A's flood and key B's steady stream (benchmarks/fair_share.py's clients), each a process of its
own that prints its tally as one JSON line. The Kubernetes test runs them inside the one-node
cluster's network namespace (``nsenter``), against the front's NodePort on the node's address: then
neither the test's own threads (40 flooding streams hold the GIL that B's clock needs) nor the
host's loopback forward (scripts/k8s/forward.py, one Python process carrying every byte of both
keys) sits in B's path, and B's time to first token is the front's and the engine's.

    python -m benchmarks.flood_clients flood BASE_URL KEY WORKERS TOKENS SECONDS
    python -m benchmarks.flood_clients steady BASE_URL KEY SECONDS MEASURE_AFTER_SECONDS INTERVAL TOKENS
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import httpx
import openai

from benchmarks.fair_share import B_PROMPT_TOKENS, Tally, flood, steady


def run_flood(base: str, key: str, workers: int, tokens: int, seconds: float) -> Tally:
    """``workers`` long streams of ``tokens`` back to back for ``seconds``."""
    tally, stop = Tally(), threading.Event()
    http = httpx.Client(base_url=base.removesuffix("/v1"), timeout=600, trust_env=False,
                        headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    threads = [
        threading.Thread(target=flood, args=(http, tokens, stop, tally), daemon=True) for _ in range(workers)
    ]
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    http.close()
    return tally


def run_steady(
    base: str, key: str, seconds: float, measure_after: float, interval: float, tokens: int
) -> Tally:
    """A stream of ``tokens`` every ``interval`` s for ``seconds``; time to first token from
    ``measure_after`` on."""
    tally = Tally()
    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=120)
    now = time.monotonic()
    steady(
        client,
        argparse.Namespace(b_interval=interval, b_tokens=tokens, b_prompt_tokens=B_PROMPT_TOKENS),
        now + seconds,
        tally,
        now + measure_after,
    )
    return tally


def main(argv: list[str]) -> None:
    what, base, key, *numbers = argv
    if what == "flood":
        tally = run_flood(base, key, int(numbers[0]), int(numbers[1]), float(numbers[2]))
    else:
        tally = run_steady(
            base, key, float(numbers[0]), float(numbers[1]), float(numbers[2]), int(numbers[3])
        )
    print(json.dumps({
        "requests": tally.requests, "tokens": tally.tokens, "refused_share": tally.refused_share,
        "refused_front": tally.refused_front, "failed": tally.failed, "ttft": tally.ttft,
    }))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
