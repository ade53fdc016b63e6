"""Prefix-affinity routing at the front (components/host/meter/meter_route.lua, docs/scaling.md
"Prefix affinity"): which replica a conversation goes to.

The choice itself runs in the real nginx's LuaJIT (``run_in_nginx_lua``); then the front as a stack
runs it, on loopback: the real nginx with the meter, three simulators as replicas, the rotation's own
script (templates/rotation.sh) deciding which are in. Which replica served a request is read from
that replica's own ``vllm:request_success_total``, never from the front.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterator

import httpx
import pytest

from components.config import ConfigError, build_stack_config
from tests.front_rig import SERVED
from tests.metered_front import MeteredFront, metered_front, run_in_nginx_lua

KEY = "sk-alice-1403f1510d19d5295321"
NAMES = ["replica1", "replica2", "replica3"]

DRIVER = """
local cjson = require("cjson")
local route = require("meter_route")
local input = cjson.decode(io.open(IN):read("*a"))
local said = {}
for i, case in ipairs(input) do
  if case.op == "lead" then
    said[i] = route.lead(case.text) or cjson.null
  elseif case.op == "key" then
    said[i] = route.key(case.fields, case.text) or cjson.null
  elseif case.op == "choose" then
    said[i] = route.choose(case.names, case.key ~= "" and case.key or nil,
      function(name) return case.loads[name] end, case.factor) or cjson.null
  end
end
reply(said)
"""


def lua(cases: list[dict]) -> list:
    answer = run_in_nginx_lua(["meter_route"], DRIVER, cases)
    assert isinstance(answer, list)
    return answer


def chat(conversation: int, turns: int, system: str = "You are a careful coding agent.") -> dict:
    """A conversation's body at turn ``turns`` (0: its first), as a client serializes it each time."""
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Fix the failing test in repository {conversation}."},
    ]
    for turn in range(turns):
        messages += [
            {"role": "assistant", "content": f"Step {turn}: reading the file."},
            {"role": "user", "content": f"Tool output {turn}: " + "x" * 200},
        ]
    return {"model": SERVED, "messages": messages, "max_tokens": 4}


@pytest.mark.parametrize("factor", [1, 0.5, 5, float("nan")])
def test_a_load_factor_that_bounds_nothing_or_everything_is_refused_naming_the_key(factor: float) -> None:
    with pytest.raises(ConfigError, match=r"glm:front.routing.loadFactor.*Fix: a factor above 1"):
        build_stack_config({"hardware": "local", "front": {"routing": {"loadFactor": factor}}})


def test_prefix_affinity_asked_for_without_the_meter_is_refused_and_left_unset_is_round_robin() -> None:
    off = {"usageMeter": {"enabled": False}}
    with pytest.raises(
        ConfigError, match=r"policy=prefix-affinity needs the usage meter.*usageMeter.enabled is false"
    ):
        build_stack_config({"hardware": "local", "front": {**off, "routing": {"policy": "prefix-affinity"}}})
    assert build_stack_config({"hardware": "local", "front": off}).front.routing.policy == "prefix-affinity"


def test_the_lead_is_the_system_prompt_and_first_user_message_whatever_follows() -> None:
    first, later = json.dumps(chat(1, 0)), json.dumps(chat(1, 5))
    other = json.dumps(chat(2, 5))
    tools_first = json.dumps({"tools": [{"type": "function"}], **chat(1, 5)})
    expected = json.dumps(chat(1, 0)["messages"])[:-1]  # through the first user message: system + user
    leads = lua([{"op": "lead", "text": text} for text in (first, later, other, tools_first)])
    assert leads[0] == expected and leads[1] == expected and leads[3] == expected, leads
    assert leads[2] != expected and "repository 2" in leads[2]


def test_a_lead_is_cut_at_its_bound_and_a_body_cut_short_still_gives_one() -> None:
    long_system = json.dumps(chat(1, 2, system="s" * 100_000))
    cut = json.dumps(chat(1, 2))[:60]  # the first slice of a body spilled to a file
    leads = lua(
        [{"op": "lead", "text": long_system}, {"op": "lead", "text": cut}, {"op": "lead", "text": "[1]"}]
    )
    assert len(leads[0]) == 64 * 1024 and leads[0].startswith('[{"role": "system"'), len(leads[0])
    assert leads[1] == cut[cut.index("[") :]
    assert leads[2] is None


