"""A Kubernetes front's meter routes each request to a serving pod itself (issue 49: the flood's
figure on the cluster), on the real nginx with three simulators: two are the pods the front pod's
``routes`` lister saw (the routes file, components/host/k8s_targets.py ``routes``), the third stands
for the serving Service, where anything the meter did not route goes (meter_pods.lua)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import components.host.k8s_targets as lister
from components.config import build_stack_config
from components.host.k8s_targets import routes
from tests.engine import free_port
from tests.front_rig import SERVED
from tests.metered_front import MeteredFront, metered_front, run_in_nginx_lua

KEY = "sk-alice-1403f1510d19d5295321"
SEQS = 4
"""Each simulator's ``--max-num-seqs``: the meter's slots per pod."""


def ask(front: MeteredFront, lead: str, max_tokens: int = 4) -> httpx.Response:
    return httpx.post(
        f"{front.base}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": SERVED, "max_tokens": max_tokens, "messages": [{"role": "user", "content": lead}]},
        timeout=60,
    )


def engine_metric(engine: str, name: str) -> float:
    text = httpx.get(f"{engine}/metrics", timeout=5).text
    return sum(float(v) for v in re.findall(rf"^vllm:{name}(?:\{{[^}}]*\}})? (\S+)", text, re.M))


def served(front: MeteredFront) -> list[float]:
    """Requests each simulator answered (pod-1, pod-2, the Service's), by its own metrics."""
    return [engine_metric(engine, "request_success_total") for engine in front.engines]


def pods(front: MeteredFront) -> dict[str, str]:
    return {
        "pod-1": front.engines[0].removeprefix("http://"),
        "pod-2": front.engines[1].removeprefix("http://"),
    }


@pytest.fixture(scope="module")
def front() -> Iterator[MeteredFront]:
    config = build_stack_config({"hardware": "local"})
    sim_env = {"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.05"}
    with metered_front(
        config, {"alice": KEY}, replicas=3, service=3, max_num_seqs=SEQS, sim_env=sim_env
    ) as running:
        yield running


def test_requests_go_to_the_pods_the_lister_saw_and_never_to_the_service(front: MeteredFront) -> None:
    front.set_pods(pods(front))
    before = served(front)
    for conversation in range(12):
        assert ask(front, f"conversation {conversation}: what is 13 x 17?").status_code == 200
    gained = [after - was for after, was in zip(served(front), before, strict=True)]
    assert gained[2] == 0 and gained[0] + gained[1] == 12 and min(gained[:2]) >= 1, gained


def streaming(
    front: MeteredFront, leads: list[str], tokens: int, after: float
) -> tuple[list, list, list[int]]:
    """One stream of ``tokens`` per lead at once; ``after`` seconds in, each simulator's requests
    running and waiting (pod-1, pod-2, the Service's); then, once all ended, their statuses."""
    answers: list[int] = []
    threads = [
        threading.Thread(target=lambda lead=lead: answers.append(ask(front, lead, tokens).status_code))
        for lead in leads
    ]
    for thread in threads:
        thread.start()
    time.sleep(after)
    running = [engine_metric(engine, "num_requests_running") for engine in front.engines]
    waiting = [engine_metric(engine, "num_requests_waiting") for engine in front.engines]
    for thread in threads:
        thread.join(timeout=60)
    return running, waiting, answers


def test_one_conversations_burst_fills_each_pod_to_its_seqs_and_no_more(front: MeteredFront) -> None:
    """Eight long streams of one conversation (one affinity key): the bound alone would put six on its
    pod, more than the pod runs; the front's room puts four on each, what each pod runs at once."""
    front.set_pods(pods(front))
    running, waiting, _ = streaming(front, ["one conversation"] * (2 * SEQS), 60, after=1.5)
    assert running == [SEQS, SEQS, 0] and waiting == [0, 0, 0], (running, waiting)


def test_the_slots_are_the_ready_pods_not_the_configured_replicas(front: MeteredFront) -> None:
    """One pod Ready of the three configured (a roll, a pod failing its gate): the meter shares that
    pod's SEQS slots, so the streams past them wait at the front, in the fair share's queue, and none
    waits inside the engine, where another key's request would wait behind it."""
    front.set_pods({"pod-1": pods(front)["pod-1"]})
    leads = [f"ready pods {i}" for i in range(2 * SEQS)]
    running, waiting, answers = streaming(front, leads, 40, after=1.0)
    assert running == [SEQS, 0, 0] and waiting == [0, 0, 0], (running, waiting)
    assert answers == [200] * (2 * SEQS), answers


def test_a_stale_routes_file_sends_everything_to_the_service(front: MeteredFront) -> None:
    """The lister stopped (its file is older than meter_pods.lua's STALE_SECONDS): the Service routes."""
    front.set_pods(pods(front), age=60)
    before = served(front)
    for conversation in range(4):
        assert ask(front, f"stale {conversation}").status_code == 200
    gained = [after - was for after, was in zip(served(front), before, strict=True)]
    assert gained == [0, 0, 4], gained


def test_a_pod_that_refuses_connections_is_retried_on_another(front: MeteredFront) -> None:
    gone = f"127.0.0.1:{free_port()}"  # nothing listens: a pod that went away since the last list
    front.set_pods({"pod-0": gone, "pod-1": pods(front)["pod-1"]})
    before = served(front)
    answers = [ask(front, f"retried {conversation}") for conversation in range(8)]
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers if a.status_code != 200]
    gained = [after - was for after, was in zip(served(front), before, strict=True)]
    assert gained == [8, 0, 0], gained


