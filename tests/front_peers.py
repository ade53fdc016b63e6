"""Two real nginx fronts with the usage meter, each the other's peer (meter_peers.lua), over one
simulator: several front pods sharing one account, on loopback (tests/test_meter_peers.py,
tests/test_meter_handoff.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Iterator

import openai

from components.config import build_stack_config
from components.render.nginx_meter import MeterPeers
from tests.engine import free_port
from tests.metered_front import MeteredFront, metered_front

KEYS = {
    "alice": "sk-alice-5f2b8e1c9a4d7f3b6e0c2a8d5f1b9e4c7a3d6f0b",
    "bob": "sk-bob-8d3f6a1c4e9b2d7f0a5c8e3b6d1f4a9c2e7b0d5f",
}
SERVED = "glm-5.3-flash"
MINUTE = 30
"""The harness's budget minute: long enough that none ends while a test runs (they run in seconds)."""
PULL_SECONDS = 0.25
"""meter_peers.INTERVAL: how often a front reads the others."""
SLOTS = 8


@contextlib.contextmanager
def two_fronts(
    limits: dict, drain_files: tuple[str, str] | None = None
) -> Iterator[tuple[MeteredFront, MeteredFront]]:
    """Fronts a and b over one simulator, each the other's discovery address; ``drain_files``: each
    one's own (where its preStop would say it leaves), not the pods' one path."""
    config = build_stack_config(
        {"hardware": "local", "front": {"rateLimit": {"enabled": False}, "usageMeter": {"limits": limits}}}
    )
    port_a, port_b = free_port(), free_port()
    drains = {"front-a": drain_files[0], "front-b": drain_files[1]} if drain_files else {}

    def peers(me: int, other: int, name: str) -> MeterPeers:
        found = MeterPeers(discovery=f"127.0.0.1:{other}", port=me, name=name, address=f"127.0.0.1:{me}")
        return dataclasses.replace(found, drain_file=drains[name]) if name in drains else found

    with metered_front(
        config, KEYS, max_num_seqs=SLOTS, minute_seconds=MINUTE, status_port=port_a,
        peers=peers(port_a, port_b, "front-a"),
    ) as a:  # fmt: skip
        engine = a.engine.removeprefix("http://")
        with metered_front(
            config, KEYS, max_num_seqs=SLOTS, minute_seconds=MINUTE, status_port=port_b,
            peers=peers(port_b, port_a, "front-b"), engines=[engine],
        ) as b:  # fmt: skip
            yield a, b


def ask(front: MeteredFront, key: str = "alice") -> int:
    try:
        front.client(KEYS[key]).chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": "What is 13*17?"}], max_tokens=20
        )
        return 200
    except openai.RateLimitError:
        return 429


def capacity(front: MeteredFront) -> int:
    found = re.search(r"^glm_fair_share_capacity (\d+)$", front.meter_metrics(), re.M)
    assert found, front.meter_metrics()
    return int(found.group(1))


def wait_for(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()
