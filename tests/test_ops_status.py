"""`make status` says first whether the API answers, and why not, with the fix; each container with
the time of its own last event (issue 47 item 6; ops/api_state.py).

The API is a real HTTP server on loopback answering what the front answers in each case (the
rotation's 503 body from the function that writes it, ``no_replica_body``); the containers' states
are ``docker inspect --format '{{json .State}}'`` as Docker prints them; the stack's outputs and
history are the CLI's JSON.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from components.config import build_stack_config
from components.render.openai_errors import no_replica_body
from ops import __main__ as ops
from tests.engine import free_port

CONFIG = build_stack_config({"hardware": "local"}, stack="local")
SERVING = CONFIG.container.name
FRONT = f"{SERVING}-nginx"
KEY = "sk-local-5e2a9c7f1b3d8e0a4c6f"
STARTED, STOPPED = "2026-12-05T20:01:02.123456789Z", "2026-12-05T20:45:10.987654321Z"
NEVER = "0001-01-01T00:00:00Z"  # Docker's FinishedAt of a container never stopped
RUNNING = {
    "Status": "running", "Running": True, "Paused": False, "Restarting": False, "OOMKilled": False,
    "Dead": False, "Pid": 4242, "ExitCode": 0, "Error": "", "StartedAt": STARTED, "FinishedAt": NEVER,
    "Health": {"Status": "healthy", "FailingStreak": 0, "Log": []},
}  # fmt: skip
EXITED = {
    **RUNNING, "Status": "exited", "Running": False, "Pid": 0, "ExitCode": 0, "FinishedAt": STOPPED,
    "Health": {"Status": "unhealthy", "FailingStreak": 0, "Log": []},
}  # fmt: skip
GATE_FAILED = "the replica on host local failed its gate at step arithmetic: 13×17 came back as 222"


class _Api(BaseHTTPRequestHandler):
    answer: ClassVar[tuple[int, str]] = (200, '{"object":"list","data":[]}')
    keys: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Api.keys.append(self.headers.get("Authorization", ""))
        status, body = _Api.answer
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *_: Any) -> None:
        pass


@contextlib.contextmanager
def api(status: int, body: str) -> Iterator[str]:
    _Api.answer, _Api.keys = (status, body), []
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def status(
    endpoint: str, states: dict[str, dict[str, Any] | None], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> tuple[int, list[str]]:
    outputs = {"endpoint": endpoint, "smoke": {"kv_pool_tokens": 9}}
    history = [{"kind": "update", "result": "succeeded", "endTime": "T", "version": 3}]
    answers = {
        ("stack", "output"): json.dumps(outputs),
        ("stack", "history"): json.dumps(history),
        ("config", "get"): json.dumps({"value": json.dumps({"local": KEY}), "secret": True}),
    }
    monkeypatch.setattr(ops, "pulumi", lambda *args, stack: answers[args[:2]])
    monkeypatch.setattr(ops, "_state", lambda config, name: states.get(name))

    def no_prometheus(query: Any) -> Any:
        raise RuntimeError("no Prometheus in this test")

    monkeypatch.setattr(ops, "usage_rows", no_prometheus)
    code = ops.status(CONFIG, "local")
    return code, capsys.readouterr().out.splitlines()


def test_a_failed_gate_is_an_outage_said_first_with_the_way_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 47: every request got the 503 and status said "state running …" and exited 0."""
    with api(503, no_replica_body(GATE_FAILED)) as endpoint:
        code, lines = status(endpoint, {SERVING: RUNNING, FRONT: RUNNING}, monkeypatch, capsys)
    assert code == 1, lines
    assert lines[0].startswith("API          DOWN: every request gets 503 no_replica_in_rotation"), lines
    assert GATE_FAILED in lines[0] and "Fix: `make rollback STACK=local`" in lines[0], lines[0]
    assert _Api.keys == [f"Bearer {KEY}"]  # asked as a client, with the stack's key


def test_a_stopped_container_is_named_with_the_time_it_stopped_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 47: "state exited since <the time it started>" and no fix."""
    with api(
        502, '{"error":{"message":"The model is starting or down.","code":"upstream_unavailable"}}'
    ) as url:
        code, lines = status(url, {SERVING: EXITED, FRONT: RUNNING}, monkeypatch, capsys)
    assert code == 1
    assert lines[0].startswith(
        f"API          DOWN: the serving container {SERVING} is exited at {STOPPED}"
    ), lines
    assert "Fix: `make restart STACK=local`" in lines[0], lines[0]
    state = next(line for line in lines if line.startswith("state "))
    assert state == f"state        exited at {STOPPED} (exit code 0)", state
    assert STARTED not in state


def test_a_stopped_front_is_named_with_its_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: the front is down
    code, lines = status(endpoint, {SERVING: RUNNING, FRONT: EXITED}, monkeypatch, capsys)
    assert code == 1
    host = CONFIG.target.host.docker_host
    assert lines[0] == (
        f"API          DOWN: the front {FRONT} is exited at {STOPPED} (exit code 0), so nothing answers. "
        f"Fix: `docker -H {host} start {FRONT}`."
    ), lines[0]


def test_a_serving_stack_says_it_answers_first_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with api(200, '{"object":"list","data":[{"id":"glm-5.3-flash"}]}') as endpoint:
        code, lines = status(endpoint, {SERVING: RUNNING, FRONT: RUNNING}, monkeypatch, capsys)
    assert code == 0, lines
    assert lines[0].startswith("API          answers"), lines
    assert f"state        running since {STARTED}, health healthy" in lines


def test_smoke_on_a_stopped_container_says_it_is_stopped_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 47 item 7: it waited 30 s, then advised waiting for the weights to load."""
    monkeypatch.setattr(ops, "pulumi", lambda *args, stack: json.dumps({"endpoint": "http://127.0.0.1:9/v1"}))
    monkeypatch.setattr(ops, "_state", lambda config, name: {SERVING: EXITED, FRONT: RUNNING}.get(name))

    def no_gate(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the gate ran against a stopped container: {args}")

    monkeypatch.setattr(ops.subprocess, "run", no_gate)
    started = time.monotonic()
    assert ops.smoke(CONFIG, "local", deadline=30) == 1
    assert time.monotonic() - started < 5
    said = capsys.readouterr().err.strip()
    assert said.startswith(f"ops: smoke not run: the serving container {SERVING} is exited at {STOPPED}"), (
        said
    )
    assert "`make restart STACK=local`" in said and "weights" not in said, said