def pod(name: str, ip: str | None, *, ready: bool = True, deleting: bool = False) -> dict:
    meta: dict = {"name": name, **({"deletionTimestamp": "2026-12-06T04:00:00Z"} if deleting else {})}
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {"metadata": meta, "status": {**status, **({"podIP": ip} if ip else {})}}


def test_the_routes_file_lists_the_pods_the_service_would() -> None:
    """Ready, not being deleted, with an address (the Service's endpoints), sorted; IPv6 in brackets."""
    listed = [
        pod("glm53-vllm-b", "198.18.0.7"),
        pod("glm53-vllm-a", "198.18.0.6"),
        pod("glm53-vllm-starting", "198.18.0.8", ready=False),
        pod("glm53-vllm-leaving", "198.18.0.9", deleting=True),
        pod("glm53-vllm-pending", None),
        pod("glm53-vllm-v6", "fd00::7"),
    ]
    assert routes(listed, 8000, 1765000000.5).splitlines() == [
        "written 1765000000.500",
        "glm53-vllm-a 198.18.0.6:8000",
        "glm53-vllm-b 198.18.0.7:8000",
        "glm53-vllm-v6 [fd00::7]:8000",
    ]


def test_the_lister_as_its_containers_first_process_stops_at_sigterm(tmp_path: Path) -> None:
    """A container's first process ignores SIGTERM unless it handles it: the front pod deleted under
    load waited its whole 40 s for the `routes` lister (the cluster run, 2026-12-06). Here it is
    PID 1 of a PID namespace of its own, as in its container."""
    argv = ["unshare", "--pid", "--fork", sys.executable, lister.__file__, "--routes", "ns", "app=x", "8000",
            str(tmp_path / "pods"), "0.2"]  # fmt: skip
    unshared = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 10
        children: list[str] = []
        while not children and time.monotonic() < deadline:
            time.sleep(0.1)
            children = Path(f"/proc/{unshared.pid}/task/{unshared.pid}/children").read_text().split()
        assert children, "the lister did not start"
        time.sleep(0.5)  # it lists (and fails: no API server here), then sleeps
        first = int(children[0])
        [ns_pids] = [line.split()[1:] for line in Path(f"/proc/{first}/status").read_text().splitlines()
                     if line.startswith("NSpid:")]  # fmt: skip
        assert ns_pids[-1] == "1", ns_pids  # its namespace's first process
        os.kill(first, signal.SIGTERM)
        assert unshared.wait(timeout=5) == 0
    finally:
        unshared.kill()


FORGET_DRIVER = """
local cjson = require("cjson")
local replicas = require("meter_replicas")
local input = cjson.decode(io.open(IN):read("*a"))
local data = input.store
local store = table_dict(data)
local said = {}
for _, step in ipairs(input.steps) do
  if step.set then
    data[step.set] = step.value
  else
    replicas.forget_gone(store, step.names, step.now)
    local keys = {}
    for key in pairs(data) do
      if not key:find("^gone:") then keys[#keys + 1] = key end
    end
    table.sort(keys)
    said[#said + 1] = keys
  end
end
reply(said)
"""


