"""The usage meter's fair share as pure decisions (components/host/meter/meter_shares.lua), run in the
real nginx's LuaJIT over a table with the shared dict's get/set/incr: which request takes a slot and
which waits or gets the 429, for a lone key, a key arriving beside a flood, two floods and weights.
Times are the ``now`` each step is given; nothing sleeps. The cases are the share's rules as
docs/front-and-alerts.md ("The fair share") states them, kept from the meter's first form. The meter
with nginx and the simulator: tests/test_usage_meter.py; the latency it buys: benchmarks/fair_share.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.metered_front import run_in_nginx_lua

CAPACITY = 8
"""The benchmark's engine (``--max-num-seqs 8``, one replica): two keys of weight 1 have 4 each."""
ACTIVE_SECONDS = 60

DRIVER = """
local cjson = require("cjson")
local shares = require("meter_shares")
local input = cjson.decode(io.open(IN):read("*a"))
local store = table_dict({})
local config = input.config
local share = shares.new(store, config, config.stack)
local capacity = config.capacity
local said = {}
for i, step in ipairs(input.steps) do
  local op, name, now = step[1], step[2], step[3]
  local result = cjson.null
  if op == "admit" then
    result = share:admit(name, step[4] or 1, capacity, now)
  elseif op == "release" then
    share:release(name, 1)
  elseif op == "fill" then
    result = 0
    while share:admit(name, 1, capacity, now) do
      result = result + 1
      if result > 10 * capacity then break end
    end
  elseif op == "share" then
    result = share:share(name, capacity, now)
  elseif op == "held" then
    result = share:held(name)
  elseif op == "elsewhere" then -- what the other front pods hold for the key, as a pull left it
    store:set("peers:held:" .. name, step[4])
  elseif op == "active" then
    result = share:active(name, now)
  elseif op == "churn" then -- floods: one answer of each ends, and the key asks again until refused
    for _ = 1, 3 * capacity do
      for _, who in ipairs(step[4]) do
        if share:held(who) > 0 then share:release(who, 1) end
        while share:admit(who, 1, capacity, now) do end
      end
    end
  end
  said[i] = result
end
reply(said)
"""


def run(steps: list[list[Any]], weights: dict[str, float] | None = None, **config: Any) -> list[Any]:
    """Each step's result: ``["admit", name, now, weight]``, ``["fill", name, now]`` (slots taken
    until the first refusal), ``["share"|"active", name, now]``, ``["held", name]``, ``["release",
    name]``, ``["churn", "", now, [names]]``, ``["elsewhere", name, now, held]`` (the other front
    pods hold ``held`` for ``name``). ``stack=N``: the whole stack's slots, several front pods."""
    settings = {"weights": weights or {"a": 1, "b": 1}, "fair_share": True, "capacity": CAPACITY, **config}
    said = run_in_nginx_lua(["meter_shares"], DRIVER, {"config": settings, "steps": steps})
    assert isinstance(said, list)
    return said


def used_once(name: str, at_once: int, now: float) -> list[list[Any]]:
    """``name`` held ``at_once`` slots together at ``now``, and every answer has ended since."""
    return [["admit", name, now]] * at_once + [["release", name]] * at_once


def test_a_lone_key_gets_every_slot() -> None:
    """b is configured but has sent nothing: no slot is held back for it."""
    assert run([["fill", "a", 0.0]]) == [CAPACITY]


def test_a_key_idle_for_longer_than_the_active_window_keeps_no_slot() -> None:
    assert run([*used_once("b", 3, 0.0), ["fill", "a", ACTIVE_SECONDS + 1]])[-1] == CAPACITY


def test_a_recently_active_key_keeps_one_free_slot_and_finds_it_when_it_asks() -> None:
    said = run(
        [*used_once("b", 1, 0.0), ["fill", "a", 1.0], ["admit", "b", 2.0], ["held", "a"], ["held", "b"]]
    )
    assert said[-4:] == [CAPACITY - 1, True, CAPACITY - 1, 1]


