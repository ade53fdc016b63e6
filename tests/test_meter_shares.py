"""The usage meter's fair share as pure decisions (images/usage-meter/meter_shares.py): which request
takes a slot and which gets the 429, for a lone key, a key arriving beside a flood, two floods and
weights. Times are the ``now`` each call is given; nothing sleeps. The meter with nginx and the
simulator: tests/test_usage_meter.py; the latency it buys: benchmarks/fair_share.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "images" / "usage-meter"))

from meter_shares import ACTIVE_SECONDS, Meter  # the meter's folder is no package

CAPACITY = 8
"""The benchmark's engine (``--max-num-seqs 8``, one replica): two keys of weight 1 have 4 each."""


def meter(table: str = f"capacity={CAPACITY} a=1 b=1") -> Meter:
    shares = Meter()
    shares.configure(table)
    return shares


def fill(shares: Meter, name: str, now: float) -> int:
    """``name`` asks for slots until the first 429; how many it got."""
    got = 0
    while shares.admit(name, now):
        got += 1
        assert got <= 10 * CAPACITY, "never refused"
    return got


def used_once(shares: Meter, name: str, at_once: int, now: float) -> None:
    """``name`` held ``at_once`` slots together at ``now``, and every answer has ended since."""
    for _ in range(at_once):
        assert shares.admit(name, now)
    for _ in range(at_once):
        shares.release(name)


def churn(shares: Meter, names: list[str], now: float) -> None:
    """Floods: round after round, one answer of each key ends and the key asks again until refused."""
    for _ in range(3 * CAPACITY):
        for name in names:
            if name in shares.keys and shares.keys[name].in_flight:
                shares.release(name)
            fill(shares, name, now)


def held(shares: Meter, *names: str) -> tuple[int, ...]:
    return tuple(shares.keys[name].in_flight for name in names)


def in_flight(shares: Meter) -> int:
    return sum(usage.in_flight for usage in shares.keys.values())


def test_a_lone_key_gets_every_slot() -> None:
    """b is in the table but has sent nothing: no slot is held back for it."""
    shares = meter()
    assert fill(shares, "a", now=0.0) == CAPACITY
    assert shares.keys["a"].refused == 1


def test_a_key_idle_for_longer_than_the_active_window_keeps_no_slot() -> None:
    shares = meter()
    used_once(shares, "b", 3, now=0.0)
    assert fill(shares, "a", now=ACTIVE_SECONDS + 1) == CAPACITY


def test_a_recently_active_key_keeps_one_free_slot_and_finds_it_when_it_asks() -> None:
    """b sent one request a moment ago: a's flood takes every slot but one, and b's next request
    takes that one at once (in flight stays within the engine's slots: nothing queues in vLLM)."""
    shares = meter()
    used_once(shares, "b", 1, now=0.0)
    assert fill(shares, "a", now=1.0) == CAPACITY - 1
    assert shares.admit("b", now=2.0)
    assert in_flight(shares) == CAPACITY


def test_the_slots_a_key_used_at_once_lately_stay_free_for_it() -> None:
    """b held 3 streams together: a's flood leaves 3 free, and all 3 of b's next find a slot."""
    shares = meter()
    used_once(shares, "b", 3, now=0.0)
    assert fill(shares, "a", now=1.0) == CAPACITY - 3
    assert all(shares.admit("b", now=2.0) for _ in range(3))
    assert in_flight(shares) == CAPACITY


def test_a_key_holding_its_recent_peak_can_double_it_without_waiting() -> None:
    """b holds 2 streams (its most lately): a's flood leaves 2 more free, so b's demand may double
    before any of a's streams has to end (the run that kept one slot, not b's peak, saw b wait)."""
    shares = meter()
    assert shares.admit("b", now=0.0) and shares.admit("b", now=0.0)
    assert fill(shares, "a", now=1.0) == CAPACITY - 4
    assert shares.admit("b", now=2.0) and shares.admit("b", now=2.0)
    assert in_flight(shares) == CAPACITY


def test_a_key_using_its_free_slot_gets_the_next_one_the_flood_gives_back() -> None:
    """b takes the slot kept for it; a's streams then end one by one, and a gets none back until
    one more is free for b: a slot b will ask for is free before it asks."""
    shares = meter()
    used_once(shares, "b", 1, now=0.0)
    fill(shares, "a", now=1.0)
    assert shares.admit("b", now=2.0)
    shares.release("a")
    assert not shares.admit("a", now=3.0)
    assert shares.admit("b", now=3.0)
    assert in_flight(shares) == CAPACITY


def test_a_key_arriving_beside_a_lone_flood_is_admitted_and_the_flood_gives_way() -> None:
    """The engine cannot preempt a stream: b's first request waits in vLLM for a's first stream to
    end. a gets no slot back until b holds its own and one more is free for it; once b floods too,
    a shrinks to its share as its streams end."""
    shares = meter()
    assert fill(shares, "a", now=0.0) == CAPACITY
    assert shares.admit("b", now=1.0)  # within b's share: admitted, and waits in the engine
    assert shares.share("a", now=1.0) == shares.share("b", now=1.0) == CAPACITY // 2
    churn(shares, ["a"], now=2.0)
    assert held(shares, "a", "b") == (CAPACITY - 2, 1)
    churn(shares, ["a", "b"], now=3.0)
    assert held(shares, "a", "b") == (CAPACITY // 2, CAPACITY // 2)


def test_two_floods_each_get_their_share() -> None:
    shares = meter()
    churn(shares, ["a", "b"], now=0.0)
    assert held(shares, "a", "b") == (CAPACITY // 2, CAPACITY // 2)


def test_a_key_within_its_share_is_never_refused_even_when_the_engine_is_full() -> None:
    """The share is a guarantee: b's request waits in the engine rather than getting a 429."""
    shares = meter()
    fill(shares, "a", now=0.0)
    assert all(shares.admit("b", now=1.0) for _ in range(CAPACITY // 2))
    assert not shares.admit("b", now=1.0)


def test_the_headroom_kept_for_a_key_never_exceeds_its_share() -> None:
    shares = meter()
    used_once(shares, "b", CAPACITY, now=0.0)  # b alone held every slot
    assert fill(shares, "a", now=1.0) == CAPACITY // 2


def test_weights_split_the_slots_among_the_active_keys() -> None:
    shares = meter(f"capacity={CAPACITY} a=1 b=3 c=4")
    assert shares.share("b", now=0.0) == CAPACITY  # nobody else is active
    churn(shares, ["a", "b"], now=0.0)
    assert (shares.share("a", now=0.0), shares.share("b", now=0.0)) == (2, 6)
    assert shares.share("c", now=0.0) == 4  # were c to ask now: 4 of the weights 1 + 3 + 4
    assert held(shares, "a", "b") == (2, 6)


def test_a_key_holding_a_long_stream_stays_active_past_the_window() -> None:
    shares = meter()
    assert shares.admit("b", now=0.0)
    later = 2 * ACTIVE_SECONDS
    assert shares.active("b", later)
    assert fill(shares, "a", now=later) == CAPACITY - 2  # b's stream, and one more free for b


@pytest.mark.parametrize("table", [f"capacity={CAPACITY} a=1 b=1 off", "capacity=0 a=1 b=1"])
def test_without_a_share_or_before_nginx_said_every_request_is_admitted(table: str) -> None:
    shares = meter(table)
    assert all(shares.admit("a", now=0.0) for _ in range(3 * CAPACITY))
    assert shares.keys["a"].refused == 0
