"""Key B's time to first token while key A floods, before and after the usage meter's fair share
(issue 36).

The front as a stack runs it (real ``nginx`` with the rendered config, the usage meter, the
vLLM-protocol simulator) on loopback, two keys, the real ``openai`` client. The simulator models
the engine's capacity: ``--max-num-seqs`` (8 by default, the issue's local measurement) and a
decode time per token (``VLLM_SIM_DECODE_TOKEN_SECONDS``, 0.02 s: 50 tokens/s per sequence, 400
tokens/s for the engine), with a prefill rate (``VLLM_SIM_PREFILL_TOKENS_PER_S``).

- key B, steady: a short streamed chat every ``--b-interval`` seconds (``--b-tokens``, 16);
- key A, the flood: ``--flood-factor`` x its share of slots (share = maxNumSeqs / 2 keys = 4, so
  40 by default) workers, each streaming long chats (``--a-tokens``) back to back; a 429 waits its
  ``Retry-After`` and counts.

For each front ("before": nginx straight to the engine, as on main; "after": through the meter),
A's flood alone for ``--lone`` seconds (B has sent nothing yet: how much of the box a lone key
gets), then B alone for ``--alone`` seconds, then B during the flood for ``--flood`` seconds (after
a warm-up of 5 s). Printed: the answers A got alone, B's TTFT p50/p99 in each phase, the requests
and tokens each key got, the 429s (nginx's per-key limits and the meter's fair share apart).

    .venv/bin/python benchmarks/fair_share.py [--max-num-seqs 8] [--flood 30]

With ``--replicas 3`` the front has three replicas (the meter shares 3 x maxNumSeqs slots) and
``--routing`` picks how it spreads them (docs/scaling.md "Prefix affinity"): the flood's figure
with prefix affinity against round-robin, ``--only after``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.config import build_stack_config
from tests.front_rig import SERVED
from tests.metered_front import metered_front

KEYS = {"key-a": "sk-flood-a-1403f1510d19d5295321", "key-b": "sk-steady-b-0d08fac0336e7974"}
WARM_UP_SECONDS = 5.0
MAX_NUM_SEQS = 8
DECODE_SECONDS = 0.02
"""The engine's time per token and sequence (``VLLM_SIM_DECODE_TOKEN_SECONDS``): 50 tokens/s."""
PREFILL_RATE = 4000
"""Prompt tokens prefilled per second (``VLLM_SIM_PREFILL_TOKENS_PER_S``), near the seeds' 5,000
(images/vllm-sim/simulator/hardware.py): B's 400-token prompt is ~0.1 s to its first token, not the
local simulator's ~2 ms, so a few milliseconds of this machine's scheduling are not the figure."""
B_PROMPT_TOKENS = 400


