"""The Nginx front, proven with the real ``nginx`` binary.

Every stack's rendered ``nginx.conf`` goes through ``nginx -t``; then real Nginx processes run on
loopback in front of the vLLM-protocol simulator (``images/vllm-sim``) and the real ``openai``
client checks keys, streaming, limits, blocked routes and upstream failures. Processes are
started per module, bound to 127.0.0.1 and stopped by their own pid.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pulumi
import pytest
from pulumi.runtime import rpc

from components.config import ConfigError, StackConfig
from components.docker.nginx_front import NginxFront, NginxFrontArgs, public_url
from components.docker.nginx_reload import START_COMMAND
from components.profiles import PROFILES
from components.render.nginx_conf import (
    API_KEYS_FILE,
    CONF_FILE,
    METRICS_KEYS_FILE,
    TLS_CERT,
    TLS_KEY,
    render_front_files,
    render_nginx_conf,
    render_release_conf,
)
from components.render.nginx_meter import MeterRoute
from components.render.openai_errors import no_replica_body
from components.template import render_template
from tests.conftest import TEST_HOST_KEY, construct, redacted
from tests.engine import free_port
from tests.front_rig import (
    KEYS,
    METRICS,
    NGINX,
    SERVED,
    UNLIMITED_ADDRESS,
    Front,
    RecordingUpstream,
    assert_forward_secret_tls,
    nginx_argv,
    nginx_front,
    recording_upstream,
    running,
    runtime_dir,
    self_signed,
    spread_over_time,
    stack,
    vllm_sim,
    wait_for_port,
)

HARDWARE = list(PROFILES)
ARITHMETIC = [{"role": "user", "content": "What is 13×17? Answer with the number only."}]


def raw_get(port: int, path: str, headers: dict[str, str]) -> tuple[int, str]:
    """GET with the path sent byte for byte (httpx would remove `..` before sending)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


# ---- pure rendering --------------------------------------------------------------------------


@pytest.mark.parametrize("hardware", HARDWARE)
def test_rendered_conf_has_the_seed_directives(hardware: str) -> None:
    conf = render_nginx_conf(stack(hardware).front, "vllm:8000", KEYS)
    for directive in [
        "pid /tmp/nginx.pid;",
        "error_log /dev/stderr warn;",
        "server_tokens off;",
        "server vllm:8000;",
        "keepalive 32;",
        "listen 8080;",
        "client_max_body_size 20m;",
        "proxy_http_version 1.1;",
        "proxy_buffering off;",
        'proxy_set_header Connection "";',
        'proxy_set_header Authorization "";',
        "proxy_read_timeout 600s;",
        "proxy_send_timeout 600s;",
        "proxy_connect_timeout 2s;",
        "error_page 502 503 = @upstream_unavailable;",
        "proxy_pass http://vllm/v1/chat/completions;",
        "proxy_pass http://vllm/v1/models;",
        "proxy_pass http://vllm/health;",
    ]:
        assert directive in conf, directive
    # On by default (issue 26): keys per key, everything else per client address.
    assert "limit_req zone=per_api_key burst=20 nodelay;" in conf
    assert "limit_req zone=per_address burst=20 nodelay;" in conf
    assert " ssl" not in conf
    assert "$http_authorization" in conf and '$http_authorization"' not in conf


def test_rendered_conf_follows_front_config() -> None:
    config = stack(
        "ascend",
        front={
            "maxBodySize": "5m", "readTimeoutSeconds": 900, "sendTimeoutSeconds": 300,
            "keepalive": 8, "rateLimit": {"enabled": True, "requestsPerSecond": 3, "burst": 7},
        },
    )  # fmt: skip
    conf = render_nginx_conf(config.front, "vllm:8077", KEYS, tls=True)
    assert "client_max_body_size 5m;" in conf
    assert "proxy_read_timeout 900s;" in conf and "proxy_send_timeout 300s;" in conf
    assert "keepalive 8;" in conf
    assert "limit_req_zone $api_client zone=per_api_key:10m rate=3r/s;" in conf
    assert "limit_req zone=per_api_key burst=7 nodelay;" in conf
    assert "listen 8080 ssl;" in conf
    assert "ssl_certificate /etc/nginx/tls/tls.crt;" in conf
    assert "ssl_certificate_key /etc/nginx/tls/tls.key;" in conf


