"""Fixtures of the gate's tests: simulators and real Nginx fronts, each stopped at teardown."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from components.config import StackConfig
from tests.gate.support import KEY, BufferingProxy, Sim, local_config, start_front, start_sim, stop


@pytest.fixture
def sims() -> Iterator[Callable[..., Sim]]:
    """Start simulators on demand; each is stopped at teardown."""
    started: list[Sim] = []

    def start(config: StackConfig | None = None, wait: bool = True, **env: str) -> Sim:
        sim = start_sim(config or local_config(), env)
        started.append(sim)
        if wait:
            sim.wait_ready()
        return sim

    yield start
    for sim in started:
        stop(sim.proc)


@pytest.fixture
def front(tmp_path: Path) -> Iterator[Callable[[Sim], str]]:
    """Put the real Nginx front (rendered config, loopback port) before a simulator; returns /v1."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(sim: Sim) -> str:
        proc, port = start_front(sim.port, {"ci": KEY}, tmp_path / f"nginx-{len(procs)}")
        procs.append(proc)
        return f"http://127.0.0.1:{port}/v1"

    yield start
    for proc in procs:
        stop(proc)


@pytest.fixture
def buffering_front() -> Iterator[Callable[[Sim], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(sim: Sim) -> str:
        handler = type("Handler", (BufferingProxy,), {"upstream": ("127.0.0.1", sim.port)})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