@dataclass
class Tally:
    started: float = field(default_factory=time.monotonic)
    last_done: float = 0.0
    requests: int = 0
    tokens: int = 0
    refused_front: int = 0
    refused_share: int = 0
    failed: int = 0
    ttft: list[float] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    """Key B's phases: the engine's requests waiting for a slot, sampled every 0.2 s."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def stream_once(
    client: openai.OpenAI, tokens: int, tally: Tally, record_ttft: bool, prompt_tokens: int = 16
) -> float:
    """One streamed chat; returns how long to wait before the next (a 429's Retry-After, else 0).
    The prompt starts with something unique, so the prefix cache saves no prefill."""
    started = time.monotonic()
    first = None
    try:
        stream = client.chat.completions.create(
            model=SERVED,
            messages=[{"role": "user", "content": f"{started} {tokens} words." + " sea" * prompt_tokens}],
            max_tokens=tokens,
            stream=True,
            stream_options={"include_usage": True},
        )
        usage = 0
        for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.monotonic() - started
            if chunk.usage is not None:
                usage = chunk.usage.completion_tokens
    except openai.RateLimitError as e:
        with tally.lock:
            if "fair share" in e.message:
                tally.refused_share += 1
            else:
                tally.refused_front += 1
        return float(e.response.headers.get("retry-after", "1"))
    except openai.APIError:
        with tally.lock:
            tally.failed += 1
        return 1.0
    with tally.lock:
        tally.last_done = time.monotonic()
        tally.requests += 1
        tally.tokens += usage
        if record_ttft and first is not None:
            tally.ttft.append(first)
    return 0.0


def steady(
    client: openai.OpenAI, args: argparse.Namespace, until: float, tally: Tally, measure_from: float
) -> None:
    """Key B: one short stream every ``interval`` s, whether or not the last one was answered (open
    loop: a steady client does not slow down because the service did)."""
    requests = []
    next_at = time.monotonic()
    while next_at < until:
        time.sleep(max(0.0, next_at - time.monotonic()))
        measured = time.monotonic() >= measure_from
        request = threading.Thread(
            target=stream_once, args=(client, args.b_tokens, tally, measured, args.b_prompt_tokens)
        )
        request.start()
        requests.append(request)
        next_at += args.b_interval
    for request in requests:
        request.join()


def flood(http: httpx.Client, tokens: int, stop: threading.Event, tally: Tally) -> None:
    """Key A: long streams back to back. Read as raw bytes (only the usage event is parsed): this
    machine's CPU goes to the front and the engine, not to the flooding client's JSON."""
    while not stop.is_set():
        body = {
            "model": SERVED,
            "messages": [{"role": "user", "content": f"{time.monotonic()} {tokens} words about the sea."}],
            "max_tokens": tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        try:
            with http.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code == 429:
                    message = response.read().decode()
                    with tally.lock:
                        if "fair share" in message:
                            tally.refused_share += 1
                        else:
                            tally.refused_front += 1
                    stop.wait(float(response.headers.get("retry-after", "1")))
                    continue
                if response.status_code != 200:  # a key the front does not know is no flood
                    raise httpx.HTTPStatusError(
                        f"{response.status_code}", request=response.request, response=response
                    )
                tail = b""
                for part in response.iter_bytes():
                    tail = (tail + part)[-2048:]
        except httpx.HTTPError:
            with tally.lock:
                tally.failed += 1
            stop.wait(1.0)
            continue
        usage = re.findall(rb'"completion_tokens":(\d+)', tail)
        with tally.lock:
            tally.last_done = time.monotonic()
            tally.requests += 1
            tally.tokens += int(usage[-1]) if usage else 0


def sample_waiting(engines: tuple[str, ...], stop: threading.Event, tally: Tally) -> None:
    """How many requests wait in the engines for a slot: the meter keeps them free for B, so a B
    that waits shows here (a slow TTFT without one is this machine's CPU, not a slot)."""
    with httpx.Client(timeout=5) as http:
        while not stop.wait(0.2):
            waiting = 0
            for engine in engines:
                found = re.search(
                    r"^vllm:num_requests_waiting(?:\{[^}]*\})? (\S+)$",
                    http.get(f"{engine}/metrics").text,
                    re.M,
                )
                waiting += int(float(found[1])) if found else 0
            tally.waiting.append(waiting)


def queue(tally: Tally) -> str:
    waited = sum(1 for n in tally.waiting if n)
    return f"a request waiting for a slot in {waited} of {len(tally.waiting)} samples (at most {max(tally.waiting, default=0)})"


def quantiles(values: list[float]) -> str:
    if len(values) < 2:
        return "n/a (fewer than 2 answers)"
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return f"p50 {cuts[49]:.3f} s  p99 {cuts[98]:.3f} s  max {max(values):.3f} s  (n={len(values)})"


def start_flood(http: httpx.Client, args: argparse.Namespace, stop: threading.Event, tally: Tally) -> list:
    share = max(1, args.max_num_seqs * args.replicas // len(KEYS))
    workers = [
        threading.Thread(target=flood, args=(http, args.a_tokens, stop, tally), daemon=True)
        for _ in range(args.flood_factor * share)
    ]
    for w in workers:
        w.start()
    return workers


def stop_flood(workers: list, stop: threading.Event, args: argparse.Namespace) -> None:
    stop.set()
    for w in workers:
        w.join(timeout=args.a_tokens * args.decode_seconds * 10 + 60)


def window(tally: Tally) -> Tally:
    """What ``tally`` counted until now: the answers completed in its window, not those streaming."""
    with tally.lock:
        return Tally(
            tally.started, time.monotonic(), tally.requests, tally.tokens,
            tally.refused_front, tally.refused_share, tally.failed,
        )  # fmt: skip


@contextlib.contextmanager
def sampling(engines: tuple[str, ...], tally: Tally) -> Iterator[None]:
    stop = threading.Event()
    sampler = threading.Thread(target=sample_waiting, args=(engines, stop, tally), daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join()


def run(meter: bool, args: argparse.Namespace) -> dict[str, object]:
    front_config = {"usageMeter": {"fairShare": True}, "routing": {"policy": args.routing}}
    config = build_stack_config({"hardware": "local", "front": front_config})
    env = {
        "VLLM_SIM_DECODE_TOKEN_SECONDS": str(args.decode_seconds),
        "VLLM_SIM_PREFILL_TOKENS_PER_S": str(args.prefill_rate),
    }
    with metered_front(
        config, KEYS, max_num_seqs=args.max_num_seqs, sim_env=env, meter=meter, replicas=args.replicas
    ) as front:
        a_http = httpx.Client(
            base_url=front.base, headers={"Authorization": f"Bearer {KEYS['key-a']}"}, timeout=600
        )
        b_client = front.client(KEYS["key-b"], timeout=600)
        lone, stop = Tally(), threading.Event()
        workers = start_flood(a_http, args, stop, lone)
        time.sleep(args.lone)
        lone_window = window(lone)
        stop_flood(workers, stop, args)
        alone = Tally()
        now = time.monotonic()
        with sampling(front.engines, alone):
            steady(b_client, args, now + args.alone, alone, now + 1)
        b, a = Tally(), Tally()  # both from the flood's start
        stop = threading.Event()
        workers = start_flood(a_http, args, stop, a)
        now = time.monotonic()
        with sampling(front.engines, b):
            steady(b_client, args, now + args.flood, b, now + WARM_UP_SECONDS)
        stop_flood(workers, stop, args)
        a_http.close()
    return {"lone": lone_window, "alone": alone, "b": b, "a": a, "workers": len(workers)}


def report(name: str, result: dict[str, object]) -> None:
    lone, alone, b, a = result["lone"], result["alone"], result["b"], result["a"]
    assert all(isinstance(t, Tally) for t in (lone, alone, b, a))
    print(f"\n{name}")
    print(f"  key B alone          TTFT {quantiles(alone.ttft)}; engine: {queue(alone)}")
    print(f"  key B during flood   TTFT {quantiles(b.ttft)}; engine: {queue(b)}")
    for label, t in (("key A alone", lone), ("key A (flood)", a), ("key B (steady)", b)):
        seconds = t.last_done - t.started
        print(
            f"  {label:15s} {t.requests} answered, {t.tokens} tokens in {seconds:.0f} s "
            f"({t.tokens / max(seconds, 1e-9):.0f} tokens/s); 429s: {t.refused_share} fair share, "
            f"{t.refused_front} front limits; {t.failed} failed"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-num-seqs", type=int, default=MAX_NUM_SEQS)
    parser.add_argument("--decode-seconds", type=float, default=DECODE_SECONDS)
    parser.add_argument("--prefill-rate", type=int, default=PREFILL_RATE)
    parser.add_argument("--b-prompt-tokens", type=int, default=B_PROMPT_TOKENS)
    parser.add_argument("--flood-factor", type=int, default=10)
    parser.add_argument("--a-tokens", type=int, default=100)
    parser.add_argument("--b-interval", type=float, default=0.25)
    parser.add_argument("--b-tokens", type=int, default=16)
    parser.add_argument("--lone", type=float, default=20.0)
    parser.add_argument("--alone", type=float, default=15.0)
    parser.add_argument("--flood", type=float, default=45.0)
    parser.add_argument("--only", choices=["before", "after"])
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--routing", choices=["prefix-affinity", "round-robin"], default="prefix-affinity")
    args = parser.parse_args()
    print(
        f"engine: --max-num-seqs {args.max_num_seqs}, {1 / args.decode_seconds:.0f} tokens/s per sequence "
        f"({args.max_num_seqs / args.decode_seconds:.0f} for the engine), prefill {args.prefill_rate} tokens/s; "
        f"key A: {args.flood_factor} x its share of {args.max_num_seqs * args.replicas // 2} slots, {args.a_tokens}-token streams; "
        f"key B: a {args.b_tokens}-token stream of a {args.b_prompt_tokens}-token prompt every {args.b_interval} s; "
        f"{args.replicas} replica(s), routing {args.routing}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    for name, meter in (
        ("before (main: nginx straight to the engine)", False),
        ("after (usage meter, fair share)", True),
    ):
        if args.only and args.only != ("after" if meter else "before"):
            continue
        report(name, run(meter, args))


if __name__ == "__main__":
    main()