def test_prompt_cache_key_wins_over_the_content() -> None:
    text = json.dumps(chat(1, 0))
    keys = lua(
        [
            {"op": "key", "fields": {"prompt_cache_key": "session-7"}, "text": text},
            {"op": "key", "fields": {"prompt_cache_key": ""}, "text": text},
            {"op": "key", "fields": {}, "text": "{}"},
        ]
    )
    assert keys[0] == "key:session-7"
    assert keys[1] == "lead:" + json.dumps(chat(1, 0)["messages"])[:-1]
    assert keys[2] is None


def test_a_replica_leaving_moves_only_its_own_conversations() -> None:
    keys = [f"key:conversation-{i}" for i in range(300)]
    idle = {name: 0 for name in NAMES}
    cases = [{"op": "choose", "names": NAMES, "key": k, "loads": idle, "factor": 1.25} for k in keys]
    cases += [
        {"op": "choose", "names": ["replica1", "replica3"], "key": k, "loads": idle, "factor": 1.25}
        for k in keys
    ]
    cases += [
        {"op": "choose", "names": [*NAMES, "replica4"], "key": k, "loads": idle, "factor": 1.25} for k in keys
    ]
    chosen = lua(cases)
    three, two, four = chosen[:300], chosen[300:600], chosen[600:]
    for before, after in zip(three, two, strict=True):
        assert after == before or before == "replica2", (before, after)
    # Spread: each of three replicas gets about a third (rendezvous over md5); a new one takes about a quarter.
    assert all(70 <= three.count(name) <= 130 for name in NAMES), {n: three.count(n) for n in NAMES}
    moved = [(b, a) for b, a in zip(three, four, strict=True) if a != b]
    assert all(a == "replica4" for _, a in moved) and 45 <= len(moved) <= 105, len(moved)


def test_a_replica_at_its_bound_sends_the_request_to_the_next_in_the_keys_order() -> None:
    idle = {name: 0 for name in NAMES}
    (first,) = lua([{"op": "choose", "names": NAMES, "key": "key:k", "loads": idle, "factor": 1.25}])
    # 8 in flight, 3 replicas: the bound is ceil(1.25 x 9 / 3) = 4.
    others = [n for n in NAMES if n != first]
    at_bound = {first: 4, others[0]: 2, others[1]: 2}
    under = {first: 3, others[0]: 3, others[1]: 2}
    all_full = {first: 4, others[0]: 4, others[1]: 4}  # 12: the bound is ceil(1.25 x 13 / 3) = 6
    chosen = lua(
        [
            {"op": "choose", "names": NAMES, "key": "key:k", "loads": at_bound, "factor": 1.25},
            {"op": "choose", "names": NAMES, "key": "key:k", "loads": under, "factor": 1.25},
            {"op": "choose", "names": NAMES, "key": "key:k", "loads": all_full, "factor": 1.25},
            {"op": "choose", "names": NAMES, "key": "", "loads": under, "factor": 1.25},
            {"op": "choose", "names": [], "key": "key:k", "loads": {}, "factor": 1.25},
        ]
    )
    assert chosen[0] in others and chosen[1] == first and chosen[2] == first
    assert chosen[3] == others[1]  # no key: the least loaded
    assert chosen[4] is None


# ---- the front, with nginx and three simulators ------------------------------------------------


def served(front: MeteredFront) -> list[float]:
    """How many requests each replica (simulator) has answered, by its own metrics."""
    counts = []
    for engine in front.engines:
        text = httpx.get(f"{engine}/metrics", timeout=5).text
        counts.append(
            sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)", text, re.M))
        )
    return counts


def where(front: MeteredFront, body: dict) -> int:
    """The replica (1-based) that answered ``body``, sent alone through the front."""
    before = served(front)
    resp = httpx.post(
        f"{front.base}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, json=body, timeout=30
    )
    assert resp.status_code == 200, resp.text
    changed = [i + 1 for i, (a, b) in enumerate(zip(served(front), before, strict=True)) if a != b]
    assert len(changed) == 1, changed
    return changed[0]


@pytest.fixture(scope="module")
def front() -> Iterator[MeteredFront]:
    config = build_stack_config({"hardware": "local"})
    sim_env = {"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.05"}
    with metered_front(
        config, {"alice": KEY}, replicas=3, rotation=True, max_num_seqs=32, sim_env=sim_env
    ) as running:
        yield running


