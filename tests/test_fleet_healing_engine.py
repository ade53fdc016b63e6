"""The fleet that heals itself, on two stand-in GPU hosts and the real engine (issue 23).

A two-host stack of the simulator, the probe at the issue's settings (every 5 s, K = 2, 2 s timeout,
scrape every 2 s), and a bounded load loop through the front that checks every answer:

1. one replica switched to wrong answers with the simulator's runtime fault switch: it leaves the
   front's rotation within interval x K + 2 s, no request begun after that gets a wrong answer,
   nothing fails, ``GlmModelAnswersWrong`` fires naming its host; healed, it comes back;
2. every replica wrong: each leaves; then clients get the JSON 503 ``no_replica_in_rotation`` naming
   the failing check, never a known-wrong answer; healed, they come back and answers resume;
3. saturated (more streams than ``--max-num-seqs``): the probe counts its runs as skipped, never
   failed, and ejects nothing.

Figures are printed; ``GLM_FLEET_REPORT=path`` also writes them as JSON.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from components.render.nginx_conf import STATUS_DIR
from tests.engine import PulumiProject, engine_missing
from tests.multihost import LoadLoop, init_stack, set_config, standin_fleet
from tests.standin_host import StandinHost, unavailable_reason

pytestmark = pytest.mark.skipif(
    engine_missing() is not None or unavailable_reason() is not None,
    reason=str(engine_missing() or unavailable_reason()),
)

API_KEY = "sk-fleet-3c1e9a77d02b44f1a5"
FRONT_PORT = 18490
INTERVAL, K, TIMEOUT, SCRAPE = 5, 2, 2, 2
EJECTION_TARGET = INTERVAL * K + 2
"""The issue's target from the fault to the replica's ejection."""
MAX_NUM_SEQS = 4
SATURATING_STREAMS = 3 * MAX_NUM_SEQS
SATURATION_SECONDS = 30.0


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[StandinHost]]:
    with standin_fleet(2, tmp_path_factory.mktemp("images"), lifetime_s=3600) as made:
        yield made


# ---- what the test reads and switches --------------------------------------------------------------


def in_namespace(host: StandinHost, url: str) -> Any:
    """GET ``url`` (JSON) from inside ``host``'s network namespace (Prometheus binds its loopback)."""
    code = "import sys, urllib.request\nprint(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
    argv = ["nsenter", f"--net=/var/run/netns/{host.name}", sys.executable, "-c", code, url]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    return json.loads(done.stdout)


class Prometheus:
    def __init__(self, host: StandinHost, url: str) -> None:
        self.host, self.url = host, url

    def query(self, promql: str) -> list[dict[str, Any]]:
        found = in_namespace(self.host, f"{self.url}/api/v1/query?query={urllib.parse.quote(promql)}")
        return list(found["data"]["result"])

    def firing(self, name: str) -> list[dict[str, str]]:
        alerts = in_namespace(self.host, f"{self.url}/api/v1/alerts")["data"]["alerts"]
        return [a["labels"] for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]


def switch_faults(host: StandinHost, container: str, faults: list[str]) -> None:
    """The simulator's runtime fault switch, from inside the replica's own container."""
    code = (
        "import json, sys, urllib.request\n"
        "req = urllib.request.Request('http://127.0.0.1:8000/sim/faults', method='PUT',\n"
        "    data=json.dumps({'faults': sys.argv[1:]}).encode())\n"
        "print(urllib.request.urlopen(req, timeout=5).read().decode())"
    )
    done = host.docker("exec", container, "python3", "-c", code, *faults, timeout=30)
    assert json.loads(done.stdout) == {"faults": sorted(faults)}, done.stdout + done.stderr


def rotation_states(front: StandinHost, container: str) -> dict[str, str]:
    """Each replica ``in`` or ``out`` as the front's running nginx has it: the status the rotation
    publishes once nginx has loaded the change (its ``.state`` file flips before the reload, and a
    request begun in between still reaches the replica). One read for every replica."""
    done = front.docker("exec", f"{container}-nginx", "cat", f"{STATUS_DIR}/rotation.prom", timeout=30)
    found = re.findall(r'^glm_rotation_in\{host="([^"]+)"\} (\S+)$', done.stdout, re.MULTILINE)
    return {host: "in" if value == "1" else "out" for host, value in found}


