"""What the usage meter does to other keys and to clients when things go wrong (issue 46): the
review's flood, a killed worker and a killed front, through the real nginx with the meter inside it
and the vLLM-protocol simulator (tests/metered_front.py), with the real clients' answers checked.

- ``flood``: key bob streams one short answer after another, alone, then while key alice sends six
  ~19 MiB bodies at once, every 2 s (a /v1/completions prompt list of millions of empty
  token lists: 2cbc774's meter decoded such a body whole on its one loop, 2.44 s and 536 MiB each;
  here it is scanned in slices from nginx's temporary file and refused). Bob's TTFT p50/p99 and his
  longest gap between chunks, alone and during the flood, and the ratio.
- ``crash``: 8 workers of short chats (13x17, the answer checked) for ``--seconds``; one nginx
  worker SIGKILLed a third of the way (as an OOM kill would): requests sent, failed, failed among
  those started 1 s or more after the kill, what the failed ones got, the slots held after, and the
  key's counters against the answers the clients received.
- ``restart``: the whole front SIGKILLed (master and workers, as an OOM kill of the container) and
  started again: the counters before and after.

Figures are printed, never asserted.

    .venv/bin/python benchmarks/meter_faults.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import signal
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.config import build_stack_config
from tests.metered_front import MeteredFront, metered_front

KEYS = {"alice": "sk-alice-1403f1510d19d5295321", "bob": "sk-bob-0d08fac0336e7974aa11"}
SERVED = "glm-5.3-flash"
QUESTION = [{"role": "user", "content": "What is 13*17?"}]


def counter(text: str, name: str, client: str) -> float:
    return sum(float(v) for v in re.findall(rf'^{name}{{client="{client}"[^}}]*}} (\S+)$', text, re.M))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def bob_streams(front: MeteredFront, seconds: float) -> tuple[list[float], list[float]]:
    """Bob's TTFTs and the longest gap between chunks of each stream, back to back for ``seconds``."""
    ttfts, gaps = [], []
    stop = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {KEYS['bob']}"}
    body = {"model": SERVED, "messages": [{"role": "user", "content": "Write a poem."}], "max_tokens": 24,
            "stream": True}  # fmt: skip
    with httpx.Client(timeout=60) as client:
        while time.monotonic() < stop:
            started = last = time.monotonic()
            first, longest = None, 0.0
            with client.stream(
                "POST", f"{front.base}/v1/chat/completions", json=body, headers=headers
            ) as answer:
                for line in answer.iter_lines():
                    if line.startswith("data:"):
                        now = time.monotonic()
                        if first is None:
                            first = now - started
                        else:
                            longest = max(longest, now - last)
                        last = now
            if first is not None:
                ttfts.append(first)
                gaps.append(longest)
    return ttfts, gaps


def _alice(url: str, body: bytes, stop: float, statuses: multiprocessing.Queue) -> None:
    """One of alice's senders: her body every 2 s until ``stop`` (wall clock)."""
    headers = {"Authorization": f"Bearer {KEYS['alice']}", "Content-Type": "application/json"}
    with httpx.Client(timeout=120) as client:
        while (sent := time.time()) < stop:
            statuses.put(client.post(url, content=body, headers=headers).status_code)
            time.sleep(max(0.0, sent + 2.0 - time.time()))


def _beside_alice(front: MeteredFront, url: str, body: bytes, seconds: float) -> tuple[tuple, list[int]]:
    """Bob's streams while alice's six senders post ``body`` to ``url`` (in processes of their own:
    in bob's, her sends would hold his reader back, the GIL)."""
    stop = time.time() + seconds + 0.5
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    senders = [context.Process(target=_alice, args=(url, body, stop, queue)) for _ in range(6)]
    for sender in senders:
        sender.start()
    time.sleep(0.5)
    during = bob_streams(front, seconds)
    for sender in senders:
        sender.join()
    statuses = []
    while not queue.empty():
        statuses.append(queue.get())
    return during, statuses


