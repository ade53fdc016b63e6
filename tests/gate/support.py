"""What the gate's tests share: the vLLM-protocol simulator and the real Nginx front on free
loopback ports, and the gate's inputs as the engine hands them to the provider.

Each test starts its own simulator (images/vllm-sim/vllm_sim.py) with the local stack's rendered
argv, and where the gate goes "through the front", a real ``nginx`` running the config
``components.render.nginx_conf.render_nginx_conf`` renders.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from components.config import StackConfig, build_stack_config
from components.gate.checks import GateFailure, run_gate
from components.render.nginx_conf import render_nginx_conf
from components.serving.spec import render_argv, render_serving
from components.verification.smoke_gate import gate_params
from tests.conftest import PROJECT
from tests.engine import free_port
from tests.front_rig import NGINX, nginx_argv

SIM = PROJECT / "images" / "vllm-sim" / "vllm_sim.py"
KEY = "sk-smoke-test-c819d9fc61e85744b0bf"
SIM_READY_LINE = "Starting vLLM API server"

needs_nginx = pytest.mark.skipif(not Path(NGINX).exists(), reason="nginx is not installed")


def local_config(**smoke: Any) -> StackConfig:
    """The local stack's config, with GLM's low reasoning effort as the a800 stack sends it."""
    return build_stack_config(
        {"hardware": "local", "smoke": {"chatTemplateKwargs": {"reasoning_effort": "low"}, **smoke}}
    )


def as_engine_sends(value: Any) -> Any:
    """Inputs after the engine's round trip: every number is a float (``32768.0``)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return {k: as_engine_sends(v) for k, v in value.items()}
    return [as_engine_sends(v) for v in value]


@dataclass
class Sim:
    """A running simulator; ``ready_at`` is when it logged that it bound its port (monotonic)."""

    proc: subprocess.Popen[str]
    port: int
    started_at: float
    ready: threading.Event = field(default_factory=threading.Event)
    ready_at: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 10.0) -> None:
        assert self.ready.wait(timeout), "the simulator did not start"


def start_sim(config: StackConfig, env: dict[str, str] | None = None) -> Sim:
    port = free_port()
    argv = [*render_argv(config), "--host=127.0.0.1", f"--port={port}"]
    proc = subprocess.Popen(
        [sys.executable, str(SIM), "serve", *argv],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    sim = Sim(proc, port, time.monotonic())

    def drain() -> None:  # also keeps the pipe from filling with request logs
        assert proc.stderr is not None
        for line in proc.stderr:
            if SIM_READY_LINE in line and not sim.ready.is_set():
                sim.ready_at = time.monotonic()
                sim.ready.set()

    threading.Thread(target=drain, daemon=True).start()
    return sim


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_front(
    upstream_port: int,
    api_keys: dict[str, str],
    runtime: Path,
    metrics_keys: dict[str, str] | None = None,
    tls_pair: tuple[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """The real nginx with the local stack's rendered front config, on a free loopback port, before
    the simulator on ``upstream_port``; returns the process and its port once it listens.
    ``tls_pair``: (certificate PEM, key PEM): it serves TLS with them, as ``glm:front.tls`` does."""
    port = free_port()
    runtime.mkdir(exist_ok=True)
    runtime.chmod(0o755)  # nginx workers run as nobody
    if tls_pair is not None:
        (runtime / "tls.crt").write_text(tls_pair[0])
        (runtime / "tls.key").write_text(tls_pair[1])
    conf = render_nginx_conf(
        build_stack_config({"hardware": "local"}).front,
        f"127.0.0.1:{upstream_port}",
        api_keys,
        tls=tls_pair is not None,
        metrics_keys=metrics_keys,
        listen=f"127.0.0.1:{port}",
        runtime_dir=str(runtime),
        tls_dir=str(runtime),
    )
    (runtime / "nginx.conf").write_text(conf)
    proc = subprocess.Popen(
        nginx_argv(runtime),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise AssertionError("nginx exited at start") from None
            time.sleep(0.05)
    stop(proc)
    raise AssertionError("nginx did not listen")


class BufferingProxy(BaseHTTPRequestHandler):
    """A front that buffers whole responses (what Nginx does to SSE without `proxy_buffering off`)."""

    upstream: tuple[str, int]
    protocol_version = "HTTP/1.1"

    def do_any(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
        conn.request(self.command, self.path, body=body or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        self.send_header("content-type", resp.getheader("content-type") or "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_any

    def log_message(self, *_args: Any) -> None:
        pass


def params(
    endpoint: str,
    sim: Sim | None = None,
    config: StackConfig | None = None,
    steps: list[str] | None = None,
    **smoke: Any,
) -> dict[str, Any]:
    """The provider's inputs (without the key) as they reach it: numbers as floats."""
    config = config or local_config()
    p = gate_params(
        render_serving(config),
        config.smoke,
        endpoint,
        "glm53-vllm-sim:test",
        f"{sim.url}/metrics" if sim is not None else None,
    )
    p["smoke"].update({"deadline_seconds": 10, "poll_seconds": 0.2, "request_timeout_seconds": 10, **smoke})
    if steps is not None:
        p["smoke"]["steps"] = steps
    return as_engine_sends(p)


def gate_fails(p: dict[str, Any], key: str = KEY) -> GateFailure:
    with pytest.raises(GateFailure) as info:
        run_gate(p, key, lambda _line: None)
    return info.value
