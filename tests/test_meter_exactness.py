"""Exact for every request shape (issue 46): one mixed workload per key through the real nginx with
the usage meter, before the vLLM-protocol simulator, which counts tokens as vLLM 0.25/0.33 do
(images/vllm-sim/README.md: a prompt once per engine request, so ``n`` times for ``n`` choices;
a hang-up's tokens until the abort). Each shape runs alone, so the engine's own counters' deltas
(``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``) are what the engine did for it:
the meter must have counted exactly that, to the key that sent it. On 2cbc774's meter a streamed
/v1/responses, ``"stream": 1``/``"true"`` and a hang-up counted nothing, and ``n`` prompts once.

The same table against the real vLLM 0.25.0: scripts/h200/meter_exactness.py.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from components.config import build_stack_config
from tests.metered_front import MeteredFront, metered_front

KEYS = {"alice": "sk-alice-1403f1510d19d5295321", "bob": "sk-bob-0d08fac0336e7974aa11"}
SERVED = "glm-5.3-flash"
CHAT = [{"role": "user", "content": "Write a poem about the sea."}]


@pytest.fixture(scope="module")
def front() -> Iterator[MeteredFront]:
    config = build_stack_config({"hardware": "local", "front": {"rateLimit": {"enabled": False}}})
    sim_env = {"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.002"}
    with metered_front(config, KEYS, max_num_seqs=16, sim_env=sim_env) as running:
        yield running


ENGINE = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_hits_total")
METER = (
    "glm_key_prompt_tokens_total",
    "glm_key_completion_tokens_total",
    "glm_key_cached_prompt_tokens_total",
)


def engine_counters(front: MeteredFront) -> tuple[float, ...]:
    """Prompt, generated and prefix-cache-hit tokens, as the engine counted them."""
    text = httpx.get(f"{front.engine}/metrics", timeout=5).text
    return tuple(
        sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))
        for name in ENGINE
    )


def meter_counters(front: MeteredFront, key: str) -> tuple[float, ...]:
    """Prompt, completion and cached prompt tokens, as the meter counted them for ``key``."""
    text = front.meter_metrics()
    values = []
    for name in METER:
        found = re.search(rf'^{name}{{client="{key}"}} (\S+)$', text, re.M)
        values.append(float(found[1]) if found else 0.0)
    return tuple(values)


def send(front: MeteredFront, key: str, route: str, body: dict, *, events: int | None = None) -> int:
    """One request as a client sends it; ``events``: hang up after that many server-sent events.
    Returns the HTTP status."""
    headers = {"Authorization": f"Bearer {KEYS[key]}"}
    with httpx.stream("POST", f"{front.base}{route}", json=body, headers=headers, timeout=60) as answer:
        if events is None:
            answer.read()
            return answer.status_code
        seen = 0
        for line in answer.iter_lines():
            seen += line.startswith("data:")
            if seen >= events:
                break  # the client leaves: httpx closes the connection
        return 499


def settled(read: Callable[[], tuple[float, ...]]) -> tuple[float, ...]:
    """A counter pair once it stops moving (a hang-up's last tokens land after the client left)."""
    last, stable_since = read(), time.monotonic()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = read()
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= 0.6:
            break
    return last


SHAPES: dict[str, tuple[str, dict, int | None]] = {
    "plain chat": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 30}, None),
    "streamed, no stream_options": (
        "/v1/chat/completions",
        {"messages": CHAT, "max_tokens": 30, "stream": True},
        None,
    ),
    "streamed with include_usage": (
        "/v1/chat/completions",
        {"messages": CHAT, "max_tokens": 30, "stream": True, "stream_options": {"include_usage": True}},
        None,
    ),
    '"stream": 1': ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 40, "stream": 1}, None),
    '"stream": "true"': (
        "/v1/chat/completions",
        {"messages": CHAT, "max_tokens": 40, "stream": "true"},
        None,
    ),
    "chat n 3": (
        "/v1/chat/completions",
        {"messages": CHAT, "max_tokens": 20, "n": 3, "temperature": 0.7},
        None,
    ),
    "four prompts": ("/v1/completions", {"prompt": ["sea", "sky", "sand", "salt"], "max_tokens": 12}, None),
    "four prompts streamed": (
        "/v1/completions",
        {"prompt": ["sea", "sky", "sand", "salt"], "max_tokens": 12, "stream": True},
        None,
    ),
    "responses": ("/v1/responses", {"input": "Write a poem about the sea.", "max_output_tokens": 30}, None),
    "responses streamed": (
        "/v1/responses",
        {"input": "Write a poem about the sea.", "max_output_tokens": 30, "stream": True},
        None,
    ),
    "hung up after 10 events": (
        "/v1/chat/completions",
        {"messages": CHAT, "max_tokens": 300, "stream": True},
        10,
    ),
    "refused by the engine": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 10**6}, None),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_shape_is_counted_as_the_engine_counted_it_to_the_key_that_sent_it(
    front: MeteredFront, shape: str
) -> None:
    route, body, events = SHAPES[shape]
    key, other = ("alice", "bob") if len(shape) % 2 else ("bob", "alice")
    engine_before = settled(lambda: engine_counters(front))
    mine_before, theirs_before = meter_counters(front, key), meter_counters(front, other)
    status = send(front, key, route, {"model": SERVED, **body}, events=events)
    engine = settled(lambda: engine_counters(front))
    mine = settled(lambda: meter_counters(front, key))
    engine_delta = tuple(a - b for a, b in zip(engine, engine_before, strict=True))
    mine_delta = tuple(a - b for a, b in zip(mine, mine_before, strict=True))
    table = json.dumps({"shape": shape, "status": status, "engine": engine_delta, "meter": mine_delta})
    if shape == "refused by the engine":
        assert status == 400 and engine_delta == (0, 0, 0) and mine_delta == (0, 0, 0), table
    elif events is not None:
        # The client left after 10 events: charged what it was sent, never zero, never more than the
        # engine made (which stops at its next token once it sees the client gone). The cached
        # tokens come with the final usage only: none.
        assert engine_delta[0] == mine_delta[0], table
        assert 0 < mine_delta[1] <= engine_delta[1], table
        assert mine_delta[2] == 0, table
    elif shape.startswith("four prompts"):
        # vLLM's usage gives one prompt's cached tokens (the last's), the engine counts every prompt's.
        assert status == 200 and mine_delta[:2] == engine_delta[:2], table
        assert mine_delta[2] <= engine_delta[2], table
    else:
        assert status == 200 and engine_delta[1] > 0, table
        assert mine_delta == engine_delta, table
    assert meter_counters(front, other) == theirs_before, f"{other} was charged for {key}'s {shape}"


