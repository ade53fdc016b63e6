"""NginxReload against a real nginx container on the local Docker engine (no Pulumi engine).

The container runs the production command (``START_COMMAND``) from the local nginx image on the
host network, so it listens on a loopback port and reaches the vLLM-protocol simulator there. Each
test delivers releases with the provider's own ``apply_release`` and drives real clients through
the front while it reloads. Containers are named ``glm53-test-reload-<port>`` and removed by name.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from components.docker.nginx_reload import apply_release
from tests.front_container import LiveFront, docker_ready, live_front
from tests.front_rig import KEYS, METRICS, SERVED, self_signed, vllm_sim

pytestmark = pytest.mark.skipif(docker_ready() is not None, reason=str(docker_ready()))


@dataclass
class StreamResult:
    chunks: int = 0
    finished: bool = False
    error: str | None = None


def stream(front: LiveFront, key: str, tokens: int, result: StreamResult, started: threading.Event) -> None:
    body = {
        "model": SERVED,
        "messages": [{"role": "user", "content": "Tell me a long story about a cat."}],
        "max_tokens": tokens,
        "stream": True,
    }
    try:
        with httpx.stream(
            "POST",
            f"{front.base}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
            verify=front.verify,
        ) as reply:
            if reply.status_code != 200:
                result.error = f"status {reply.status_code}"
                started.set()
                return
            for line in reply.iter_lines():
                if line.startswith("data: "):
                    result.chunks += 1
                    started.set()
                    if line == "data: [DONE]":
                        result.finished = True
    except httpx.HTTPError as err:
        result.error = repr(err)
    finally:
        started.set()


def start_streams(
    front: LiveFront, key: str, count: int, tokens: int = 60
) -> list[tuple[threading.Thread, StreamResult]]:
    running = []
    for _ in range(count):
        result, started = StreamResult(), threading.Event()
        thread = threading.Thread(target=stream, args=(front, key, tokens, result, started), daemon=True)
        thread.start()
        assert started.wait(20), "a stream did not start"
        running.append((thread, result))
    return running


def finish(running: list[tuple[threading.Thread, StreamResult]]) -> list[StreamResult]:
    for thread, _ in running:
        thread.join(60)
    return [result for _, result in running]


@pytest.fixture(scope="module")
def sim_port() -> Iterator[int]:
    # 0.05 s per token: a 60-token stream lasts ~3 s, long enough to straddle a reload.
    with vllm_sim() as port:
        yield port


def test_first_release_starts_nginx_and_serves_keys_and_metrics(sim_port: int) -> None:
    with live_front(sim_port) as front:
        assert front.apply(front.props(KEYS)).startswith("front config ")
        assert front.status(KEYS["alice"]) == 200
        assert front.status(None) == 401
        assert front.status(METRICS["prom"], "/metrics") == 200
        assert front.status(KEYS["alice"], "/metrics") == 401
        # The secret files are private to root inside the container; nginx.conf has no key.
        listing = front.exec("ls", "-l", "/etc/nginx/glm/current/")
        assert "-rw-------" in listing and "api-keys.map" in listing
        assert all(key not in front.exec("cat", "/etc/nginx/glm/current/nginx.conf") for key in KEYS.values())


def test_adding_a_key_reloads_without_dropping_streams_or_restarting(sim_port: int) -> None:
    with live_front(sim_port) as front:
        front.apply(front.props(KEYS))
        before = front.master_pid()
        carol = "sk-carol-9f8e7d6c5b4a39281706"
        running = start_streams(front, KEYS["alice"], 3)
        front.apply(front.props({**KEYS, "carol": carol}))
        assert front.status(carol) == 200, "the added key must work as soon as the reload returns"
        results = finish(running)
        assert [(r.error, r.finished) for r in results] == [(None, True)] * 3
        assert front.master_pid() == before, "the container or nginx master restarted"


def test_a_removed_key_gets_401_at_once_and_its_open_streams_finish(sim_port: int) -> None:
    """Old workers keep the requests they already accepted (worker_shutdown_timeout bounds them);
    new connections go to the new workers, which no longer know the key."""
    with live_front(sim_port) as front:
        front.apply(front.props(KEYS))
        running = start_streams(front, KEYS["bob"], 2)
        front.apply(front.props({"alice": KEYS["alice"]}))
        assert front.status(KEYS["bob"]) == 401
        assert front.status(KEYS["alice"]) == 200
        results = finish(running)
        assert [(r.error, r.finished) for r in results] == [(None, True)] * 2
        # A keep-alive connection opened before the reload does not keep the old key alive either.
        assert front.status(KEYS["bob"]) == 401


def test_a_config_nginx_refuses_is_never_loaded_and_up_fails_with_nginxs_error(sim_port: int) -> None:
    with live_front(sim_port) as front:
        good = front.props(KEYS)
        front.apply(good)
        current = front.exec("readlink", "/etc/nginx/glm/current")
        bad = front.props({**KEYS, "carol": "sk-carol-9f8e7d6c5b4a39281706"})
        bad["nginx_conf"] = bad["nginx_conf"].replace("proxy_buffering off;", "proxy_bufering off;")
        with pytest.raises(RuntimeError) as raised:
            apply_release(bad)
        message = str(raised.value)
        assert "nginx -t refused the new front config" in message
        assert 'unknown directive "proxy_bufering"' in message
        assert all(key not in message for key in KEYS.values())
        assert front.exec("readlink", "/etc/nginx/glm/current") == current
        assert front.status(KEYS["alice"]) == 200
        assert front.status("sk-carol-9f8e7d6c5b4a39281706") == 401


def _served_certificate(port: int) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return tls.getpeercert(binary_form=True) or b""


def test_a_renewed_certificate_is_served_after_the_reload_without_dropping_streams(sim_port: int) -> None:
    old, new = self_signed(), self_signed()
    with live_front(sim_port) as front:
        front.scheme, front.verify = "https", False
        front.apply(front.props(KEYS, tls_pair=(old[0].decode(), old[1].decode())))
        first = _served_certificate(front.port)
        running = start_streams(front, KEYS["alice"], 2)
        front.apply(front.props(KEYS, tls_pair=(new[0].decode(), new[1].decode())))
        assert _served_certificate(front.port) != first
        assert ssl.DER_cert_to_PEM_cert(_served_certificate(front.port)).encode().strip() == new[0].strip()
        results = finish(running)
        assert [(r.error, r.finished) for r in results] == [(None, True)] * 2


def test_a_timeout_change_takes_effect_and_keeps_one_release_for_rollback(sim_port: int) -> None:
    with live_front(sim_port) as front:
        front.apply(front.props(KEYS))
        front.apply(front.props(KEYS, {"readTimeoutSeconds": 900}))
        front.apply(front.props(KEYS, {"readTimeoutSeconds": 300}))
        conf = front.exec("cat", "/etc/nginx/glm/current/nginx.conf")
        assert "proxy_read_timeout 300s;" in conf
        kept = sorted(front.exec("ls", "/etc/nginx/glm/releases").split())
        assert kept == sorted(front.releases[-2:]), "older releases (and their keys) are removed"


def test_a_revoked_key_and_a_replaced_tls_key_leave_no_copy_on_disk(sim_port: int) -> None:
    """Issue 26: the previous release stayed as a rollback target with the revoked key in it."""
    old_tls, new_tls = self_signed(), self_signed()
    with live_front(sim_port) as front:
        front.scheme, front.verify = "https", False
        front.apply(front.props(KEYS, tls_pair=(old_tls[0].decode(), old_tls[1].decode())))
        front.apply(
            front.props({"alice": KEYS["alice"]}, tls_pair=(new_tls[0].decode(), new_tls[1].decode()))
        )
        assert front.status(KEYS["bob"]) == 401
        assert front.exec("ls", "/etc/nginx/glm/releases").split() == front.releases[-1:]
        on_disk = front.exec("sh", "-c", "cat /etc/nginx/glm/releases/*/* /etc/nginx/glm/*/* 2>/dev/null")
        assert KEYS["alice"].split("-")[-1] in on_disk.replace("[.]", ".")  # the live key map is read
        assert KEYS["bob"].split("-")[-1] not in on_disk
        old_key_body = old_tls[1].decode().splitlines()[1]
        assert old_key_body not in on_disk and new_tls[1].decode().splitlines()[1] in on_disk


def test_the_release_reaches_an_ssh_host_on_its_port_as_the_engine_sends_it() -> None:
    """Numbers reach a dynamic provider as floats: the port must still be ssh's integer."""
    from components.docker.nginx_reload import exec_argv

    argv = exec_argv(
        "ssh://glm@10.0.0.2:2222", {"opts": ["-o", "BatchMode=yes"], "port": 2222.0, "address": "10.0.0.2"},
        "c-nginx", "r1",
    )  # fmt: skip
    assert argv[:6] == ["ssh", "-o", "BatchMode=yes", "-p", "2222", "10.0.0.2"]
    assert argv[6] == "--" and argv[7].startswith("docker exec -i c-nginx /bin/sh -c ")


