"""Several front pods, one account (issue 49; components/host/meter/meter_peers.lua): two real
nginx fronts on loopback, each told the other's status port as its discovery address, over the same
simulator. A key's budget is the stack's whatever front its requests reach; a front that is gone
still counts for the rest of the window; the engine's slots are shared among the fronts alive.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from components.config import build_stack_config
from components.render.nginx_meter import MeterPeers
from tests.engine import free_port
from tests.front_peers import KEYS, MINUTE, PULL_SECONDS, SLOTS, ask, capacity, two_fronts, wait_for
from tests.metered_front import MeteredFront, metered_front, run_in_nginx_lua


@pytest.fixture(scope="module")
def fronts() -> Iterator[tuple[MeteredFront, MeteredFront]]:
    with two_fronts({"alice": {"requestsPerMinute": 10}}) as pair:
        yield pair


def test_a_keys_budget_is_the_stacks_whichever_front_its_requests_reach(
    fronts: tuple[MeteredFront, MeteredFront],
) -> None:
    """6 requests through one front, then through the other: 4 more fit the 10 per minute, not 10."""
    a, b = fronts
    time.sleep(MINUTE - time.time() % MINUTE + 0.05)  # a fresh window
    assert [ask(a) for _ in range(6)] == [200] * 6
    time.sleep(4 * PULL_SECONDS)
    assert [ask(b) for _ in range(6)] == [200] * 4 + [429] * 2
    # Bob has no budget: both fronts pass him.
    assert ask(a, "bob") == ask(b, "bob") == 200
    used = re.search(r'^glm_key_budget_used\{client="alice",window="requests_per_minute"\} (\d+)$',
                     b.meter_metrics(), re.M)  # fmt: skip
    assert used and int(used.group(1)) == 10


def test_the_fronts_alive_share_the_engines_slots() -> None:
    with two_fronts({}) as (a, b):
        assert wait_for(lambda: capacity(a) == capacity(b) == SLOTS // 2), (capacity(a), capacity(b))
    # Each front alone again: the other's part is its own within a few pulls.


def test_a_gone_front_still_counts_for_the_rest_of_its_window_and_the_survivor_takes_its_slots() -> None:
    config = build_stack_config(
        {"hardware": "local", "front": {"rateLimit": {"enabled": False},
         "usageMeter": {"limits": {"alice": {"requestsPerMinute": 10}}}}}
    )  # fmt: skip
    port_a, port_b = free_port(), free_port()
    time.sleep(MINUTE - time.time() % MINUTE + 0.05)
    with metered_front(
        config, KEYS, max_num_seqs=SLOTS, minute_seconds=MINUTE, status_port=port_b,
        peers=MeterPeers(discovery=f"127.0.0.1:{port_a}", port=port_b, name="front-b", address=f"127.0.0.1:{port_b}"),
    ) as b:  # fmt: skip
        engine = b.engine.removeprefix("http://")
        with metered_front(
            config, KEYS, max_num_seqs=SLOTS, minute_seconds=MINUTE, status_port=port_a, engines=[engine],
            peers=MeterPeers(discovery=f"127.0.0.1:{port_b}", port=port_a, name="front-a",
                             address=f"127.0.0.1:{port_a}"),
        ) as a:  # fmt: skip
            assert wait_for(lambda: capacity(b) == SLOTS // 2)
            assert [ask(a) for _ in range(7)] == [200] * 7
            time.sleep(4 * PULL_SECONDS)
        # Front a is gone (its process stopped): b shares the slots with no one within a few pulls,
        # and a's 7 requests still count in alice's minute.
        assert wait_for(lambda: capacity(b) == SLOTS), capacity(b)
        assert [ask(b) for _ in range(5)] == [200] * 3 + [429] * 2


HELD_DRIVER = """
local cjson = require("cjson")
local peers = require("meter_peers")
local a, b = table_dict({}), table_dict({})
local front_a, front_b = { name = "front-a", address = "10.0.0.1:8080" }, { name = "front-b" }
a:set("held:bob", 2)
a:set("held:alice", 0)
peers.merge(b, front_b, cjson.decode(peers.report(a, front_a, 100)))
local sums = peers.sum(b, {}, 60)
local said = { bob = b:get("peers:held:bob"), alice = b:get("peers:held:alice") or cjson.null }
-- Bob's streams on front a end; a report also relays front c, which is not alive (it never
-- answered front b itself) and last said it held 3 of bob's.
a:set("held:bob", 0)
local report = cjson.decode(peers.report(a, front_a, 101))
report.fronts["front-c"] = { v = 5, windows = {}, held = { bob = 3 } }
peers.merge(b, front_b, report)
peers.sum(b, sums, 60)
said.bob_after = b:get("peers:held:bob")
reply(said)
"""


def test_each_front_learns_the_slots_the_other_fronts_alive_hold_for_each_key() -> None:
    """What the fair share reads as a key's slots elsewhere (meter_shares.elsewhere): front a's report
    says bob holds 2 there; front b sums it, and sets it back to 0 once a's streams end, counting
    no pod that is not alive."""
    said = run_in_nginx_lua(["meter_peers"], HELD_DRIVER, {})
    assert said == {"bob": 2, "alice": None, "bob_after": 0}


RELAY_DRIVER = """
local cjson = require("cjson")
local peers = require("meter_peers")
local a, b = table_dict({}), table_dict({})
local front_a, front_b = { name = "front-a", address = "10.0.0.1:8080" }, { name = "front-b" }
-- Front a relays front c, which front b never asked itself (out of the Service: a leaving pod).
local report = cjson.decode(peers.report(a, front_a, 100))
report.fronts["front-c"] = { v = 7, address = "10.0.0.3:8080", windows = {}, held = {} }
peers.merge(b, front_b, report)
reply({ a = b:get("peer_addr:front-a"), c = b:get("peer_addr:front-c") })
"""


def test_a_front_learns_the_address_of_a_front_another_one_relays() -> None:
    """A new pod finds the others through the Service, which a leaving pod has left: it learns that
    pod's address from another's report, asks it by address, and so takes its counts as it leaves
    (meter_handoff; a front roll lost them before, 2026-12-06: the table rose by 29 for 261)."""
    said = run_in_nginx_lua(["meter_peers"], RELAY_DRIVER, {})
    assert said == {"a": "10.0.0.1:8080", "c": "10.0.0.3:8080"}