def wait_for(
    check: Callable[[], bool], limit: float, what: str, explain: Callable[[], str] = lambda: ""
) -> float:
    """Seconds until ``check()`` holds (polled every 0.2 s); AssertionError after ``limit``, with
    what ``explain()`` tells of the state then."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if check():
            return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {limit:g} s\n{explain()}")


def rotation_story(hosts: list[StandinHost], container: str) -> str:
    """Each replica's rotation state, and the last lines the front's request loop and the probe
    logged: why an ejection or a re-admission did not happen."""
    front = hosts[0]
    lines = [f"rotation states: {rotation_states(front, container)}"]
    for name in (f"{container}-nginx", f"{container}-semantic-probe"):
        done = front.docker("logs", "--tail", "40", name, timeout=30)
        lines += [f"--- docker logs {name} (last 40 lines) ---", done.stdout[-4000:], done.stderr[-4000:]]
    return "\n".join(lines)


def wait_for_rotation(
    hosts: list[StandinHost], container: str, replicas: list[str], state: str, what: str
) -> None:
    """Until every one of ``replicas`` is ``state`` in the front's loaded rotation (at most 60 s)."""
    front = hosts[0]
    wait_for(
        lambda: all(rotation_states(front, container).get(r) == state for r in replicas),
        60,
        what,
        lambda: rotation_story(hosts, container),
    )


def probe_healthy(prometheus: Prometheus, targets: int) -> bool:
    """Every target's last run passed every step (``targets``: the front path and each replica)."""
    success = prometheus.query("min by (host, path) (glm_semantic_probe_step_success)")
    return len(success) == targets and all(r["value"][1] == "1" for r in success)


def after(load: LoadLoop, moment: float, kind: str, until: float = float("inf")) -> list[str]:
    """What came back of the requests of ``kind`` begun after ``moment`` (and before ``until``)."""
    with load.lock:
        return [what for began, k, what in load.events if moment < began < until and k == kind]


def names_replica(labels: list[dict[str, str]], host: StandinHost) -> bool:
    """Whether an alert names the host's replica, asked directly."""
    return any(label.get("host") == host.name and label.get("path") == "replica" for label in labels)


def summary(load: LoadLoop, moment: float, until: float = float("inf")) -> dict[str, int]:
    with load.lock:
        later = [k for began, k, _ in load.events if moment < began < until]
    return {kind: later.count(kind) for kind in ("right", "wrong", "failed")}


# ---- the test ----------------------------------------------------------------------------------------