def test_keys_are_sorted_case_sensitive_and_never_in_the_log_format() -> None:
    front = stack("local").front
    forward = render_nginx_conf(front, "vllm:8000", {"alice": KEYS["alice"], "bob": KEYS["bob"]})
    backward = render_nginx_conf(front, "vllm:8000", {"bob": KEYS["bob"], "alice": KEYS["alice"]})
    assert forward == backward
    assert forward.index('"alice";') < forward.index('"bob";')
    # A `~` regex (case-sensitive); `.` and `+` made literal.
    assert '"~^Bearer sk-bob[.][+]/~_-0d08fac0336e7974==$" "bob";' in forward
    log_format = next(line for line in forward.splitlines() if "log_format" in line)
    assert '"client":"$api_client$metrics_log_client"' in log_format
    assert '"upstream_response_time":"$upstream_response_time"' in log_format
    assert "authorization" not in log_format.lower() and '$request"' not in log_format


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({}, "glm:apiKeys is empty"),
        ({"alice": "sk-has space-0123456789"}, "glm:apiKeys.alice: the key must be a bearer token"),
        ({"alice": 'sk-quote"0123456789abc'}, "glm:apiKeys.alice: the key must be a bearer token"),
        ({"alice": "sk-dollar$0123456789ab"}, "glm:apiKeys.alice: the key must be a bearer token"),
        ({"alice": "sk-short"}, "glm:apiKeys.alice is 8 characters; use at least 16"),
        ({"al ice": KEYS["alice"]}, "glm:apiKeys.al ice: the client name"),
        ({"alice": KEYS["alice"], "carol": KEYS["alice"]}, "glm:apiKeys.carol and glm:apiKeys.alice"),
    ],
)
def test_unsafe_keys_are_refused_without_echoing_them(keys: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as raised:
        render_nginx_conf(stack("local").front, "vllm:8000", keys)
    for key in keys.values():
        assert key not in str(raised.value)


def test_values_that_would_break_the_conf_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"glm:front\.maxBodySize='20m; include /etc/passwd'"):
        render_nginx_conf(
            stack("local", front={"maxBodySize": "20m; include /etc/passwd"}).front, "vllm:8000", KEYS
        )
    with pytest.raises(ValueError, match="is not host:port"):
        render_nginx_conf(stack("local").front, "vllm:8000; }", KEYS)
    assert "server [::1]:8000;" in render_nginx_conf(stack("local").front, "[::1]:8000", KEYS)


def test_public_url() -> None:
    a800, local, tls = stack("a800"), stack("local"), stack("rtx5090", front={"tls": True})
    assert public_url(a800.front, a800.target.host) == "http://gpu01:8008/v1"
    assert public_url(local.front, local.target.host) == "http://127.0.0.1:8080/v1"
    assert public_url(tls.front, tls.target.host) == "https://gpu01:8000/v1"


# ---- nginx -t on every stack -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_pair() -> tuple[bytes, bytes]:
    return self_signed()


