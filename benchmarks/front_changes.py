"""Front-only changes under load: requests sent, failed, streams cut, p99 latency (issue 17).

Brings up the local stack under the real Pulumi engine on a throwaway copy of the project, then for
each change runs a bounded load loop through the front while `pulumi up` applies it:

* 2 clients sending short requests (a 4-token chat) every 50 ms;
* 3 clients streaming ~300-token answers, one after another.

Changes: a key addition, a key removal (one stream under the removed key is open during it), a
timeout change, each a `pulumi up`; and a certificate renewal on a real TLS front container applied
by NginxReload's provider code (the smoke gate verifies TLS against the public CAs only, so a stack
with a test certificate cannot pass `up`). Loopback only; each phase is bounded in time and count.

    PATH=~/.cache/glm53-engine/3.274.1/bin:.venv/bin:$PATH .venv/bin/python benchmarks/front_changes.py
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.engine import PulumiProject, engine_missing  # noqa: E402

ALICE = "sk-bench-alice-4a906519e7669523"
BOB = "sk-bench-bob-3d01db5890c94db0"
MODEL = "glm-5.3-flash"
SHORT_CLIENTS, SHORT_EVERY_SECONDS = 2, 0.05
STREAM_CLIENTS, STREAM_TOKENS = 3, 300
WARMUP_SECONDS, COOLDOWN_SECONDS = 2.0, 2.0
PHASE_MAX_SECONDS, PHASE_MAX_REQUESTS = 180.0, 6000


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: int = 0
    failed: int = 0
    streams: int = 0
    cut: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def record(self, ok: bool, seconds: float, error: str | None = None, stream: bool = False) -> None:
        with self.lock:
            self.sent += 1
            if stream:
                self.streams += 1
            if ok:
                self.latencies.append(seconds)
            else:
                self.failed += 1
                self.cut += stream
                self.errors[error or "?"] = self.errors.get(error or "?", 0) + 1

    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")


def short_client(
    base: str, verify: ssl.SSLContext | bool, key: str, stop: threading.Event, tally: Tally
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    with httpx.Client(verify=verify, timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:
        while not stop.is_set() and tally.sent < PHASE_MAX_REQUESTS:
            start = time.monotonic()
            try:
                reply = client.post(f"{base}/chat/completions", json=body)
                tally.record(reply.status_code == 200, time.monotonic() - start, f"HTTP {reply.status_code}")
            except httpx.HTTPError as err:
                tally.record(False, time.monotonic() - start, type(err).__name__)
            stop.wait(SHORT_EVERY_SECONDS)


def one_stream(client: httpx.Client, base: str) -> tuple[bool, str | None]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a long story about a cat."}],
        "max_tokens": STREAM_TOKENS,
        "stream": True,
    }
    try:
        with client.stream("POST", f"{base}/chat/completions", json=body) as reply:
            if reply.status_code != 200:
                return False, f"HTTP {reply.status_code}"
            done = any(line == "data: [DONE]" for line in reply.iter_lines())
            return done, None if done else "stream ended without [DONE]"
    except httpx.HTTPError as err:
        return False, type(err).__name__


def stream_client(
    base: str, verify: ssl.SSLContext | bool, key: str, stop: threading.Event, tally: Tally
) -> None:
    with httpx.Client(verify=verify, timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
        while not stop.is_set() and tally.sent < PHASE_MAX_REQUESTS:
            start = time.monotonic()
            ok, error = one_stream(client, base)
            tally.record(ok, time.monotonic() - start, error, stream=True)


def phase(
    base: str, verify: ssl.SSLContext | bool, change: Callable[[], object], extra_stream_key: str | None
) -> dict[str, object]:
    """Load through ``base`` while ``change()`` runs (a `pulumi up`, or a provider call)."""
    short, streams, extra = Tally(), Tally(), Tally()
    stop = threading.Event()
    threads = [
        threading.Thread(target=short_client, args=(base, verify, ALICE, stop, short))
        for _ in range(SHORT_CLIENTS)
    ]
    threads += [
        threading.Thread(target=stream_client, args=(base, verify, ALICE, stop, streams))
        for _ in range(STREAM_CLIENTS)
    ]
    for thread in threads:
        thread.start()
    time.sleep(WARMUP_SECONDS)
    extra_thread = None
    if extra_stream_key is not None:
        # Opened before the reload, under the key the change removes: it must finish on the old workers.
        def run_extra() -> None:
            with httpx.Client(
                verify=verify, timeout=60, headers={"Authorization": f"Bearer {extra_stream_key}"}
            ) as c:
                start = time.monotonic()
                ok, error = one_stream(c, base)
                extra.record(ok, time.monotonic() - start, error, stream=True)

        extra_thread = threading.Thread(target=run_extra)
        extra_thread.start()
        time.sleep(0.3)
    started = time.monotonic()
    change()
    up_seconds = time.monotonic() - started
    removed_key_status = None
    if extra_stream_key is not None:
        removed_key_status = httpx.get(
            f"{base}/models",
            headers={"Authorization": f"Bearer {extra_stream_key}"},
            verify=verify,
            timeout=10,
        ).status_code
    time.sleep(COOLDOWN_SECONDS)
    stop.set()
    for thread in threads:
        thread.join(PHASE_MAX_SECONDS)
    if extra_thread is not None:
        extra_thread.join(60)
    result: dict[str, object] = {
        "up_s": round(up_seconds, 1),
        "sent": short.sent + streams.sent,
        "failed": short.failed + streams.failed,
        "streams": streams.streams,
        "cut": streams.cut,
        "p99_short_ms": round(short.p99() * 1000, 1),
        "p99_stream_s": round(streams.p99(), 2),
        "errors": {
            **{f"short {k}": n for k, n in short.errors.items()},
            **{f"stream {k}": n for k, n in streams.errors.items()},
        },
    }
    if extra_stream_key is not None:
        result["removed_key_stream_finished"] = extra.failed == 0 and extra.sent == 1
        result["removed_key_status_after_up"] = removed_key_status
    return result


def engine_phases() -> dict[str, dict[str, object]]:
    """Key addition, key removal, timeout change: `pulumi up` of the local stack (plain HTTP on
    loopback: the gate verifies TLS against the public CAs only, so a test certificate cannot pass it)."""
    workdir = Path(tempfile.mkdtemp(prefix="front-changes-"))
    project = PulumiProject.copy_of_repo(workdir / "glm")
    local = project.init_local_stack("glm53-bench-front", secrets={"glm:apiKeys.alice": ALICE})
    container = local.container
    rows: dict[str, dict[str, object]] = {}

    def up_after(*config: str) -> Callable[[], object]:
        def run() -> None:
            project.run("config", *config, "-s", "local")
            project.run("up", "--yes", "--skip-preview", "-s", "local", timeout=PHASE_MAX_SECONDS)

        return run

    try:
        project.run("up", "--yes", "--skip-preview", "-s", "local", timeout=900)
        base = project.outputs("local")["endpoint"].replace("localhost", "127.0.0.1")
        rows["key addition"] = phase(
            base, True, up_after("set", "--secret", "--path", "glm:apiKeys.bob", BOB), None
        )
        rows["key removal"] = phase(base, True, up_after("rm", "--path", "glm:apiKeys.bob"), BOB)
        rows["timeout change"] = phase(
            base, True, up_after("set", "--path", "glm:front.readTimeoutSeconds", "900"), None
        )
    finally:
        project.run("destroy", "--yes", "-s", "local", check=False, timeout=600)
        subprocess.run(["docker", "volume", "rm", f"{container}-jit-cache"], capture_output=True)
    return rows


def ca_and_two_leaves() -> tuple[bytes, tuple[bytes, bytes], tuple[bytes, bytes]]:
    """A CA and two certificates it signed for 127.0.0.1 (a renewal keeps the issuer; two
    self-signed certificates with one subject would confuse the client's issuer lookup)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip

    def leaf() -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )  # fmt: skip
        pem_key = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cert.public_bytes(serialization.Encoding.PEM), pem_key

    return ca.public_bytes(serialization.Encoding.PEM), leaf(), leaf()