def test_clients_sending_back_to_back_lose_no_request_across_reloads(sim_port: int) -> None:
    """A reload closes the old workers' idle keep-alive connections; a request a client sent on one
    at that moment was lost ("Server disconnected without sending a response": 3 short requests of
    486 in the fleet test's load, 2-3 per 20 reloads of a bare nginx). The front keeps no client
    connection open between requests, so there is nothing for a reload to close."""
    with live_front(sim_port) as front:
        front.apply(front.props(KEYS))
        stop, lock = threading.Event(), threading.Lock()
        got: Counter[str] = Counter()

        def client() -> None:
            headers = {"Authorization": f"Bearer {KEYS['alice']}"}
            with httpx.Client(timeout=30, trust_env=False, headers=headers) as session:
                while not stop.is_set():
                    try:
                        what = str(session.get(f"{front.base}/v1/models").status_code)
                    except httpx.HTTPError as err:
                        what = type(err).__name__
                    with lock:
                        got[what] += 1

        clients = [threading.Thread(target=client, daemon=True) for _ in range(4)]
        for c in clients:
            c.start()
        try:
            for n in range(8):
                extra = {f"reload-{n}": f"sk-reload-{n}-7c1d2e3f4a5b6c7d8e"}
                front.apply(front.props({**KEYS, **extra}))
        finally:
            stop.set()
            for c in clients:
                c.join(30)
        # Every request got an answer (200, or 429 from the key's rate limit); none was lost.
        assert all(what.isdigit() for what in got) and got.get("200", 0) > 50, got
        response = httpx.get(f"{front.base}/v1/models", headers={"Authorization": f"Bearer {KEYS['alice']}"})
        assert response.headers["connection"] == "close"