def flood(front: MeteredFront, seconds: float) -> None:
    """Bob alone; beside alice's bodies on a route nginx refuses by itself (the body read and
    thrown away: what the upload alone costs a 2-core box); beside the same bodies where the meter
    reads them."""
    body = (
        '{"model": "' + SERVED + '", "max_tokens": 1, "prompt": [' + ",".join(["[]"] * 6_500_000) + "]}"
    ).encode()
    print(
        f"flood: bob's streams alone, then beside alice's six {len(body) / 2**20:.1f} MiB bodies at once, every 2 s,"
    )
    print(
        "  sent to a route nginx answers by itself (404: the upload alone), then where the meter reads them"
    )
    alone = bob_streams(front, seconds)
    control, refused = _beside_alice(front, f"{front.base}/v1/no-such-route", body, seconds)
    during, statuses = _beside_alice(front, f"{front.base}/v1/completions", body, seconds)
    print(
        f"  alice's bodies answered: {len(refused)} {sorted(set(refused))}, {len(statuses)} {sorted(set(statuses))}"
    )
    print(
        f"  {'bob':16s} {'alone':>8s} {'upload':>8s} {'metered':>8s} {'metered/alone':>14s} {'metered/upload':>15s}"
    )
    for label, index, share in (
        ("TTFT p50 (ms)", 0, 0.5),
        ("TTFT p99 (ms)", 0, 0.99),
        ("gap p99 (ms)", 1, 0.99),
    ):
        a, c, d = (percentile(run[index], share) * 1000 for run in (alone, control, during))
        print(f"  {label:16s} {a:8.1f} {c:8.1f} {d:8.1f} {d / a:13.2f}x {d / c:14.2f}x")
    print(f"  streams: {len(alone[0])} alone, {len(control[0])} beside the upload, {len(during[0])} metered")


def crash(front: MeteredFront, seconds: float) -> None:
    results: list[tuple[float, str]] = []
    stop = time.monotonic() + seconds
    before = front.meter_metrics()

    def load() -> None:
        with httpx.Client(timeout=30) as client:
            while (started := time.monotonic()) < stop:
                try:
                    answer = client.post(
                        f"{front.base}/v1/chat/completions", json={"model": SERVED, "messages": QUESTION, "max_tokens": 60},
                        headers={"Authorization": f"Bearer {KEYS['alice']}"},
                    )  # fmt: skip
                    body = answer.json()
                    ok = answer.status_code == 200 and "221" in body["choices"][0]["message"]["content"]
                    results.append((started, "ok" if ok else f"{answer.status_code} {str(body)[:100]}"))
                    if ok:
                        tokens.append(body["usage"]["completion_tokens"])
                except httpx.HTTPError as error:
                    results.append((started, type(error).__name__))

    tokens: list[int] = []
    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(seconds / 3)
    victim = front.workers()[0]
    killed = time.monotonic()
    import os

    os.kill(victim, signal.SIGKILL)
    for thread in threads:
        thread.join()
    after = front.meter_metrics()
    failed = [r for r in results if r[1] != "ok"]
    late = [r for r in failed if r[0] >= killed + 1.0]
    print(
        f"crash: 8 workers for {seconds:g} s, nginx worker {victim} SIGKILLed at {killed - results[0][0]:.1f} s"
    )
    print(
        f"  requests {len(results)}, failed {len(failed)}, failed among those started >= 1 s after: {len(late)}"
    )
    print(f"  what the failed ones got: {sorted({r[1] for r in failed}) or '-'}")
    print(f"  slots held after: {counter(after, 'glm_key_in_flight', 'alice'):.0f}")
    counted = counter(after, "glm_key_completion_tokens_total", "alice") - counter(
        before, "glm_key_completion_tokens_total", "alice"
    )
    print(
        f"  completion tokens: answered {sum(tokens)}, counted {counted:.0f} (the cut requests' tokens too)"
    )


def restart(front: MeteredFront) -> None:
    before = front.meter_metrics()
    time.sleep(2.5)  # the counters reach their file every 2 s
    front.restart(signal.SIGKILL)
    after = front.meter_metrics()
    print("restart: the front SIGKILLed (master and workers) and started again")
    for name in ("glm_key_requests_total", "glm_key_prompt_tokens_total", "glm_key_completion_tokens_total"):
        print(
            f"  {name:34s} before {counter(before, name, 'alice'):8.0f}  after {counter(after, name, 'alice'):8.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    config = build_stack_config({"hardware": "local", "front": {"rateLimit": {"enabled": False}}})
    sim = {"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.02"}  # 50 tokens/s a stream, as fair_share.py
    with metered_front(config, KEYS, max_num_seqs=64, sim_env=sim) as front:
        flood(front, args.seconds)
        crash(front, args.seconds)
        restart(front)


if __name__ == "__main__":
    main()