def certificate_phase() -> dict[str, object]:
    """Certificate renewal: the same load through a real TLS front container (the production
    command and image), the change applied by NginxReload's provider code (what `up` runs)."""
    from components.docker.nginx_reload import apply_release
    from tests.front_container import live_front
    from tests.front_rig import vllm_sim

    ca, old, new = ca_and_two_leaves()
    keys = {"alice": ALICE}
    with vllm_sim({"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.01"}) as sim_port, live_front(sim_port) as front:
        front.scheme = "https"
        apply_release(front.props(keys, tls_pair=(old[0].decode(), old[1].decode())))
        renewed = front.props(keys, tls_pair=(new[0].decode(), new[1].decode()))
        context = ssl.create_default_context(cadata=ca.decode())
        return phase(f"{front.base}/v1", context, lambda: apply_release(renewed), None)


def main() -> int:
    if engine_missing():
        print(f"cannot run: {engine_missing()}", file=sys.stderr)
        return 2
    rows = engine_phases()
    rows["certificate renewal"] = certificate_phase()
    print(
        f"{'change':<22}{'apply s':>8}{'sent':>7}{'failed':>8}{'streams':>9}{'cut':>5}"
        f"{'p99 short ms':>14}{'p99 stream s':>14}"
    )
    for name, row in rows.items():
        print(
            f"{name:<22}{row['up_s']:>8}{row['sent']:>7}{row['failed']:>8}{row['streams']:>9}{row['cut']:>5}"
            f"{row['p99_short_ms']:>14}{row['p99_stream_s']:>14}"
        )
    print(json.dumps(rows, indent=1))
    return 0 if all(row["failed"] == 0 for row in rows.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
