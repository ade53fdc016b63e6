"""The HTTP server and its request handler: reading requests, sending replies, dispatch.

What each endpoint does is in :mod:`simulator.routes`; a streamed reply's events are written by
:mod:`simulator.streaming`. The handler speaks HTTP/1.1 with keep-alive, calls itself uvicorn and
logs each request as uvicorn does.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from simulator.config import Config
from simulator.engine import Aborted, Engine
from simulator.errors import HTTPError, bad_request, error_body


def _reason_phrase(status: int) -> str:
    return BaseHTTPRequestHandler.responses.get(status, ("",))[0]


FAULTS_PATH = "/sim/faults"
"""The runtime fault switch's route: it exists only with ``VLLM_SIM_RUNTIME_FAULTS=1``."""


class SimServer(ThreadingHTTPServer):
    """A thread per connection; what the handlers share: the routes (``simulator.routes.ROUTES``,
    handed in: the routes take the handler, so this module does not import them back), the config,
    the engine, the vocabulary ``/tokenize`` learnt (for ``/detokenize``), the requests in flight
    and the stop signals."""

    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple,
        routes: Mapping[tuple[str, str], Callable[[Handler], None]],
        cfg: Config,
        engine: Engine,
        stop: threading.Event,
    ):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.routes = routes
        self.cfg = cfg
        self.engine = engine
        self.stop = stop
        self.vocab: dict = {}
        self.vocab_lock = threading.Lock()
        self.in_flight = 0
        self.in_flight_lock = threading.Lock()
        self.draining = threading.Event()
        super().__init__(address, Handler)

    def drain(self, timeout: float) -> None:
        """``--shutdown-timeout``: new connections are refused (the socket is closed), requests
        in flight get up to ``timeout`` seconds to finish; then the rest are aborted."""
        self.draining.set()
        self.server_close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.in_flight_lock:
                if self.in_flight == 0:
                    return
            time.sleep(0.05)


class Handler(BaseHTTPRequestHandler):
    """One connection: requests read, dispatched to the server's routes, replies sent."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: SimServer

    # ---- plumbing ----------------------------------------------------------------------
    def version_string(self) -> str:
        return "uvicorn"

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        if self.server.cfg.quiet:
            return
        try:
            status = int(code)
        except (TypeError, ValueError):
            status = 0
        host, port = self.client_address[:2]
        sys.stderr.write(
            f'INFO:     {host}:{port} - "{self.requestline}" {status} {_reason_phrase(status)}\n'
        )

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.cfg.quiet:
            sys.stderr.write("WARNING:  " + (format % args) + "\n")

    def alive(self) -> bool:
        """False once the client has closed (or reset) its connection."""
        if self.server.stop.is_set():
            return False
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return True
            return bool(self.connection.recv(1, socket.MSG_PEEK))
        except (OSError, ValueError):
            return False

    def send_body(
        self, status: int, body: bytes, content_type: str | None, headers: dict | None = None
    ) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, obj: Any) -> None:
        self.send_body(
            status, json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode(), "application/json"
        )

    def send_error_json(self, err: HTTPError) -> None:
        self.send_json(err.status, error_body(err.status, err.message, err.err_type, err.param))

    def read_body(self) -> bytes:
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            chunks: list[bytes] = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def read_json(self) -> dict:
        raw = self.read_body()
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            raise bad_request(f"JSON decode error: {exc}") from None
        if not isinstance(body, dict):
            raise bad_request("Request body must be a JSON object")
        return body

    # ---- dispatch ----------------------------------------------------------------------
    def dispatch(self) -> None:
        with self.server.in_flight_lock:
            self.server.in_flight += 1
        try:
            self._dispatch()
        finally:
            if self.server.draining.is_set():
                self.close_connection = True  # what uvicorn does while shutting down
            with self.server.in_flight_lock:
                self.server.in_flight -= 1

    def _dispatch(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        method = "GET" if self.command == "HEAD" else self.command
        route = self.server.routes.get((method, path))
        if route is not None and path == FAULTS_PATH and not self.server.cfg.runtime_faults:
            route = None  # the switch exists only with VLLM_SIM_RUNTIME_FAULTS=1
            self.read_body()  # so that the connection's next request starts where it should
        try:
            if route is None:
                if path != FAULTS_PATH:
                    self.read_body()  # a kept-alive connection's next request starts after this one's body
                known = any(p == path for (_, p) in self.server.routes) and path != FAULTS_PATH
                status = 405 if known else 404
                detail = "Method Not Allowed" if known else "Not Found"
                self.send_json(status, {"detail": detail})
                return
            api_key = self.server.cfg.api_key
            authorization = self.headers.get("authorization", "")
            if api_key and path.startswith("/v1") and authorization != f"Bearer {api_key}":
                self.send_json(401, {"error": "Unauthorized"})
                return
            route(self)
        except HTTPError as err:
            self.send_error_json(err)
        except Aborted:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = dispatch