def test_the_slots_a_key_used_at_once_lately_stay_free_for_it() -> None:
    said = run([*used_once("b", 3, 0.0), ["fill", "a", 1.0], *[["admit", "b", 2.0]] * 3])
    assert said[-4:] == [CAPACITY - 3, True, True, True]


def test_a_key_holding_its_recent_peak_can_double_it_without_waiting() -> None:
    said = run(
        [
            ["admit", "b", 0.0],
            ["admit", "b", 0.0],
            ["fill", "a", 1.0],
            ["admit", "b", 2.0],
            ["admit", "b", 2.0],
        ]
    )
    assert said == [True, True, CAPACITY - 4, True, True]


def test_a_key_using_its_free_slot_gets_the_next_one_the_flood_gives_back() -> None:
    steps = [*used_once("b", 1, 0.0), ["fill", "a", 1.0], ["admit", "b", 2.0], ["release", "a"],
             ["admit", "a", 3.0], ["admit", "b", 3.0]]  # fmt: skip
    assert run(steps)[-2:] == [False, True]


def test_a_key_arriving_beside_a_lone_flood_is_admitted_and_the_flood_gives_way() -> None:
    steps = [
        ["fill", "a", 0.0], ["admit", "b", 1.0], ["share", "a", 1.0], ["share", "b", 1.0],
        ["churn", "", 2.0, ["a"]], ["held", "a"], ["held", "b"],
        ["churn", "", 3.0, ["a", "b"]], ["held", "a"], ["held", "b"],
    ]  # fmt: skip
    said = run(steps)
    assert said[:4] == [CAPACITY, True, CAPACITY // 2, CAPACITY // 2]
    assert said[5:7] == [CAPACITY - 2, 1]
    assert said[8:] == [CAPACITY // 2, CAPACITY // 2]


def test_two_floods_each_get_their_share() -> None:
    assert run([["churn", "", 0.0, ["a", "b"]], ["held", "a"], ["held", "b"]])[1:] == [CAPACITY // 2] * 2


def test_a_key_within_its_share_is_never_refused_even_when_the_engine_is_full() -> None:
    said = run([["fill", "a", 0.0], *[["admit", "b", 1.0]] * (CAPACITY // 2), ["admit", "b", 1.0]])
    assert said[1:] == [True] * (CAPACITY // 2) + [False]


def test_the_headroom_kept_for_a_key_never_exceeds_its_share() -> None:
    assert run([*used_once("b", CAPACITY, 0.0), ["fill", "a", 1.0]])[-1] == CAPACITY // 2


def test_weights_split_the_slots_among_the_active_keys() -> None:
    steps = [["share", "b", 0.0], ["churn", "", 0.0, ["a", "b"]], ["share", "a", 0.0], ["share", "b", 0.0],
             ["share", "c", 0.0], ["held", "a"], ["held", "b"]]  # fmt: skip
    assert run(steps, weights={"a": 1, "b": 3, "c": 4}) == [CAPACITY, None, 2, 6, 4, 2, 6]


def test_a_key_holding_a_long_stream_stays_active_past_the_window() -> None:
    later = 2 * ACTIVE_SECONDS
    assert run([["admit", "b", 0.0], ["active", "b", later], ["fill", "a", later]]) == [
        True,
        True,
        CAPACITY - 2,
    ]


def test_a_request_weighs_its_sequences_beside_another_key() -> None:
    """Issue 46: a request of n x prompts sequences takes that many slots: b's 3-sequence request
    fits b's share of 4, a second one does not while a floods (b keeps its headroom, not more)."""
    said = run([["fill", "a", 0.0], ["admit", "b", 1.0, 3], ["admit", "b", 1.0, 3], ["held", "b"]])
    assert said == [CAPACITY, True, False, 3]


def test_the_gates_key_takes_no_part_in_the_shares() -> None:
    """The gate asks one question at a time, in a deploy: it is admitted as it comes, and while it
    was active lately no slot is kept free for it (the fleet's saturation e2e saw a user's key held
    one slot short of the engine for a gate that had long finished)."""
    said = run([["admit", "gate", 0.0], ["release", "gate"], ["fill", "a", 1.0], ["admit", "gate", 2.0]],
               unshared=["gate"])  # fmt: skip
    assert said == [True, None, CAPACITY, True]


@pytest.mark.parametrize("config", [{"fair_share": False}, {"capacity": 0}])
def test_without_a_share_or_a_capacity_every_request_is_admitted(config: dict[str, Any]) -> None:
    assert run([["admit", "a", 0.0]] * (3 * CAPACITY), **config) == [True] * (3 * CAPACITY)


# Several front pods (Kubernetes): this pod's part is 7 of the stack's 14 (two serving pods of 7
# client sequences, two front pods), so two keys are each sure of 3 here and of 7 in the stack.
PART, STACK = 7, 14


def b_holds_3_here_and_1_elsewhere() -> list[list[Any]]:
    """Key b's streams as the Service spread them: 3 on this front pod (its share of this pod's part),
    1 on the other."""
    return [*[["admit", "b", 0.0]] * 3, ["elsewhere", "b", 0.0, 1]]


def test_a_flood_beyond_the_stacks_share_leaves_the_room_the_stacks_share_gives_another_key() -> None:
    """Key a floods both front pods (it holds 4 on the other). On one pod key b holds 3 of its
    stack-wide 7: the pod keeps the free slot for b, and b's fourth stream takes it at once. With
    one front's share alone (no ``stack``), a took that slot and b's fourth waited for a stream to end."""
    steps = [*b_holds_3_here_and_1_elsewhere(), ["elsewhere", "a", 0.0, 4], ["fill", "a", 1.0],
             ["admit", "b", 1.0], ["held", "a"], ["held", "b"]]  # fmt: skip
    assert run(steps, capacity=PART, stack=STACK)[-4:] == [3, True, 3, 4]
    assert run(steps, capacity=PART)[-4:] == [4, False, 4, 3]


def test_within_the_stacks_share_a_key_takes_a_free_slot_first_come() -> None:
    """Key a holds nothing elsewhere, so its fourth slot here is within its stack-wide 7: it takes the
    pod's free slot before b asks (first come), as with one front, and b's fourth waits."""
    steps = [*b_holds_3_here_and_1_elsewhere(), ["fill", "a", 1.0], ["admit", "b", 1.0]]
    assert run(steps, capacity=PART, stack=STACK)[-2:] == [4, False]


def test_a_key_holding_its_stacks_share_elsewhere_is_kept_no_more_room_here() -> None:
    """Key b holds 3 here and 4 on the other pod: its stack-wide 7 is used, so the flood is kept
    from no slot beyond this pod's own share of b (the rule of one front)."""
    steps = [*[["admit", "b", 0.0]] * 3, ["elsewhere", "b", 0.0, 4], ["elsewhere", "a", 0.0, 4],
             ["fill", "a", 1.0]]  # fmt: skip
    assert run(steps, capacity=PART, stack=STACK)[-1] == 4


def test_the_room_kept_for_a_key_on_one_pod_is_at_most_its_recent_peak_there() -> None:
    """Key b held 1 here lately and holds nothing now, 1 elsewhere: the flood beyond the stack's share
    leaves b one slot here (its peak), not the 6 its stack-wide share has left."""
    steps = [
        *used_once("b", 1, 0.0),
        ["elsewhere", "b", 0.0, 1],
        ["elsewhere", "a", 0.0, 7],
        ["fill", "a", 1.0],
    ]
    assert run(steps, capacity=PART, stack=STACK)[-1] == PART - 1
