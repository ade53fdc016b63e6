"""No query string reaches a log, whatever the request line: the front and the replica guard, each
the real ``nginx`` on loopback, sent raw request lines over a socket (issue 47 item 11).

The access log writes ``$uri``; the error log writes the whole request line. A well-formed query is
refused before anything could log it; a request line nginx cannot parse (``%00`` in the path) once
went to ``error_page 400 = @bad_request``, which fails on a request without a URI ("empty URI in
redirect to named location"): nginx answered its HTML 500 and wrote the line, ``api_key=`` and all,
to the error log.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.render.replica_guard import render_guard_files
from tests.engine import free_port
from tests.front_rig import KEYS, nginx_front, stack
from tests.guard_rig import FRONT, KEY, SCRAPE_KEY, nginx

SECRET = "QuErYsEcReT-5b1d7e"
# Paths nginx refuses while it reads the request line (an encoded NUL, a bad escape, a control
# byte, a climb above the root) and lines it refuses for other reasons, each with a query.
BAD_PATHS = [
    b"/v1/%00",
    b"/%00/chat/completions",
    b"/v1/%zz",
    b"/v1/\x01",
    b"/../../etc",
    b"/v1/%2e%2e/%2e%2e/x",
]
LINES = [
    *(b"GET " + path + b"?api_key=" + SECRET.encode() + b" HTTP/1.1" for path in BAD_PATHS),
    b"POST /v1/chat/completions%00?api_key=" + SECRET.encode() + b" HTTP/1.0",
    b"GET /v1/models?api_key=" + SECRET.encode() + b" HTTP/9.9",
    b"GET /v1/models?api_key=" + SECRET.encode() + b"&pad=" + b"p" * 9000 + b" HTTP/1.1",
]


def send(port: int, line: bytes, headers: dict[str, str]) -> bytes:
    """One raw request line and its headers; the whole reply as it came."""
    head = line + b"\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head + b"Host: x\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


def replies(port: int, headers: dict[str, str]) -> Iterator[tuple[bytes, int, bytes]]:
    for line in LINES:
        reply = send(port, line, headers)
        status = int(reply.split(b" ", 2)[1])
        yield line, status, reply.partition(b"\r\n\r\n")[2]


def assert_no_query_logged(log: Path, seen: list[tuple[bytes, int, bytes]]) -> None:
    time.sleep(0.3)  # the workers' last lines
    text = log.read_text(errors="replace")
    assert SECRET not in text, "\n".join(line for line in text.splitlines() if SECRET in line)
    assert "empty URI in redirect" not in text, text
    # A broken path is the JSON 400 the client can read, never nginx's HTML 500.
    for line, status, body in seen:
        assert status != 500, (line[:60], body[:200])
        if any(line.startswith(b"GET " + path + b"?") for path in BAD_PATHS):
            assert status == 400 and json.loads(body)["error"]["code"] == "bad_request", (line[:60], body)


@pytest.mark.parametrize("key", [KEYS["alice"], None], ids=["api-key", "no-key"])
def test_the_front_logs_no_query_whatever_the_request_line(key: str | None) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with nginx_front(stack("local"), f"127.0.0.1:{free_port()}") as front:
        seen = list(replies(front.port, headers))
        # The log is written at all: a request with no query to an engine that is down logs the
        # failed connect and its request line at error level (the assertion is not vacuous).
        send(front.port, b"GET /v1/models HTTP/1.1", {"Authorization": f"Bearer {KEYS['alice']}"})
        assert_no_query_logged(front.log, seen)
        assert (
            "connect() failed" in front.log.read_text()
            and 'request: "GET /v1/models HTTP/1.1"' in front.log.read_text()
        )


@pytest.mark.parametrize("key", [KEY, SCRAPE_KEY, None], ids=["replica-key", "scrape-key", "no-key"])
def test_the_replica_guard_logs_no_query_whatever_the_request_line(key: str | None) -> None:
    files = render_guard_files(
        FRONT,
        f"127.0.0.1:{free_port()}",
        KEY,
        SCRAPE_KEY,
        None,
        listen="127.0.0.1:{port}",
        runtime_dir="{dir}",
    )
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with nginx(files) as (port, directory):
        seen = list(replies(port, headers))
        assert_no_query_logged(directory / "nginx.log", [])
    # A line nginx cannot parse carries no key it has read: the guard's JSON 401, as to any request
    # without the key; never nginx's HTML page.
    for line, status, body in seen:
        if any(line.startswith(b"GET " + path + b"?") for path in BAD_PATHS):
            assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key", (line[:60], body)
        else:
            assert status in (400, 401, 414, 505), (line[:60], status, body[:200])