def test_a_wrong_replica_leaves_the_rotation_in_seconds_and_comes_back(
    hosts: list[StandinHost], tmp_path: Path
) -> None:
    project = PulumiProject.copy_of_repo(tmp_path / "glm")
    stack = "local"
    init_stack(project, stack, hosts, API_KEY, FRONT_PORT)
    container = f"glm53-multi-{stack}"
    set_config(
        project,
        stack,
        "glm:serving",
        {"maxNumSeqs": MAX_NUM_SEQS, "extraEnv": {"VLLM_SIM_RUNTIME_FAULTS": "yes"}},
    )
    for key, value in {
        "glm:semanticProbe.intervalSeconds": INTERVAL,
        "glm:semanticProbe.failuresBeforeAlert": K,
        "glm:semanticProbe.timeoutSeconds": TIMEOUT,
        "glm:monitoring.scrapeInterval": f"{SCRAPE}s",
    }.items():
        project.run("config", "set", "--path", key, str(value), "-s", stack)
    front, other = hosts
    figures: dict[str, Any] = {"settings": {"interval_s": INTERVAL, "K": K, "timeout_s": TIMEOUT}}
    try:
        project.run("up", "--yes", "--skip-preview", "-s", stack, label="up", timeout=1800)
        outputs = project.outputs(stack)
        prometheus = Prometheus(front, outputs["prometheusUrl"])
        wait_for(lambda: probe_healthy(prometheus, 3), 60, "the probe's first healthy runs")

        # 0. Idle: what the probe alone asks of each replica (benchmarks/semantic_probe_share.py).
        figures["probe_alone"] = probe_alone(prometheus, 4 * INTERVAL)
        print("the probe alone:", json.dumps(figures["probe_alone"]))
        assert all(v["chats_per_run"] > 0 for v in figures["probe_alone"].values()), figures

        # 1. One replica answers wrong.
        with LoadLoop(outputs["endpoint"], API_KEY) as load:
            time.sleep(3)
            fault = time.monotonic()
            switch_faults(other, container, ["wrong-answer"])
            wait_for_rotation(hosts, container, [other.name], "out", "ejection")
            ejected = time.monotonic()
            # The front path's alert may fire first (its runs met the wrong replica too); the test
            # waits for the one that names the replica.
            wait_for(lambda: names_replica(prometheus.firing("GlmModelAnswersWrong"), other), 60, "the alert")
            alerted = time.monotonic()
            labels = prometheus.firing("GlmModelAnswersWrong")
            time.sleep(INTERVAL)  # traffic on the remaining replica only
            switch_faults(other, container, [])
            healed = time.monotonic()
            wait_for_rotation(hosts, container, [other.name], "in", "re-admission")
            back = time.monotonic()
            time.sleep(3)
        one = {
            "fault_to_ejection_s": round(ejected - fault, 2),
            "fault_to_replica_alert_s": round(alerted - fault, 2),
            "ejection_target_s": EJECTION_TARGET,
            "heal_to_readmission_s": round(back - healed, 2),
            "wrong_before_ejection": len(after(load, fault, "wrong")) - len(after(load, ejected, "wrong")),
            "wrong_after_ejection": len(after(load, ejected, "wrong")),
            "load": {k: v for k, v in load.figures().items() if not k.startswith("first")},
            "first_failures": load.failures[:3],
            "alert_labels": labels,
        }
        figures["one_replica_wrong"] = one
        print("one replica wrong:", json.dumps(one))

        # 2. Every replica answers wrong.
        wait_for(lambda: probe_healthy(prometheus, 3), 60, "healthy again")
        with LoadLoop(outputs["endpoint"], API_KEY) as load:
            time.sleep(3)
            fault = time.monotonic()
            for host in hosts:
                switch_faults(host, container, ["wrong-answer"])
            wait_for_rotation(hosts, container, [h.name for h in hosts], "out", "all out")
            all_out = time.monotonic()
            time.sleep(INTERVAL)
            # The heal begins with the first switch: a replica healed first may be re-admitted
            # (and answer right) before the second is switched.
            healed = time.monotonic()
            for host in hosts:
                switch_faults(host, container, [])
            wait_for_rotation(hosts, container, [h.name for h in hosts], "in", "all in")
            back = time.monotonic()
            time.sleep(3)
        while_out = after(load, all_out, "failed", until=healed)
        every = {
            "fault_to_all_ejected_s": round(all_out - fault, 2),
            "heal_to_all_readmitted_s": round(back - healed, 2),
            "while_all_out": summary(load, all_out, until=healed),
            "wrong_after_all_ejected": len(after(load, all_out, "wrong")),
            "after_readmission": summary(load, back),
            "a_503_clients_got": while_out[0] if while_out else None,
        }
        figures["every_replica_wrong"] = every
        print("every replica wrong:", json.dumps(every))

        # 3. Saturated: more streams than --max-num-seqs on both replicas.
        wait_for(lambda: probe_healthy(prometheus, 3), 60, "healthy again")
        runs = 'sum by (host, path, result) (glm_semantic_probe_runs_total{path="replica"})'
        before = {tuple(r["metric"].values()): float(r["value"][1]) for r in prometheus.query(runs)}
        saturation = saturate(outputs["endpoint"])
        time.sleep(2 * SCRAPE)
        during = {
            "/".join(key): float(r["value"][1]) - before.get(key, 0.0)
            for r in prometheus.query(runs)
            for key in [tuple(r["metric"].values())]
        }
        loaded = rotation_states(front, container)
        states = {h.name: loaded.get(h.name, "missing") for h in hosts}
        figures["saturated"] = {"runs_during": during, "streams": saturation, "rotation": states}
        print("saturated:", json.dumps(figures["saturated"]))

        # The times to the ejection and to the replica's alert are figures (the target:
        # EJECTION_TARGET), printed above, not asserted: the wait_fors above bound them at 60 s.
        assert one["wrong_after_ejection"] == 0 and one["load"]["failed"] == 0, one
        assert every["wrong_after_all_ejected"] == 0, every
        assert every["while_all_out"]["right"] == 0 and every["while_all_out"]["failed"] > 0, every
        assert set(while_out) == {
            w for w in while_out if w.startswith("HTTP 503 no_replica_in_rotation: ")
        }, every
        assert "arithmetic failed" in every["a_503_clients_got"], every
        assert every["after_readmission"]["right"] > 0 and every["after_readmission"]["wrong"] == 0, every
        skipped = sum(v for k, v in during.items() if k.endswith("skipped"))
        failed = sum(v for k, v in during.items() if k.endswith("failed"))
        assert skipped > 0 and failed == 0, during
        assert states == {h.name: "in" for h in hosts}, states
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", stack, check=False, timeout=1800)
        print("fleet healing figures:", json.dumps(figures))
        if os.environ.get("GLM_FLEET_REPORT"):
            Path(os.environ["GLM_FLEET_REPORT"]).write_text(json.dumps(figures, indent=2))


