"""Several stand-in GPU hosts in one stack, on the real engine (skipped, with the reason, without it).

One lifecycle, in order: ``up`` with two hosts (a gate per replica, then the front's) → no-op
preview → a third host is one list entry: the preview plans only its resources and the front's
(and Prometheus') config → ``up`` → one vLLM flag for every replica rolls host by host while a
bounded load loop runs through the front (short and streaming requests): no request may fail →
removing a host takes it out of the front before its container goes → destroy.

Figures (timings, load loop) are printed; ``GLM_MULTIHOST_REPORT=path`` also writes them as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine import PulumiProject, engine_missing
from tests.multihost import init_stack, load_images, set_hosts
from tests.standin_host import StandinHost, link_private_network, unavailable_reason

pytestmark = pytest.mark.skipif(
    engine_missing() is not None or unavailable_reason() is not None,
    reason=str(engine_missing() or unavailable_reason()),
)

API_KEY = "sk-multihost-97b4f1e3ef97eef652"
FRONT_PORT = 18480
LOAD_MAX_REQUESTS = 8000
LOAD_MAX_SECONDS = 600.0
LOAD_WORKERS = 4


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[StandinHost]]:
    with contextlib.ExitStack() as stack:
        made = [stack.enter_context(StandinHost.create(lifetime_s=5400)) for _ in range(3)]
        link_private_network(made)
        load_images(made, tmp_path_factory.mktemp("images"))
        yield made


def changed(project: PulumiProject, stack: str) -> dict[str, str]:
    return {s["urn"].rsplit("::", 1)[1]: s["op"] for s in project.preview_steps(stack)}


# ---- the load loop -------------------------------------------------------------------------------


class LoadLoop:
    """Bounded load through the front: at most ``LOAD_MAX_REQUESTS`` requests and
    ``LOAD_MAX_SECONDS``; every other request streams. Only the front's (harness) address."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = 0
        self.failures: list[str] = []
        self.latencies: list[float] = []
        self.threads = [
            threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(LOAD_WORKERS)
        ]
        self.started = time.monotonic()
        self.ended = self.started
        self.deadline = self.started + LOAD_MAX_SECONDS

    def __enter__(self) -> LoadLoop:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def _claim(self) -> bool:
        with self.lock:
            if self.stop.is_set() or self.sent >= LOAD_MAX_REQUESTS or time.monotonic() > self.deadline:
                return False
            self.sent += 1
            return True

    def _work(self, worker: int) -> None:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(timeout=60, trust_env=False, headers=headers) as client:
            n = 0
            while self._claim():
                n += 1
                stream = n % 2 == 0
                body = {
                    "model": "glm-5.3-flash",
                    "messages": [{"role": "user", "content": f"Count to twenty. ({worker}-{n})"}],
                    "max_tokens": 24 if stream else 4,
                    "stream": stream,
                }
                started = time.monotonic()
                try:
                    error = self._one(client, body, stream)
                except httpx.HTTPError as err:
                    error = f"{type(err).__name__}: {err}"
                with self.lock:
                    self.ended = time.monotonic()
                    if error:
                        self.failures.append(f"{'stream' if stream else 'short'}: {error}")
                    else:
                        self.latencies.append(time.monotonic() - started)

    def _one(self, client: httpx.Client, body: dict[str, Any], stream: bool) -> str | None:
        url = f"{self.endpoint}/chat/completions"
        if not stream:
            resp = client.post(url, json=body)
            if resp.status_code != 200:
                return f"HTTP {resp.status_code} {resp.text[:120]}"
            return None if resp.json()["choices"][0]["message"] else "no message"
        with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                resp.read()
                return f"HTTP {resp.status_code} {resp.text[:120]}"
            done = any(line.strip() == "data: [DONE]" for line in resp.iter_lines())
            return None if done else "stream ended without [DONE]"

    def figures(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else None
        return {
            "sent": self.sent,
            "seconds": round(self.ended - self.started, 1),
            "failed": len(self.failures),
            "p50_ms": round(ordered[len(ordered) // 2] * 1000, 1) if ordered else None,
            "p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
            "first_failures": self.failures[:5],
        }


# ---- the lifecycle --------------------------------------------------------------------------------


def test_hosts_join_roll_and_leave(hosts: list[StandinHost], tmp_path: Path) -> None:
    project = PulumiProject.copy_of_repo(tmp_path / "glm")
    stack = "local"
    figures: dict[str, Any] = {}
    init_stack(project, stack, hosts[:2], API_KEY, FRONT_PORT)
    try:
        project.run("up", "--yes", "--skip-preview", "-s", stack, label="up (2 hosts, cold)", timeout=1800)
        outputs = project.outputs(stack)
        assert sorted(outputs["replicas"]) == sorted(h.name for h in hosts[:2])
        for name, results in outputs["replicas"].items():
            assert results["host"] == name and results["kv_pool_tokens"] >= 32768, results
            assert "front_auth" not in results["steps_run"] and "streaming" in results["steps_run"]
        assert "front_auth" in outputs["smoke"]["steps_run"]
        endpoint = outputs["endpoint"]
        container = f"glm53-multi-{stack}"
        project.run("preview", "--expect-no-changes", "-s", stack, label="preview (2 hosts, no-op)")

        # Adding a host is one list entry: only its resources, the front's config (a graceful
        # reload), Prometheus' config (its files are uploads: the container is replaced) and the
        # front's gate.
        set_hosts(project, stack, hosts)
        plan = changed(project, stack)
        new = hosts[2].name
        others = {k: v for k, v in plan.items() if new not in k and k != f"{new}-docker"}
        assert others == {
            "local-front-config": "update",
            "local-monitoring-prometheus": "replace",
            "local-smoke-gate": "update",
        }, plan
        assert all(op == "create" for k, op in plan.items() if k not in others), plan
        project.run("up", "--yes", "--skip-preview", "-s", stack, label="up (add 3rd host)", timeout=1800)
        project.run("preview", "--expect-no-changes", "-s", stack, label="preview (3 hosts, no-op)")

        # One vLLM flag for every replica: they roll one host at a time under load.
        project.run("config", "set", "--path", "glm:serving.maxNumSeqs", "6", "-s", stack)
        plan = changed(project, stack)
        assert {k for k, op in plan.items() if op == "replace"} == {
            "local-serving-vllm",
            f"local-{hosts[1].name}-serving-vllm",
            f"local-{new}-serving-vllm",
        }, plan
        replicas = {h.name: (h, container) for h in hosts}
        with ContainerWatch(replicas) as watch, LoadLoop(endpoint) as load:
            time.sleep(3)
            project.run(
                "up", "--yes", "--skip-preview", "-s", stack, label="up (rolling, 3 hosts)", timeout=1800
            )
            time.sleep(3)
        figures["rolling"] = load.figures()
        # The loop ran from 3 s before the up to 3 s after it (not cut short by its request bound).
        assert figures["rolling"]["seconds"] >= project.timings["up (rolling, 3 hosts)"] + 5, figures
        figures["rolling"]["replaced_in_order"] = watch.order()
        starts = [round(watch.first_change(h.name) - watch.first_change(hosts[0].name), 1) for h in hosts]
        figures["rolling"]["replacement_started_s"] = starts
        print("rolling update under load:", json.dumps(figures["rolling"]))
        assert watch.order() == [h.name for h in hosts], watch.changes

        # Removing a host: the front's live config drops it first (a graceful reload, the front
        # container stays), then the host's container goes.
        set_hosts(project, stack, hosts[:2])
        front_id = (
            hosts[0].docker("ps", "-q", "--no-trunc", "--filter", f"name=^{container}-nginx$").stdout.strip()
        )

        def front_lists_the_leaving_host() -> str:
            conf = hosts[0].docker("exec", f"{container}-nginx", "cat", "/etc/nginx/glm/current/nginx.conf")
            return "listed" if f"server {hosts[2].address}:" in conf.stdout else "unlisted"

        leaving = {"front": front_lists_the_leaving_host, "leaving": (hosts[2], container)}
        with ContainerWatch(leaving) as watch:
            project.run("up", "--yes", "--skip-preview", "-s", stack, label="up (remove host)")
            time.sleep(2)
        changes = [(label, ident) for _, label, ident in watch.changes]
        assert changes == [("front", "unlisted"), ("leaving", "gone")], changes
        assert (
            hosts[0].docker("ps", "-q", "--no-trunc", "--filter", f"name=^{container}-nginx$").stdout.strip()
            == front_id
        )
        project.run("preview", "--expect-no-changes", "-s", stack)
        assert figures["rolling"]["failed"] == 0, figures["rolling"]
    finally:
        project.run("destroy", "--yes", "-s", stack, label="destroy", check=False, timeout=1800)
        figures["timings_s"] = {k: round(v, 1) for k, v in project.timings.items()}
        print("multihost figures:", json.dumps(figures))
        if os.environ.get("GLM_MULTIHOST_REPORT"):
            Path(os.environ["GLM_MULTIHOST_REPORT"]).write_text(json.dumps(figures, indent=2))


class ContainerWatch:
    """Polls the containers of the given hosts (over their SSH Docker endpoints) and records, with
    times, when each one's ID changes or it disappears: what the engine did, in the order it did."""

    def __init__(self, watched: dict[str, tuple[StandinHost, str] | Callable[[], str]]) -> None:
        self.watched = watched
        self.changes: list[tuple[float, str, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> ContainerWatch:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)

    def _poll(self) -> None:
        last: dict[str, str] = {}
        while not self.stop.is_set():
            for label, watched in self.watched.items():
                if callable(watched):
                    ident = watched()
                else:
                    host, container = watched
                    ps = host.docker("ps", "-aq", "--no-trunc", "--filter", f"name=^{container}$", timeout=30)
                    ident = ps.stdout.strip() or "gone"
                if label in last and last[label] != ident:
                    self.changes.append((time.monotonic(), label, ident))
                last[label] = ident
            time.sleep(0.2)

    def first_change(self, label: str) -> float:
        return next(t for t, name, _ in self.changes if name == label)

    def order(self) -> list[str]:
        seen: list[str] = []
        for _, label, _ in self.changes:
            if label not in seen:
                seen.append(label)
        return seen