def test_a_pod_gone_from_the_routes_file_is_forgotten_after_a_while_once_nothing_runs_on_it() -> None:
    """Left alone last stop: each roll left the old pods' series in every front until it restarted.
    Two pods leave the file at 0 s; at 600 s the idle one's gauge and counters go, the busy one's
    stay until its request ends; a pod back in the file before then keeps its counts (a failed gate)
    and starts its time again when it leaves."""
    pod_keys = lambda pod, flying: {  # noqa: E731
        f"inflight:{pod}": flying, f"routed:{pod}:key": 5, f"routed:{pod}:none": 2,
        f"routed_pid:4242:{pod}": flying,
    }  # fmt: skip
    store = {**pod_keys("old-a", 0), **pod_keys("old-b", 1), **pod_keys("back-c", 0), "prompt:alice": 9}
    steps = [
        {"names": ["new-d"], "now": 0},
        {"names": ["new-d"], "now": 599},
        {"names": ["new-d", "back-c"], "now": 300},
        {"names": ["new-d"], "now": 600},
        {"set": "inflight:old-b", "value": 0},
        {"names": ["new-d"], "now": 610},
        {"names": ["new-d"], "now": 1199},
        {"names": ["new-d"], "now": 1200},
    ]
    said = run_in_nginx_lua(["meter_route", "meter_pods", "meter_peers", "meter_replicas"], FORGET_DRIVER,
                            {"store": store, "steps": steps})  # fmt: skip
    assert isinstance(said, list)
    everything = sorted(store)
    assert said[0] == said[1] == said[2] == everything  # nothing forgotten before 600 s
    assert said[3] == sorted(set(everything) - set(pod_keys("old-a", 0)))  # old-b still runs one
    assert said[4] == sorted([*pod_keys("back-c", 0), "prompt:alice"])  # old-b idle and 610 s gone
    assert said[5] == said[4]  # back-c left the file again at 600 s: its 600 s start there
    assert said[6] == ["prompt:alice"]  # and end at 1,200 s; the keys' own counters are never touched


ROOM_DRIVER = """
local cjson = require("cjson")
local replicas = require("meter_replicas")
local input = cjson.decode(io.open(IN):read("*a"))
local said = {}
for _, case in ipairs(input) do
  local slots, fronts, pods = case[1], case[2], case[3]
  local rooms = {}
  for place = 0, fronts - 1 do
    local row = {}
    for index = 0, pods - 1 do row[#row + 1] = replicas.room(slots, fronts, place, index) end
    rooms[#rooms + 1] = row
  end
  said[#said + 1] = rooms
end
reply(said)
"""


def test_the_front_pods_split_each_serving_pods_slots_exactly() -> None:
    """Each front pod chooses alone, so its part of every serving pod must be fixed beforehand: the
    parts of one serving pod add up to its slots, never one more (the flood on the cluster, with 7
    slots per pod and two fronts each taking the rounded-up half, put 8 on one pod and B's request
    waited inside vLLM), and each front's parts of all the pods are its even share of the whole,
    within one."""
    cases = [
        [slots, fronts, pods] for slots in range(1, 34) for fronts in (1, 2, 3, 4) for pods in (1, 2, 3, 5)
    ]
    said = run_in_nginx_lua(
        ["meter_route", "meter_pods", "meter_peers", "meter_replicas"], ROOM_DRIVER, cases
    )
    assert isinstance(said, list) and len(said) == len(cases)
    for (slots, fronts, pods), rooms in zip(cases, said, strict=True):
        assert [sum(row[index] for row in rooms) for index in range(pods)] == [slots] * pods, (
            slots,
            fronts,
            rooms,
        )
        totals = [sum(row) for row in rooms]
        assert max(totals) - min(totals) <= 1, (slots, fronts, pods, rooms)
        if slots * pods % fronts == 0:  # an even split: every front the same
            assert set(totals) == {slots * pods // fronts}, (slots, fronts, pods, rooms)


PARSE_DRIVER = """
local cjson = require("cjson")
local serving_pods = require("meter_pods")
local written, names, address = serving_pods.parse(cjson.decode(io.open(IN):read("*a")))
reply({ written = written, names = names, address = address })
"""


def test_the_pods_are_read_in_name_order_whatever_order_the_file_gives() -> None:
    """Each front's part of a pod is told by the pod's place among the names (the split above): a
    file in another order must not give two fronts two different places for one pod."""
    text = "written 1700000000.5\nglm53-vllm-b 10.0.0.2:8000\nglm53-vllm-a 10.0.0.1:8000\n"
    said = run_in_nginx_lua(["meter_pods"], PARSE_DRIVER, text)
    assert said == {
        "written": 1700000000.5,
        "names": ["glm53-vllm-a", "glm53-vllm-b"],
        "address": {"glm53-vllm-a": "10.0.0.1:8000", "glm53-vllm-b": "10.0.0.2:8000"},
    }
