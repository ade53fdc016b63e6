"""Stacks over several stand-in hosts: shared by tests/test_multihost_engine.py and
benchmarks/multihost_scale.py."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from components.gate.sse import DONE, MalformedChunk, chunk_deltas, sse_events
from tests.engine import PulumiProject
from tests.standin_host import StandinHost, link_private_network

LOAD_MAX_REQUESTS = 8000
LOAD_MAX_SECONDS = 600.0
LOAD_WORKERS = 4

IMAGES = ("glm53-local/python:bookworm", "glm53-local/nginx:bookworm", "glm53-local/prometheus:bookworm")


def load_images(hosts: list[StandinHost], directory: Path) -> None:
    """One archive of the local images (they share their base layers), loaded into each host."""
    archive = directory / "images.tar"
    subprocess.run(["docker", "save", "-o", str(archive), *IMAGES], check=True, timeout=600)
    try:
        for host in hosts:
            loaded = subprocess.run(
                ["docker", "-H", host.docker_host, "load", "-i", str(archive)],
                capture_output=True, text=True, timeout=900, env=host.env(),
            )  # fmt: skip
            if loaded.returncode != 0:
                raise RuntimeError(f"loading the images into {host.name} failed: {loaded.stderr}")
    finally:
        archive.unlink(missing_ok=True)


@contextlib.contextmanager
def standin_fleet(count: int, images_dir: Path, lifetime_s: float = 3600) -> Iterator[list[StandinHost]]:
    """``count`` stand-in hosts on one private network, the local images loaded into each; gone
    (with their containers) on exit."""
    with contextlib.ExitStack() as stack:
        made = [stack.enter_context(StandinHost.create(lifetime_s=lifetime_s)) for _ in range(count)]
        link_private_network(made)
        load_images(made, images_dir)
        yield made


def host_entry(host: StandinHost) -> dict[str, Any]:
    return {
        "name": host.name,
        "dockerHost": host.docker_host,
        "hostKey": host.host_key,
        "identityFile": str(host.private_key_path),
    }


def set_config(project: PulumiProject, stack: str, key: str, value: Any) -> None:
    """Write an object or list value into the stack file (``pulumi config set`` takes a value
    starting with ``--`` for a flag)."""
    path = project.root / f"Pulumi.{stack}.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    data.setdefault("config", {})[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def set_hosts(project: PulumiProject, stack: str, hosts: list[StandinHost]) -> None:
    set_config(project, stack, "glm:target", {"hosts": [host_entry(h) for h in hosts]})


def init_stack(
    project: PulumiProject, stack: str, hosts: list[StandinHost], api_key: str, front_port: int
) -> None:
    """The local profile (the simulator) on ``hosts``; the front on the first, on its address."""
    front = hosts[0]
    project.init_stack(
        stack,
        config={
            "glm:front.port": str(front_port),
            "glm:front.bindAddress": front.address,
            "glm:front.allowPlainHttp": "true",
            # The load loop is one client at one address going as fast as it can: not what the
            # front's default limits (docs/front-and-alerts.md "Limits") are for.
            "glm:front.rateLimit.enabled": "false",
            # The stand-in hosts share this machine's file system: one weights folder serves all.
            "glm:model.hostDir": str(front.models_dir),
            "glm:container.name": f"glm53-multi-{stack}",
        },
        secrets={"glm:apiKeys.e2e": api_key},
    )
    # The roll's settings are the defaults: the front drains a replica before it goes, and vLLM's
    # --shutdown-timeout (stopGraceSeconds - 5) is only the second line.
    set_hosts(project, stack, hosts)


class LoadLoop:
    """Bounded load through the front: at most ``LOAD_MAX_REQUESTS`` requests and
    ``LOAD_MAX_SECONDS``; every other request streams. Every answer is checked, streamed ones too
    (13*17 -> 221; the reasoning streams first, so a stream lasts a few dozen tokens). Only the
    front's (harness) address."""

    def __init__(self, endpoint: str, api_key: str, workers: int = LOAD_WORKERS) -> None:
        self.endpoint = endpoint
        self.api_key = api_key
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = 0
        self.failures: list[str] = []
        self.wrong: list[str] = []
        self.cut_streams = 0
        self.answered = 0
        self.latencies: list[float] = []
        self.events: list[tuple[float, str, str]] = []
        """(when the request began, monotonic; ``right``/``wrong``/``failed``; what came back)."""
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(workers)]
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

    def _work(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        with httpx.Client(timeout=60, trust_env=False, headers=headers) as client:
            n = 0
            while self._claim():
                n += 1
                stream = n % 2 == 0
                body = {
                    "model": "glm-5.3-flash",
                    "messages": [{"role": "user", "content": "What is 13*17?"}],
                    "max_tokens": 256,
                    "temperature": 0,
                    "stream": stream,
                }
                started = time.monotonic()
                try:
                    error = self._one(client, body, stream)
                except httpx.HTTPError as err:
                    error = f"{type(err).__name__}: {err}"
                with self.lock:
                    self.ended = time.monotonic()
                    kind = "right" if not error else "wrong" if error.startswith("wrong answer") else "failed"
                    self.events.append((started, kind, error or ""))
                    if error and error.startswith("wrong answer"):
                        self.wrong.append(error)
                    elif error:
                        self.failures.append(f"{'stream' if stream else 'short'}: {error}")
                        self.cut_streams += error == "stream ended without [DONE]"
                    else:
                        self.answered += 1
                        self.latencies.append(time.monotonic() - started)
                if error and not error.startswith("wrong answer"):
                    time.sleep(0.1)  # a client backs off after an error (the front sends Retry-After)

    def _one(self, client: httpx.Client, body: dict[str, Any], stream: bool) -> str | None:
        url = f"{self.endpoint}/chat/completions"
        if not stream:
            resp = client.post(url, json=body)
            if resp.status_code != 200:
                return http_error(resp)
            content = str(resp.json()["choices"][0]["message"].get("content") or "").strip()
            return None if content == "221" else f"wrong answer {content!r}"
        with client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                resp.read()
                return http_error(resp)
            try:
                events = list(sse_events(resp.iter_lines()))
                if not events or events[-1] is not DONE:
                    return "stream ended without [DONE]"
                deltas = [d for chunk in events[:-1] for d in chunk_deltas(chunk)]
            except MalformedChunk as err:
                return f"malformed stream: {err}"
            content = "".join(d.get("content") or "" for d in deltas).strip()
            return None if content == "221" else f"wrong answer {content!r} (streamed)"

    def figures(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else None
        return {
            "sent": self.sent,
            "seconds": round(self.ended - self.started, 1),
            "answered_right": self.answered,
            "wrong_answers": len(self.wrong),
            "failed": len(self.failures),
            "cut_streams": self.cut_streams,
            "p50_ms": round(ordered[len(ordered) // 2] * 1000, 1) if ordered else None,
            "p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
            "first_failures": self.failures[:5],
            "first_wrong": self.wrong[:3],
        }


class ContainerWatch:
    """Polls the containers of the given hosts (over their SSH Docker endpoints) and records, with
    times, when each one's ID changes or it disappears: what the engine did, in the order it did."""

    def __init__(self, watched: Mapping[str, tuple[StandinHost, str] | Callable[[], str]]) -> None:
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


def http_error(resp: httpx.Response) -> str:
    """``HTTP <status> <code>: <message>`` for an OpenAI-shaped error, else the body's start."""
    try:
        error = resp.json()["error"]
        return f"HTTP {resp.status_code} {error['code']}: {error['message'][:400]}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {resp.status_code} {resp.text[:160]}"