def test_a_conversations_next_turn_is_counted_cached_and_the_client_that_asked_sees_it(
    front: MeteredFront,
) -> None:
    """Three turns of one conversation (vLLM's prefix cache: the shared prefix in whole blocks of 16):
    each later turn's cached tokens reach the client that asked for usage (a JSON body, a stream
    with include_usage), not one that did not, and the meter counts what the engine hit."""
    history = [{"role": "user", "content": " ".join(f"w{i}" for i in range(400))}]
    turns = [
        ({"stream": False}, "body"),
        ({"stream": True, "stream_options": {"include_usage": True}}, "usage event"),
        ({"stream": True}, "none"),
    ]
    for index, (extra, sees) in enumerate(turns):
        engine_before, mine_before = settled(lambda: engine_counters(front)), meter_counters(front, "alice")
        body = {"model": SERVED, "messages": history, "max_tokens": 8, **extra}
        headers = {"Authorization": f"Bearer {KEYS['alice']}"}
        with httpx.stream("POST", f"{front.base}/v1/chat/completions", json=body, headers=headers) as answer:
            text = answer.read().decode()
        if sees == "body":
            got = json.loads(text)
            usage, reply = got["usage"], got["choices"][0]["message"]["content"]
        else:
            events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
            usages = [e["usage"] for e in events if e.get("usage")]
            usage = usages[-1] if usages else None
            reply = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
        hits = settled(lambda: engine_counters(front))[2] - engine_before[2]
        counted = settled(lambda: meter_counters(front, "alice"))[2] - mine_before[2]
        assert counted == hits, (index, hits, counted)
        if index == 0:
            assert hits == 0 and usage["prompt_tokens_details"] is None
        else:
            assert hits > 0 and hits % 16 == 0
        if sees == "none":
            assert usage is None, "the client did not ask for usage"
        elif index:
            assert usage["prompt_tokens_details"] == {"cached_tokens": hits}
        history = [
            *history,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": f"turn {index}"},
        ]