def probe_alone(prometheus: Prometheus, seconds: float) -> dict[str, dict[str, float]]:
    """With no user traffic, for ``seconds``: per host, the chats each replica answered, the tokens it
    generated and the runs of its own direct probe; per direct run, the chats and tokens (the front
    path's run lands on one replica or the other, so a replica sees its own run plus a share)."""
    queries = {
        "chats": "sum by (host) (vllm:request_success_total)",
        "tokens": "sum by (host) (vllm:generation_tokens_total)",
        "runs": 'sum by (host) (glm_semantic_probe_runs_total{path="replica"})',
    }

    def read() -> dict[str, dict[str, float]]:
        values: dict[str, dict[str, float]] = {}
        for name, promql in queries.items():
            for r in prometheus.query(promql):
                values.setdefault(r["metric"]["host"], {})[name] = float(r["value"][1])
        return values

    before = read()
    time.sleep(seconds + 2 * SCRAPE)
    after_ = read()
    found = {}
    for host, now in after_.items():
        delta = {k: now[k] - before.get(host, {}).get(k, 0.0) for k in queries if k in now}
        runs = delta.get("runs") or 1.0
        found[host] = {
            **delta,
            "chats_per_run": round(delta.get("chats", 0.0) / runs, 2),
            "tokens_per_chat": round(delta.get("tokens", 0.0) / max(delta.get("chats", 0.0), 1.0), 1),
        }
    return found


def saturate(endpoint: str) -> dict[str, int]:
    """``SATURATING_STREAMS`` long streams at once, for ``SATURATION_SECONDS``: every replica runs
    ``--max-num-seqs`` with more waiting. Returns how the streams ended."""
    stop = time.monotonic() + SATURATION_SECONDS
    ended = {"done": 0, "failed": 0}
    lock = threading.Lock()
    body = {
        "model": "glm-5.3-flash",
        "messages": [{"role": "user", "content": "Count to a thousand."}],
        "max_tokens": 400,
        "stream": True,
    }

    def worker() -> None:
        with httpx.Client(
            timeout=60, trust_env=False, headers={"Authorization": f"Bearer {API_KEY}"}
        ) as client:
            while time.monotonic() < stop:
                try:
                    with client.stream("POST", f"{endpoint}/chat/completions", json=body) as resp:
                        ok = resp.status_code == 200 and any(
                            line.strip() == "data: [DONE]" for line in resp.iter_lines()
                        )
                except httpx.HTTPError:
                    ok = False
                with lock:
                    ended["done" if ok else "failed"] += 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(SATURATING_STREAMS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=SATURATION_SECONDS + 90)
    return ended