def test_every_turn_of_a_conversation_goes_where_its_first_went(front: MeteredFront) -> None:
    homes = {}
    for conversation in range(9):
        turns = {where(front, chat(conversation, turn)) for turn in range(4)}
        assert len(turns) == 1, (conversation, turns)
        homes[conversation] = turns.pop()
    assert len(set(homes.values())) >= 2, homes  # conversations spread over the replicas
    # The client's prompt_cache_key names the conversation, whatever the content.
    keyed = {where(front, {**chat(c, 1), "prompt_cache_key": "agent-session-42"}) for c in range(6)}
    assert len(keyed) == 1, keyed


def test_a_replica_out_of_rotation_gets_nothing_and_the_others_keep_their_conversations(
    front: MeteredFront,
) -> None:
    homes = {c: where(front, chat(100 + c, 0)) for c in range(12)}
    assert 2 in homes.values(), homes
    front.rotate("drain", "replica2", '{"error":{"message":"rolling"}}', "0")
    try:
        before = served(front)[1]
        for c, home in homes.items():
            now = where(front, chat(100 + c, 2))
            assert now != 2
            if home != 2:
                assert now == home, (c, home, now)  # only replica2's conversations moved
        assert served(front)[1] == before
    finally:
        front.rotate("admit", "replica2", front.engines[1].removeprefix("http://"))
    assert {c: where(front, chat(100 + c, 3)) for c in homes} == homes  # back where they were


def test_one_conversations_burst_is_spread_within_the_load_bound(front: MeteredFront) -> None:
    """12 requests of one conversation at once, each 1 s long: the first replica takes its bounded
    share, the rest go on in the key's order; none takes more than 1.25 x the mean + 1."""
    body = {**chat(7, 1), "max_tokens": 20}
    before = served(front)
    barrier = threading.Barrier(12)
    failures: list[str] = []

    def one() -> None:
        barrier.wait()
        resp = httpx.post(
            f"{front.base}/v1/chat/completions",
            headers={"Authorization": f"Bearer {KEY}"},
            json=body,
            timeout=60,
        )
        if resp.status_code != 200:
            failures.append(resp.text)

    threads = [threading.Thread(target=one) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    share = [a - b for a, b in zip(served(front), before, strict=True)]
    assert sum(share) == 12, share
    assert max(share) <= math.ceil(1.25 * 12 / 3), share  # ceil(1.25 x (11 + 1) / 3) = 5 at most
    assert min(share) >= 1, share


def test_the_meter_counts_each_replicas_requests_and_gives_every_one_back(front: MeteredFront) -> None:
    """After the tests above (bursts, a refused connect, a drain): the front's count of each replica's
    requests equals what the replica itself answered, and nothing is left in flight."""
    page = front.meter_metrics()
    routed = {
        int(m[1]): float(m[2])
        for m in re.finditer(r'^glm_front_routed_total\{replica="replica(\d)",by="key"\} (\S+)$', page, re.M)
    }
    assert routed == dict(enumerate(served(front), 1)), (routed, page)
    in_flight = re.findall(r'^glm_front_replica_in_flight\{replica="[^"]+"\} (\S+)$', page, re.M)
    assert in_flight and all(float(v) == 0 for v in in_flight), page


def test_a_replica_refusing_connections_hands_its_conversations_to_a_backup(front: MeteredFront) -> None:
    """A replica in rotation whose port is closed (a crash between two probes): the conversations
    keyed to it are still answered, by the other replicas (its upstream's backups)."""
    front.rotate("admit", "replica4", "127.0.0.1:9")
    try:
        names = (front.directory / "rotation" / "routes.map").read_text()
        assert "replica4" in names, names
        before = sum(served(front))
        for c in range(12):
            resp = httpx.post(
                f"{front.base}/v1/chat/completions",
                headers={"Authorization": f"Bearer {KEY}"},
                json=chat(200 + c, 0),
                timeout=30,
            )
            assert resp.status_code == 200, resp.text
        assert sum(served(front)) == before + 12
        log = (front.directory / "nginx.log").read_text()
        assert "127.0.0.1:9" in log  # some were keyed to replica4 and went on past its refusal
    finally:
        front.rotate("forget", "replica4", "0")
