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


def engine_counters(front: MeteredFront) -> tuple[float, float]:
    text = httpx.get(f"{front.engine}/metrics", timeout=5).text
    values = []
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
        values.append(
            sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))
        )
    return values[0], values[1]


def meter_counters(front: MeteredFront, key: str) -> tuple[float, float]:
    text = front.meter_metrics()
    values = []
    for name in ("glm_key_prompt_tokens_total", "glm_key_completion_tokens_total"):
        found = re.search(rf'^{name}{{client="{key}"}} (\S+)$', text, re.M)
        values.append(float(found[1]) if found else 0.0)
    return values[0], values[1]


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


def settled(read: Callable[[], tuple[float, float]]) -> tuple[float, float]:
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
    engine_delta = (engine[0] - engine_before[0], engine[1] - engine_before[1])
    mine_delta = (mine[0] - mine_before[0], mine[1] - mine_before[1])
    table = json.dumps({"shape": shape, "status": status, "engine": engine_delta, "meter": mine_delta})
    if shape == "refused by the engine":
        assert status == 400 and engine_delta == (0, 0) and mine_delta == (0, 0), table
    elif events is not None:
        # The client left after 10 events: charged what it was sent, never zero, never more than the
        # engine made (which stops at its next token once it sees the client gone).
        assert engine_delta[0] == mine_delta[0], table
        assert 0 < mine_delta[1] <= engine_delta[1], table
    else:
        assert status == 200 and engine_delta[1] > 0, table
        assert mine_delta == engine_delta, table
    assert meter_counters(front, other) == theirs_before, f"{other} was charged for {key}'s {shape}"
