"""A front on this machine, as the tests run it: the real ``nginx`` before the vLLM-protocol
simulator on loopback, the stack's keys, certificates, and a stack rendered under mocks."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import openai

from components.config import StackConfig, build_stack_config
from components.render.nginx_conf import render_nginx_conf
from tests.conftest import PROJECT, TEST_HOST_KEY
from tests.engine import free_port

SIM = PROJECT / "images" / "vllm-sim" / "vllm_sim.py"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
SERVED = "glm-5.3-flash"
GPU_HOST = {"hosts": [{"name": "gpu01", "dockerHost": "ssh://deploy@gpu01", "hostKey": TEST_HOST_KEY}]}
KEYS = {"alice": "sk-alice-1403f1510d19d5295321", "bob": "sk-bob.+/~_-0d08fac0336e7974=="}
METRICS = {"prom": "sk-prom-metrics-4d5e6f7a8b9c0d1e"}


def stack(hardware: str, **overrides: Any) -> StackConfig:
    raw: dict[str, Any] = {"hardware": hardware, **overrides}
    if hardware != "local":
        raw["target"] = GPU_HOST
        # The profiles bind the front to 0.0.0.0; the stack files accept plain HTTP, so do these.
        raw["front"] = {"allowPlainHttp": True, **raw.get("front", {})}
    return build_stack_config(raw)


# ---- processes -------------------------------------------------------------------------------


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def nginx_argv(directory: Path) -> list[str]:
    """nginx in the foreground on ``directory``'s ``nginx.conf``, with ``directory`` as its prefix
    (a metered front finds Debian's Lua module under it: ``metered_front.nginx_prefix``)."""
    return [
        NGINX,
        "-c",
        str(directory / "nginx.conf"),
        "-p",
        str(directory),
        "-e",
        "stderr",
        "-g",
        "daemon off;",
    ]


@contextlib.contextmanager
def running(argv: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """Run ``argv`` with stdout+stderr to ``log``; stop it (and only it) afterwards."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        proc.terminate()  # nginx: SIGTERM is a fast shutdown of master and workers
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def runtime_dir() -> Path:
    """A temp dir the Nginx workers (``nobody`` when the tests run as root) can use."""
    path = Path(tempfile.mkdtemp(prefix="glm-nginx-"))
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def vllm_sim(extra_env: dict[str, str] | None = None, wait_ready: bool = True) -> Iterator[int]:
    with vllm_sim_process(extra_env, wait_ready) as (port, _proc):
        yield port


@contextlib.contextmanager
def vllm_sim_process(
    extra_env: dict[str, str] | None = None, wait_ready: bool = True
) -> Iterator[tuple[int, subprocess.Popen]]:
    """The simulator's port and process (a test stops it as `docker stop` stops a container)."""
    assert SIM.is_file(), f"the vLLM-protocol simulator is missing at {SIM}"
    port = free_port()
    argv = [
        sys.executable, str(SIM), "serve", "/models/x", "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", SERVED, "--max-model-len", "32768", "--enable-auto-tool-choice",
        "--tool-call-parser", "glm47", "--reasoning-parser", "glm45",
        "--enable-prompt-tokens-details",  # as every stack renders it (glm:serving.enablePromptTokensDetails)
    ]  # fmt: skip
    env = {**os.environ, "VLLM_SIM_DECODE_TOKEN_SECONDS": "0.05", **(extra_env or {})}
    log_dir = runtime_dir()
    with running(argv, log_dir / "sim.log", env) as proc:
        if wait_ready:
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, (log_dir / "sim.log").read_text()
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        break
                assert time.monotonic() < deadline, "the simulator did not become ready in 30 s"
                time.sleep(0.1)
        yield port, proc
    shutil.rmtree(log_dir, ignore_errors=True)


class Front:
    """A real Nginx running a rendered config on a loopback port."""

    def __init__(self, port: int, directory: Path, scheme: str = "http") -> None:
        self.port = port
        self.dir = directory
        self.base = f"{scheme}://127.0.0.1:{port}"
        self.log = directory / "nginx.log"

    def client(self, key: str | None = KEYS["alice"], **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.base}/v1", api_key=key, max_retries=0, timeout=30, **kwargs)


@contextlib.contextmanager
def nginx_front(
    config: StackConfig, upstream: str, tls_files: tuple[bytes, bytes] | None = None
) -> Iterator[Front]:
    directory = runtime_dir()
    port = free_port()
    if tls_files:
        (directory / "tls.crt").write_bytes(tls_files[0])
        (directory / "tls.key").write_bytes(tls_files[1])
    conf = render_nginx_conf(
        config.front, upstream, KEYS, tls=bool(tls_files), metrics_keys=METRICS,
        listen=f"127.0.0.1:{port}", runtime_dir=str(directory), tls_dir=str(directory),
    )  # fmt: skip
    (directory / "nginx.conf").write_text(conf)
    front = Front(port, directory, "https" if tls_files else "http")
    with running(nginx_argv(directory), front.log) as proc:
        wait_for_port(port, proc)
        yield front
    shutil.rmtree(directory, ignore_errors=True)


def self_signed() -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


UNLIMITED_ADDRESS = {"rateLimit": {"unauthenticatedRequestsPerSecond": 1000, "unauthenticatedBurst": 1000}}
"""Every test here comes from 127.0.0.1: the module's front lets that address make its many keyless
requests; the default limits have tests of their own."""


def spread_over_time(arrivals: list[float], total: float) -> bool:
    """True when chunks arrive across the response, not in one lump at the end."""
    if len(arrivals) < 10 or total <= 0:
        return False
    return arrivals[-1] - arrivals[0] >= 0.6 * total and arrivals[len(arrivals) // 2] < 0.75 * total


def assert_forward_secret_tls(port: int) -> None:
    """Checked with the openssl client: TLS 1.2 with a SHA-1 CBC suite (the review's
    ECDHE-ECDSA-AES128-SHA; the certificates are ECDSA) must fail, a GCM suite must not, and the
    server must send no NewSessionTicket."""

    def handshake(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-tls1_2", *args],
            input="", capture_output=True, text=True, timeout=20,
        )  # fmt: skip

    assert handshake("-cipher", "ECDHE-ECDSA-AES128-SHA").returncode != 0
    modern = handshake("-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256", "-no_ticket")
    assert modern.returncode == 0 and "ECDHE-ECDSA-AES128-GCM-SHA256" in modern.stdout
    offered = handshake("-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert offered.returncode == 0, offered.stderr
    assert "TLS session ticket:" not in offered.stdout, "the server issued a session ticket"


class RecordingUpstream(BaseHTTPRequestHandler):
    """An upstream that records every request it gets (method, path, headers) and answers 200."""

    seen: ClassVar[list[tuple[str, str, dict[str, str]]]] = []

    def _answer(self) -> None:
        self.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b'{"object":"list","data":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def recording_upstream() -> Iterator[int]:
    RecordingUpstream.seen.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), RecordingUpstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