@pytest.mark.parametrize("rate_limit", [False, True], ids=["no-rate-limit", "rate-limit"])
@pytest.mark.parametrize("tls", [False, True], ids=["http", "tls"])
@pytest.mark.parametrize("hardware", HARDWARE)
def test_nginx_accepts_the_rendered_conf(
    hardware: str, tls: bool, rate_limit: bool, tls_pair: tuple[bytes, bytes], tmp_path: Path
) -> None:
    config = stack(hardware, front={"tls": tls, "rateLimit": {"enabled": rate_limit}})
    (tmp_path / "tls.crt").write_bytes(tls_pair[0])
    (tmp_path / "tls.key").write_bytes(tls_pair[1])
    # The production listen port (8080) and upstream; only file locations point at tmp_path.
    conf = render_nginx_conf(
        config.front, f"127.0.0.1:{config.serving.port}", KEYS, tls=config.front.tls,
        runtime_dir=str(tmp_path), tls_dir=str(tmp_path),
    )  # fmt: skip
    path = tmp_path / "nginx.conf"
    path.write_text(conf)
    result = subprocess.run(
        [NGINX, "-t", "-c", str(path), "-p", str(tmp_path), "-e", "stderr"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


def test_nginx_t_rejects_a_broken_conf(tmp_path: Path) -> None:
    """The check above can fail: the same conf with one directive misspelt does not pass."""
    conf = render_nginx_conf(stack("local").front, "127.0.0.1:8000", KEYS, runtime_dir=str(tmp_path))
    (tmp_path / "nginx.conf").write_text(conf.replace("proxy_buffering off;", "proxy_bufering off;"))
    result = subprocess.run(
        [NGINX, "-t", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path), "-e", "stderr"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode != 0 and "proxy_bufering" in result.stderr


@pytest.mark.parametrize("tls", [False, True], ids=["http", "tls"])
@pytest.mark.parametrize("hardware", HARDWARE)
def test_nginx_accepts_a_release_directory(
    hardware: str, tls: bool, tls_pair: tuple[bytes, bytes], tmp_path: Path
) -> None:
    """What NginxReload delivers: nginx.conf with no secret in it, the key maps and TLS pair beside it."""
    config = stack(hardware, front={"tls": tls, "rateLimit": {"enabled": True}})
    pair = (tls_pair[0].decode(), tls_pair[1].decode()) if tls else None
    files = render_front_files(config.front, KEYS, METRICS, pair, runtime_dir=str(tmp_path))
    assert sorted(files) == sorted(
        [CONF_FILE, API_KEYS_FILE, METRICS_KEYS_FILE, *([TLS_CERT, TLS_KEY] if tls else [])]
    )
    assert all(key not in files[CONF_FILE] for key in [*KEYS.values(), *METRICS.values()])
    assert f"include {API_KEYS_FILE};" in files[CONF_FILE]
    assert files[METRICS_KEYS_FILE] == f'"~^Bearer {METRICS["prom"]}$" "prom";\n'
    release = tmp_path / "releases" / "r1"
    release.mkdir(parents=True)
    for name, text in files.items():
        (release / name).write_text(text)
    # Run from elsewhere: relative names resolve against the conf's own directory.
    result = subprocess.run(
        [NGINX, "-t", "-c", str(release / CONF_FILE), "-e", "stderr"],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_the_template_renderer_is_strict() -> None:
    assert render_template("a {{x}};\n    {{opt}}\nb;\n", {"x": "1", "opt": ""}) == "a 1;\nb;\n"
    with pytest.raises(ValueError, match="do not match"):
        render_template("a {{x}};\n", {})
    with pytest.raises(ValueError, match="do not match"):
        render_template("a;\n", {"x": "1"})
    # A value is inserted as is, never expanded again.
    assert render_template("{{x}}\n", {"x": "{{y}}"}) == "{{y}}\n"


def test_metrics_keys_are_checked_like_api_keys_and_apart_from_them() -> None:
    with pytest.raises(ConfigError, match=r"glm:metricsKeys\.prom and glm:apiKeys\.alice hold the same key"):
        render_front_files(stack("local").front, KEYS, {"prom": KEYS["alice"]})
    with pytest.raises(ConfigError, match=r"glm:metricsKeys\.prom is 8 characters"):
        render_front_files(stack("local").front, KEYS, {"prom": "sk-short"})


# ---- a real front in front of the simulator --------------------------------------------------


@pytest.fixture(scope="module")
def sim_port() -> Iterator[int]:
    with vllm_sim() as port:
        yield port


@pytest.fixture(scope="module")
def front(sim_port: int) -> Iterator[Front]:
    with nginx_front(stack("local", front=UNLIMITED_ADDRESS), f"127.0.0.1:{sim_port}") as running_front:
        yield running_front


def test_request_without_a_valid_key_gets_openai_401(front: Front) -> None:
    expected = {
        "message": "Invalid or missing API key. Send the header `Authorization: Bearer <your key>`.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
    for key in ["sk-not-a-key-0000000000000", KEYS["alice"].upper(), KEYS["alice"] + "x"]:
        with pytest.raises(openai.AuthenticationError) as raised:
            front.client(key).models.list()
        assert raised.value.status_code == 401
        assert raised.value.response.json() == {"error": expected}
        assert raised.value.response.headers["content-type"] == "application/json"
    bare = httpx.post(f"{front.base}/v1/chat/completions", json={"model": SERVED}, timeout=5)
    assert bare.status_code == 401 and bare.json()["error"]["code"] == "invalid_api_key"
    assert bare.headers["www-authenticate"].startswith("Bearer")
    assert bare.headers["server"] == "nginx"  # server_tokens off: no version


@pytest.mark.parametrize("client_name", ["alice", "bob"])
def test_each_key_gets_an_answer(front: Front, client_name: str) -> None:
    client = front.client(KEYS[client_name])
    assert [m.id for m in client.models.list().data] == [SERVED]
    reply = client.chat.completions.create(
        model=SERVED,
        messages=ARITHMETIC,
        max_tokens=200,
        extra_body={"chat_template_kwargs": {"reasoning_effort": "low"}},
    )
    assert reply.choices[0].message.content.strip() == "221"


def test_spread_check_can_fail() -> None:
    assert not spread_over_time([1.98 + i * 0.001 for i in range(40)], 2.0)  # buffered: all at end
    assert not spread_over_time([0.1, 0.2, 1.9], 2.0)  # too few chunks to judge
    assert spread_over_time([0.05 * i for i in range(1, 41)], 2.0)


def test_sse_chunks_stream_through_unbuffered(front: Front) -> None:
    start = time.monotonic()
    arrivals: list[float] = []
    text = []
    stream = front.client().chat.completions.create(
        model=SERVED,
        messages=[{"role": "user", "content": "Tell me a long story about a cat."}],
        max_tokens=40,
        stream=True,
    )
    for chunk in stream:
        arrivals.append(time.monotonic() - start)
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
    total = time.monotonic() - start
    # 40 tokens at 0.05 s each: about 2 s, and chunks spread evenly over it.
    assert total >= 1.5, f"the stream took {total:.2f} s; the simulator should pace it"
    assert spread_over_time(arrivals, total), f"chunks arrived at {arrivals} of {total:.2f} s"
    assert "".join(text)


def test_body_over_the_limit_gets_json_413(front: Front) -> None:
    too_big = "x" * (21 * 1024 * 1024)  # client_max_body_size 20m
    with pytest.raises(openai.APIStatusError) as raised:
        front.client().chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": too_big}], max_tokens=1
        )
    assert raised.value.status_code == 413
    assert raised.value.response.json()["error"]["code"] == "request_too_large"
    # Just under the limit is accepted by the front (vLLM then judges the length).
    ok = httpx.post(
        f"{front.base}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEYS['alice']}"},
        json={"model": SERVED, "messages": ARITHMETIC, "max_tokens": 50},
        timeout=30,
    )
    assert ok.status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/tokenize", "/detokenize", "/health", "/ping", "/",
        "/v1", "/docs", "/openapi.json", "/metrics/x", "/version/x",
    ],
)  # fmt: skip
def test_vllm_internal_routes_are_not_reachable(front: Front, path: str) -> None:
    for headers in ({}, {"Authorization": f"Bearer {KEYS['alice']}"}):
        status, body = raw_get(front.port, path, headers)
        assert status == 404, (path, status, body[:200])
        assert json.loads(body)["error"]["code"] == "not_found"
        assert "vllm:" not in body


@pytest.mark.parametrize(
    "path", ["/metrics", "/v1/../metrics", "/v1/%2e%2e/metrics", "/version", "/v1/%2e%2e/version"]
)
def test_metrics_need_a_metrics_key_and_inference_keys_do_not_have_one(front: Front, path: str) -> None:
    for key in (None, KEYS["alice"], KEYS["bob"], "sk-not-a-key-0000000000000", METRICS["prom"].upper()):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        status, body = raw_get(front.port, path, headers)
        assert status == 401, (path, key, status, body[:200])
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
        assert "vllm:" not in body
    status, body = raw_get(front.port, path, {"Authorization": f"Bearer {METRICS['prom']}"})
    assert status == 200
    assert ("vllm:num_requests_running" in body) if "metrics" in path else (json.loads(body)["version"])


@pytest.mark.parametrize("path", ["/metrics", "/v1/%2e%2e/metrics", "/version"])
def test_the_metrics_401_says_a_metrics_key_is_needed(front: Front, path: str) -> None:
    """Issue 32 item 8: an inference key on /metrics was told only "Invalid or missing API key"."""
    for key in (KEYS["alice"], None):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        reply = httpx.get(f"{front.base}{path}", headers=headers, timeout=5)
        assert reply.status_code == 401 and reply.headers["content-type"] == "application/json"
        assert reply.headers["www-authenticate"].startswith("Bearer")
        error = reply.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
        assert "metrics key" in error["message"] and "glm:metricsKeys" in error["message"], error
        assert "not an inference key (glm:apiKeys)" in error["message"], error
    # The inference routes keep their own message.
    inference = httpx.get(f"{front.base}/v1/models", headers={"Authorization": "Bearer x"}, timeout=5)
    assert "metrics" not in inference.json()["error"]["message"]


def test_a_metrics_key_reads_metrics_and_nothing_else(front: Front) -> None:
    auth = {"Authorization": f"Bearer {METRICS['prom']}"}
    for method, path in ALLOWED:
        reply = httpx.request(method, f"{front.base}{path}", headers=auth, content=b"{}", timeout=5)
        assert reply.status_code == 401, (path, reply.text)
    posted = httpx.post(f"{front.base}/metrics", headers=auth, content=b"{}", timeout=5)
    assert posted.status_code == 405 and posted.json()["error"]["code"] == "method_not_allowed"
    assert posted.headers["allow"] == "GET"
    time.sleep(0.2)
    records = [json.loads(line) for line in front.log.read_text().splitlines() if line.startswith("{")]
    scraped = [r for r in records if r["uri"] == "/metrics" and r["status"] == 200]
    assert scraped and all(r["client"] == "metrics:prom" for r in scraped)
    assert METRICS["prom"] not in front.log.read_text()


def test_simulator_does_serve_those_routes(sim_port: int) -> None:
    """Control for the test above: the routes exist upstream."""
    assert "vllm:num_requests_running" in httpx.get(f"http://127.0.0.1:{sim_port}/metrics").text
    assert httpx.get(f"http://127.0.0.1:{sim_port}/version").status_code == 200


def test_healthz_reflects_vllm_health_without_a_key(front: Front) -> None:
    reply = httpx.get(f"{front.base}/healthz", timeout=5)
    assert reply.status_code == 200


GATE_FAILURE = (
    "the replica on host 'gpu02.example.internal' failed its gate at step 'arithmetic': asked "
    "'What is 13 * 17? Answer with the number only.', got '222' (glm53-flash-gpu02)"
)
"""What the rotation keeps as a replica's reason (the gate's wording, tests/test_rotation.py)."""


def test_healthz_says_only_down_without_a_metrics_key(sim_port: int) -> None:
    """Issue 33 finding 2: while no replica is in rotation, /healthz without a key (or with an
    inference key) says down, not why; a metrics key and the inference routes still get the why."""
    directory, port = runtime_dir(), free_port()
    rotation_dir = directory / "rotation"
    rotation_dir.mkdir()
    files = render_front_files(
        stack("local").front, KEYS, METRICS, listen=f"127.0.0.1:{port}", runtime_dir=str(directory),
        rotation_dir=str(rotation_dir), status_listen=f"127.0.0.1:{free_port()}",
    )  # fmt: skip
    for name, text in files.items():
        (directory / name).write_text(text)
    # As rotation.sh renders a replica kept out: its server `down`, its reason in reason.map.
    (rotation_dir / "upstream.conf").write_text(f"server 127.0.0.1:{sim_port} down;\n")
    (rotation_dir / "reason.map").write_text(f"glm '{no_replica_body(GATE_FAILURE)}';\n")
    argv = nginx_argv(directory)
    base = f"http://127.0.0.1:{port}"
    with running(argv, directory / "nginx.log") as proc:
        wait_for_port(port, proc)
        for headers in ({}, {"Authorization": f"Bearer {KEYS['alice']}"}):
            down = httpx.get(f"{base}/healthz", headers=headers, timeout=5)
            assert down.status_code == 503 and down.json()["error"]["code"] == "upstream_unavailable"
            assert "gpu02" not in down.text and "13 * 17" not in down.text, down.text
        detail = httpx.get(
            f"{base}/healthz", headers={"Authorization": f"Bearer {METRICS['prom']}"}, timeout=5
        )
        assert detail.status_code == 503 and "gpu02.example.internal" in detail.json()["error"]["message"]
        models = httpx.get(
            f"{base}/v1/models", headers={"Authorization": f"Bearer {KEYS['alice']}"}, timeout=5
        )
        assert models.status_code == 503 and models.json()["error"]["code"] == "no_replica_in_rotation"
        assert httpx.get(f"{base}/v1/models", timeout=5).status_code == 401
    shutil.rmtree(directory, ignore_errors=True)


def test_access_log_is_json_with_client_name_and_no_key(front: Front) -> None:
    front.client(KEYS["bob"]).models.list()
    time.sleep(0.2)
    output = front.log.read_text()
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    mine = [r for r in records if r["client"] == "bob" and r["uri"] == "/v1/models"]
    assert mine, output[-2000:]
    assert mine[-1]["status"] == 200
    assert float(mine[-1]["upstream_response_time"]) >= 0
    assert mine[-1]["upstream_addr"].startswith("127.0.0.1:")
    assert all(key not in output for key in KEYS.values())
    assert any(r["client"] == "" and r["status"] == 401 for r in records)


# ---- failures and options on their own fronts ------------------------------------------------


def test_upstream_down_gives_fast_json_503() -> None:
    with nginx_front(stack("local"), f"127.0.0.1:{free_port()}") as down:
        start = time.monotonic()
        with pytest.raises(openai.InternalServerError) as raised:
            down.client().chat.completions.create(model=SERVED, messages=ARITHMETIC)
        assert time.monotonic() - start < 2.0
        assert raised.value.status_code == 503
        error = raised.value.response.json()["error"]
        assert error["code"] == "upstream_unavailable" and error["type"] == "server_error"
        health = httpx.get(f"{down.base}/healthz", timeout=5)
        assert health.status_code == 503 and health.json()["error"]["code"] == "upstream_unavailable"
        assert health.headers["retry-after"] == "10"


def test_front_recovers_when_vllm_finishes_loading() -> None:
    """vLLM refuses connections while loading; the front answers 503 then 200, no restart."""
    with (
        vllm_sim({"VLLM_SIM_LOADING_SECONDS": "3"}, wait_ready=False) as port,
        nginx_front(stack("local"), f"127.0.0.1:{port}") as loading,
    ):
        first = httpx.get(f"{loading.base}/healthz", timeout=5)
        assert first.status_code == 503
        deadline = time.monotonic() + 20
        while httpx.get(f"{loading.base}/healthz", timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "the front never saw the simulator come up"
            time.sleep(0.2)
        reply = loading.client().chat.completions.create(model=SERVED, messages=ARITHMETIC)
        assert reply.choices[0].message.content.strip() == "221"


@contextlib.contextmanager
def dropping_upstream() -> Iterator[str]:
    """A loopback address whose connections time out: a listener whose accept queue is full (Linux
    drops a SYN it has no room for), as a node drops the connection to an empty Service."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = [socket.socket() for _ in range(3)]
    for filler in fillers:
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
    time.sleep(0.2)
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        for sock in (*fillers, listener):
            sock.close()


def silent_upstream() -> tuple[str, socket.socket]:
    """A loopback address that accepts connections and never answers (a stuck engine)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    return f"127.0.0.1:{listener.getsockname()[1]}", listener


def test_a_replica_never_reached_is_unavailable_and_a_silent_one_is_a_timeout() -> None:
    """A connection that times out reached no model server: the client gets the 503 that says so,
    with Retry-After, not the 504 "did not answer in time" (found on the cluster, where a node
    dropped connections to a Service with no Ready pod). An engine that accepted the request and
    sent nothing is still the 504."""
    from tests.metered_front import metered_front

    config, silent = (
        stack("local"),
        stack("local", front={"readTimeoutSeconds": 1, "usageMeter": {"queueSeconds": 0}}),
    )
    with dropping_upstream() as address, nginx_front(config, address) as front:
        resp = httpx.post(f"{front.base}/v1/chat/completions", headers={"Authorization": f"Bearer {KEYS['alice']}"},
                          json={"model": SERVED, "messages": ARITHMETIC}, timeout=30)  # fmt: skip
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "upstream_unavailable" and resp.headers["retry-after"] == "10"
    with dropping_upstream() as address, metered_front(config, KEYS, upstream=address) as metered:
        resp = httpx.post(f"{metered.base}/v1/chat/completions", headers={"Authorization": f"Bearer {KEYS['alice']}"},
                          json={"model": SERVED, "messages": ARITHMETIC}, timeout=30)  # fmt: skip
        assert resp.status_code == 503, resp.text  # through the usage meter (the default) the same
        assert resp.json()["error"]["code"] == "upstream_unavailable" and resp.headers["retry-after"] == "10"
    address, listener = silent_upstream()
    with listener, nginx_front(silent, address) as front:
        resp = httpx.post(f"{front.base}/v1/chat/completions", headers={"Authorization": f"Bearer {KEYS['alice']}"},
                          json={"model": SERVED, "messages": ARITHMETIC}, timeout=30)  # fmt: skip
        assert resp.status_code == 504, resp.text
        assert resp.json()["error"]["code"] == "upstream_timeout" and "retry-after" not in resp.headers


def test_rate_limit_per_key_gives_json_429(sim_port: int) -> None:
    config = stack("local", front={"rateLimit": {"enabled": True, "requestsPerSecond": 1, "burst": 2}})
    with nginx_front(config, f"127.0.0.1:{sim_port}") as limited:
        auth = {"Authorization": f"Bearer {KEYS['bob']}"}
        with httpx.Client(base_url=limited.base, headers=auth, timeout=5) as client:
            replies = [client.get("/v1/models") for _ in range(8)]
        statuses = [r.status_code for r in replies]
        assert statuses[:3] == [200, 200, 200], statuses  # 1 + burst 2
        assert 429 in statuses, statuses
        refused = next(r for r in replies if r.status_code == 429)
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert refused.headers["retry-after"] == "1"
        # Per key: alice still has her own budget.
        assert limited.client(KEYS["alice"]).models.list().data[0].id == SERVED


def test_default_limits_stop_key_guessing_per_address_but_not_key_holders(sim_port: int) -> None:
    """Issue 26: without a key nothing was limited (the 401 came before any limit counted)."""
    with nginx_front(stack("local"), f"127.0.0.1:{sim_port}") as limited, httpx.Client(timeout=5) as client:
        # One kept-alive client: 40 guesses well inside a second, whatever the machine's load.
        guesses = [
            client.get(f"{limited.base}/v1/models", headers={"Authorization": f"Bearer sk-guess-{i:024x}"})
            for i in range(40)
        ]
        statuses = [r.status_code for r in guesses]
        assert statuses[:21] == [401] * 21, statuses  # 1 + the default burst 20
        refused = [r for r in guesses if r.status_code == 429]
        assert refused and refused[0].json()["error"]["code"] == "rate_limit_exceeded"
        # The metrics routes count per address too; a key holder keeps its own budget.
        metrics = [
            client.get(f"{limited.base}/metrics", headers={"Authorization": f"Bearer {METRICS['prom']}"})
            for _ in range(3)
        ]
        assert 429 in [m.status_code for m in metrics]
        assert limited.client(KEYS["alice"]).models.list().data[0].id == SERVED


def test_default_limits_bound_requests_in_flight_per_key(sim_port: int) -> None:
    config = stack("local", front={"rateLimit": {"connectionsPerKey": 2, "burst": 50}})
    with nginx_front(config, f"127.0.0.1:{sim_port}") as limited:
        body = {"model": SERVED, "messages": ARITHMETIC, "stream": True, "max_tokens": 40}
        auth = {"Authorization": f"Bearer {KEYS['alice']}"}
        with (
            httpx.Client(base_url=limited.base, headers=auth, timeout=30) as client,
            client.stream("POST", "/v1/chat/completions", json=body) as first,
            client.stream("POST", "/v1/chat/completions", json=body) as second,
        ):
            third = client.post("/v1/chat/completions", json=body)
            assert (first.status_code, second.status_code, third.status_code) == (200, 200, 429)
            assert third.json()["error"]["code"] == "rate_limit_exceeded"


def test_an_oversized_header_gets_the_json_error(front: Front) -> None:
    """nginx's own 494 page is HTML; every error of the front has OpenAI's shape."""
    reply = httpx.get(f"{front.base}/v1/models", headers={"X-Large": "a" * 20_000}, timeout=5)
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "request_header_too_large"


def test_tls_front_serves_https(sim_port: int, tls_pair: tuple[bytes, bytes], tmp_path: Path) -> None:
    cert = tmp_path / "ca.pem"
    cert.write_bytes(tls_pair[0])
    trust = ssl.create_default_context(cafile=str(cert))
    with nginx_front(stack("local", front={"tls": True}), f"127.0.0.1:{sim_port}", tls_pair) as tls:
        assert tls.base.startswith("https://")
        assert httpx.get(f"{tls.base}/healthz", verify=trust, timeout=5).status_code == 200
        with httpx.Client(verify=trust) as http_client:
            reply = tls.client(http_client=http_client).chat.completions.create(
                model=SERVED, messages=ARITHMETIC
            )
        assert reply.choices[0].message.content.strip() == "221"
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{tls.port}/healthz", timeout=5).raise_for_status()


def test_tls_refuses_sha1_suites_and_issues_no_session_tickets(
    sim_port: int, tls_pair: tuple[bytes, bytes]
) -> None:
    with nginx_front(stack("local", front={"tls": True}), f"127.0.0.1:{sim_port}", tls_pair) as tls:
        assert_forward_secret_tls(tls.port)


def test_key_stays_at_the_front_and_paths_are_normalized() -> None:
    with recording_upstream() as port, nginx_front(stack("local"), f"127.0.0.1:{port}") as fwd:
        auth = {"Authorization": f"Bearer {KEYS['alice']}"}
        for path in ["/v1/models", "/v1/chat/../models", "/metrics/../v1/models"]:
            assert raw_get(fwd.port, path, auth)[0] == 200
    assert [path for _, path, _ in RecordingUpstream.seen] == ["/v1/models"] * 3
    for _, _, headers in RecordingUpstream.seen:
        assert "authorization" not in headers
        assert len(headers["x-request-id"]) == 32
        assert headers["x-forwarded-for"] == "127.0.0.1"


# ---- the component under Pulumi mocks --------------------------------------------------------


RELOAD = "pulumi-python:dynamic:Resource"


def front_args(
    config: StackConfig, network_name: str, api_keys: pulumi.Output[dict[str, str]], **more: Any
) -> NginxFrontArgs:
    """The front of ``config``'s stack on its front host, as deploy() builds it."""
    return NginxFrontArgs(config.front, config.target.host, config.container, network_name, api_keys, **more)


@pytest.mark.parametrize("hardware", HARDWARE)
def test_nginx_front_under_mocks(hardware: str) -> None:
    config = stack(hardware)
    mocks, outputs = construct(
        lambda: NginxFront("front", front_args(config, "glm-net", pulumi.Output.secret(KEYS)))
    )
    assert {name: typ for name, (typ, _) in mocks.registered.items()} == {
        "front": "glm:front:NginxFront",
        "front-image": "docker:index/remoteImage:RemoteImage",
        "front-nginx": "docker:index/container:Container",
        "front-config": RELOAD,
        "front-rotation-requests": "docker:index/volume:Volume",
    }
    assert mocks.registered["front-image"][1]["name"] == config.front.image
    assert mocks.registered["front-image"][1]["keepLocally"] is True
    inputs = mocks.registered["front-nginx"][1]
    assert inputs["name"] == f"{config.container.name}-nginx"
    assert inputs["image"] == f"sha256:{'ab' * 32}"
    assert inputs["networksAdvanced"] == [{"name": "glm-net"}]
    assert [{k: p[k] for k in ("internal", "external", "ip")} for p in inputs["ports"]] == [
        {"internal": 8080, "external": config.front.port, "ip": config.front.bind_address}
    ]
    assert inputs["restart"] == "unless-stopped"
    assert inputs["logDriver"] == "json-file" and inputs["logOpts"]["max-size"] == "100m"
    assert {"label": "glm53.role", "value": "front"} in inputs["labels"]  # what the policy pack looks for
    assert "hosts" not in inputs  # vLLM is on the private network, by its alias
    # The container does not depend on the config: no uploads (each change would replace it); its
    # one volume is the semantic probe's requests directory (components/docker/rotation_requests.py).
    assert "uploads" not in inputs
    assert inputs["volumes"] == [
        {
            "volumeName": f"{config.container.name}-rotation-requests",
            "containerPath": "/etc/nginx/glm/rotation-requests",
        }
    ]
    # The request loop in the background, then the same nginx as PID 1.
    [command] = inputs["command"]
    assert inputs["entrypoints"] == ["/bin/sh", "-c"] and command.endswith(
        f"rotation-requests.sh & {START_COMMAND}"
    )
    assert inputs["destroyGraceSeconds"] == 30
    reload = mocks.registered["front-config"][1]
    # The status page's Prometheus: the stack's, by its name on the private network.
    prometheus = f"{config.container.name}-prometheus:9090"
    assert reload["nginx_conf"] == render_release_conf(config.front, prometheus=prometheus)
    assert reload["api_key_names"] == {"alice": True, "bob": True} and reload["metrics_key_names"] == {}
    assert reload["container"] == f"{config.container.name}-nginx"
    if hardware == "local":
        assert "ssh" not in reload and reload["docker_host"] == "unix:///var/run/docker.sock"
    else:
        assert {k: reload["ssh"][k] for k in ("address", "port")} == {"address": "gpu01", "port": 22}
    files = rpc.unwrap_rpc_secret(reload["secret_files"])
    assert files == {
        API_KEYS_FILE: render_front_files(config.front, KEYS)[API_KEYS_FILE],
        METRICS_KEYS_FILE: "",
    }
    assert outputs == {
        "url": public_url(config.front, config.target.host),
        "container_name": f"{config.container.name}-nginx",
    }


def test_a_reviewer_sees_keys_by_name_and_with_the_meter_their_weights() -> None:
    """Issue 47, 4: adding a key read as renames of a sorted list, and a weight change only as the
    secret files' digest. By name, with the weights where the meter shares the engine's slots."""
    meter = {"front": {"usageMeter": {"weights": {"bob": 3}}}}
    config = stack("local", **meter)
    mocks, _ = construct(
        lambda: NginxFront(
            "front", front_args(config, "net", pulumi.Output.secret(KEYS), meter=MeterRoute(8))
        )
    )
    assert mocks.registered["front-config"][1]["api_key_names"] == {"alice": 1, "bob": 3}
    # Without the meter's fair share there is no weight to show: the names alone.
    unshared = stack("local", front={"usageMeter": {"weights": {"bob": 3}, "fairShare": False}})
    mocks, _ = construct(
        lambda: NginxFront(
            "front", front_args(unshared, "net", pulumi.Output.secret(KEYS), meter=MeterRoute(8))
        )
    )
    assert mocks.registered["front-config"][1]["api_key_names"] == {"alice": True, "bob": True}


def test_ssh_targets_reload_with_the_docker_providers_host_key_check() -> None:
    config = stack("a800")
    mocks, _ = construct(lambda: NginxFront("front", front_args(config, "net", pulumi.Output.secret(KEYS))))
    opts = mocks.registered["front-config"][1]["ssh"]["opts"]
    assert "StrictHostKeyChecking=yes" in opts and "UserKnownHostsFile=/dev/null" in opts
    assert f"KnownHostsCommand=/bin/echo gpu01 {TEST_HOST_KEY}" in opts
    assert "User=deploy" in opts


@pytest.mark.parametrize("secret_keys", [True, False], ids=["secret-keys", "plain-keys"])
def test_key_files_are_a_secret_and_keys_appear_nowhere_else(secret_keys: bool) -> None:
    keys = pulumi.Output.secret(KEYS) if secret_keys else pulumi.Output.from_input(KEYS)
    scrapers = pulumi.Output.secret(METRICS)
    config = stack("local")
    mocks, _ = construct(lambda: NginxFront("front", front_args(config, "net", keys, metrics_keys=scrapers)))
    reload = mocks.registered["front-config"][1]
    assert rpc.is_rpc_secret(reload["secret_files"])
    files = rpc.unwrap_rpc_secret(reload["secret_files"])
    assert KEYS["alice"] in files[API_KEYS_FILE] and METRICS["prom"] in files[METRICS_KEYS_FILE]
    # What a reviewer sees: names and hashes, in plain.
    assert reload["api_key_names"] == {"alice": True, "bob": True} and reload["metrics_key_names"] == {
        "prom": True
    }
    assert len(reload["secrets_digest"]) == 32 and len(reload["fingerprint"]) == 64
    visible = json.dumps(redacted(mocks.registered), default=str)
    assert all(key not in visible for key in [*KEYS.values(), *METRICS.values()])


def test_front_reaches_a_host_network_vllm_through_the_gateway() -> None:
    config = stack(
        "ascend", container={"networkMode": "host"}, serving={"host": "172.17.0.1"}, front={"port": 8078}
    )
    mocks, _ = construct(lambda: NginxFront("front", front_args(config, "net", pulumi.Output.secret(KEYS))))
    inputs = mocks.registered["front-nginx"][1]
    assert inputs["hosts"] == [{"host": "host.docker.internal", "ip": "host-gateway"}]
    # The release lists no replica: the rotation does, by the address each gate admitted.
    assert (
        "include /etc/nginx/glm/rotation/upstream.con[f];"
        in mocks.registered["front-config"][1]["nginx_conf"]
    )


def test_tls_files_are_delivered_with_the_key_secret() -> None:
    config = stack("a800", front={"tls": True})
    cert, key = "-----BEGIN CERTIFICATE-----\nx\n", "-----BEGIN PRIVATE KEY-----\ny\n"
    mocks, outputs = construct(
        lambda: NginxFront(
            "front",
            front_args(
                config,
                "net",
                pulumi.Output.secret(KEYS),
                tls_files=(pulumi.Output.secret(cert), pulumi.Output.secret(key)),
            ),
        )
    )
    reload = mocks.registered["front-config"][1]
    files = rpc.unwrap_rpc_secret(reload["secret_files"])
    assert files[TLS_CERT] == cert and files[TLS_KEY] == key
    assert reload["tls_certificate_sha256"] == hashlib.sha256(cert.encode()).hexdigest()
    assert "listen 8080 ssl;" in reload["nginx_conf"]
    assert "ssl_certificate tls.crt;" in reload["nginx_conf"]
    assert outputs["url"] == "https://gpu01:8008/v1"
    visible = json.dumps(redacted(mocks.registered), default=str)
    assert "PRIVATE KEY" not in visible


# ---- only the inference routes, no query strings in logs, JSON for bad requests (issue 13) -----


ALLOWED = [("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("GET", "/v1/models"),
           ("POST", "/v1/responses")]  # fmt: skip
REFUSED = [
    ("POST", "/v1/load_lora_adapter"), ("POST", "/v1/unload_lora_adapter"), ("POST", "/v1/embeddings"),
    ("POST", "/v1/score"), ("POST", "/v1/rerank"), ("POST", "/v1/audio/transcriptions"),
    ("GET", "/v1/models/x"), ("POST", "/v1/chat/completions/x"), ("POST", "/v1/chat/../load_lora_adapter"),
    ("POST", "/v1/Chat/Completions"), ("POST", "/v1/"),
]  # fmt: skip


def test_only_the_inference_routes_reach_vllm() -> None:
    auth = {"Authorization": f"Bearer {KEYS['alice']}", "Content-Type": "application/json"}
    with recording_upstream() as port, nginx_front(stack("local"), f"127.0.0.1:{port}") as fwd:
        for method, path in REFUSED:
            connection = http.client.HTTPConnection("127.0.0.1", fwd.port, timeout=5)
            connection.request(method, path, body=b"{}", headers=auth)
            response = connection.getresponse()
            body = response.read().decode()
            connection.close()
            assert response.status == 404, (path, response.status, body[:200])
            assert json.loads(body)["error"]["code"] == "not_found", body
            # Without a key, the answer is the 401 as for every /v1 route.
            bare = httpx.request(method, f"{fwd.base}{path}", timeout=5)
            assert bare.status_code in (401, 404) and bare.json()["error"]
        assert RecordingUpstream.seen == []
        for method, path in ALLOWED:
            reply = httpx.request(method, f"{fwd.base}{path}", headers=auth, content=b"{}", timeout=5)
            assert reply.status_code == 200, (path, reply.text)
    assert [(method, path) for method, path, _ in RecordingUpstream.seen] == ALLOWED


def test_query_strings_never_reach_the_logs() -> None:
    """The access log writes $uri; the error log writes the request line, so queries are refused first."""
    secret = "QuErYsEcReT0123456789"
    too_big = b"x" * (21 * 1024 * 1024)
    auth = {"Authorization": f"Bearer {KEYS['alice']}"}
    with nginx_front(stack("local"), f"127.0.0.1:{free_port()}") as down:
        for body in (too_big, b'{"model":"m"}'):  # a 413 and an upstream error both log at warn+
            reply = httpx.post(
                f"{down.base}/v1/chat/completions?token={secret}", headers=auth, content=body, timeout=10
            )
            assert reply.status_code == 400, reply.text
            assert reply.json()["error"]["code"] == "query_string_not_allowed"
        # Without a query, the same failures still log (the check above is not vacuous).
        assert httpx.post(f"{down.base}/v1/chat/completions", headers=auth, content=b"{}").status_code == 503
        time.sleep(0.2)
        log = down.log.read_text()
    assert "connect() failed" in log
    assert secret not in log


def test_duplicate_authorization_headers_get_the_json_error() -> None:
    request = (
        "GET /v1/models HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {KEYS['alice']}\r\nAuthorization: Bearer {KEYS['bob']}\r\n"
        "Connection: close\r\n\r\n"
    )
    raw = b""
    with (
        nginx_front(stack("local"), f"127.0.0.1:{free_port()}") as fwd,
        socket.create_connection(("127.0.0.1", fwd.port), timeout=5) as sock,
    ):
        sock.sendall(request.encode())
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.decode().partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 400"), head
    assert "application/json" in head
    assert json.loads(body)["error"]["code"] == "bad_request"
