"""The smoke gate against the vLLM-protocol simulator and the real Nginx front, no Pulumi engine.

Each test starts its own simulator (images/vllm-sim/vllm_sim.py) on a free loopback port with the
local stack's rendered argv, and where the gate goes "through the front", a real ``nginx`` running
the config ``components.nginx_front.render_nginx_conf`` renders. One test per failure mode asserts
the step the gate stops at and what its message says.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from components.config import ALL_SMOKE_STEPS, StackConfig, build_stack_config
from components.nginx_front import render_nginx_conf
from components.smoke_test import (
    GateFailure,
    SmokeTestProvider,
    changed_inputs,
    gate_params,
    key_fingerprint,
    kv_pools,
    plain,
    run_gate,
    stream_spread,
)
from components.vllm_server import render_argv
from tests.conftest import PROJECT

SIM = PROJECT / "images" / "vllm-sim" / "vllm_sim.py"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
KEY = "sk-smoke-test-0123456789abcdef0123"
SIM_READY_LINE = "Starting vLLM API server"

needs_nginx = pytest.mark.skipif(not Path(NGINX).exists(), reason="nginx is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        port = free_port()
        runtime = tmp_path / f"nginx-{port}"
        runtime.mkdir()
        runtime.chmod(0o755)
        conf = render_nginx_conf(
            local_config().front,
            f"127.0.0.1:{sim.port}",
            {"ci": KEY},
            listen=f"127.0.0.1:{port}",
            runtime_dir=str(runtime),
        )
        (runtime / "nginx.conf").write_text(conf)
        proc = subprocess.Popen(
            [
                NGINX,
                "-e",
                "stderr",
                "-p",
                str(runtime),
                "-c",
                str(runtime / "nginx.conf"),
                "-g",
                "daemon off;",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return f"http://127.0.0.1:{port}/v1"
            except OSError:
                assert proc.poll() is None, "nginx exited at start"
                time.sleep(0.05)
        raise AssertionError("nginx did not listen")

    yield start
    for proc in procs:
        stop(proc)


class _BufferingProxy(BaseHTTPRequestHandler):
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


@pytest.fixture
def buffering_front() -> Iterator[Callable[[Sim], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(sim: Sim) -> str:
        handler = type("Handler", (_BufferingProxy,), {"upstream": ("127.0.0.1", sim.port)})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def params(
    endpoint: str,
    sim: Sim | None = None,
    config: StackConfig | None = None,
    steps: list[str] | None = None,
    **smoke: Any,
) -> dict[str, Any]:
    """The provider's inputs (without the key) as they reach it: numbers as floats."""
    p = gate_params(
        config or local_config(),
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


# ---- a passing gate ----------------------------------------------------------------------------


@needs_nginx
def test_full_gate_passes_through_the_front(sims, front) -> None:
    sim = sims()
    lines: list[str] = []
    results = run_gate(params(front(sim), sim), KEY, lines.append)

    assert results["steps_run"] == ALL_SMOKE_STEPS
    assert results["steps_skipped"] == {}
    assert set(results["latency_ms"]) == {"readiness", *ALL_SMOKE_STEPS}
    assert all(isinstance(v, float) and v >= 0 for v in results["latency_ms"].values())
    assert results["served_name"] == "glm-5.3-flash"
    assert results["max_model_len"] == 32768
    # The simulator's default pool is 4 x max_model_len in blocks of 16.
    assert results["kv_pool_tokens"] == 4 * 32768
    assert results["vllm_version"] == "0.33.0"
    assert results["vllm_version_source"] == f"{sim.url}/version"
    assert results["reasoning_field"] == "reasoning"
    assert results["stream_chunks"] >= 3
    assert 0 < results["pass_seconds"] < 10
    assert any(line.startswith("streaming: ok") for line in lines)


def test_reasoning_content_field_is_accepted(sims) -> None:
    """vLLM <= 0.11 puts reasoning in `reasoning_content`; the gate accepts either field."""
    sim = sims(VLLM_SIM_FAULT="reasoning-content")
    results = run_gate(params(f"{sim.url}/v1", sim, steps=["models", "arithmetic"]), KEY, lambda _: None)
    assert results["reasoning_field"] == "reasoning_content"


def test_without_metrics_url_kv_pool_is_skipped_with_a_reason(sims) -> None:
    sim = sims()
    results = run_gate(params(f"{sim.url}/v1", None, steps=["models", "kv_pool"]), KEY, lambda _: None)
    assert results["steps_run"] == ["models"]
    assert "no metrics_url" in results["steps_skipped"]["kv_pool"]
    assert results["steps_skipped"]["arithmetic"] == "not in glm:smoke.steps"
    assert results["kv_pool_tokens"] is None
    assert results["vllm_version"] is None
    assert "not served through the front" in results["vllm_version_source"]


# ---- readiness -----------------------------------------------------------------------------------


@needs_nginx
def test_waits_through_loading_and_passes_within_a_second_of_ready(sims, front) -> None:
    """Refused connections (503 at the front) mean "loading"; the gate notices readiness quickly."""
    sim = sims(wait=False, VLLM_SIM_LOADING_SECONDS="2")
    endpoint = front(sim)
    results = run_gate(params(endpoint, sim, steps=["models"], poll_seconds=1.0), KEY, lambda _: None)
    sim.wait_ready(0)
    assert sim.ready_at is not None
    passed_at = time.monotonic()
    assert results["ready_seconds"] >= 1.0  # it did wait through the load
    assert passed_at - sim.ready_at < 1.5


def test_never_ready_fails_at_readiness_by_the_deadline(sims) -> None:
    sim = sims(wait=False, VLLM_SIM_NEVER_READY="1")
    started = time.monotonic()
    failure = gate_fails(params(f"{sim.url}/v1", sim, deadline_seconds=2))
    elapsed = time.monotonic() - started
    assert failure.step == "readiness"
    assert "not ready after 2 s" in failure.message
    assert "connection refused" in failure.message
    assert "glm:smoke.deadlineSeconds" in failure.message
    assert 1.9 < elapsed < 4


def test_readiness_reports_progress(sims, monkeypatch) -> None:
    monkeypatch.setattr("components.smoke_test.PROGRESS_EVERY_SECONDS", 0.5)
    sim = sims(wait=False, VLLM_SIM_NEVER_READY="1")
    lines: list[str] = []
    with pytest.raises(GateFailure):
        run_gate(params(f"{sim.url}/v1", sim, deadline_seconds=1.6), KEY, lines.append)
    waiting = [line for line in lines if "elapsed of" in line]
    assert len(waiting) >= 2
    assert "last: connection refused" in waiting[-1]


@needs_nginx
def test_a_rejected_key_fails_readiness_at_once(sims, front) -> None:
    sim = sims()
    started = time.monotonic()
    failure = gate_fails(params(front(sim), sim), key="sk-not-the-configured-key-000000")
    assert failure.step == "readiness"
    assert "refused the gate's API key" in failure.message
    assert "HTTP 401" in failure.message
    assert time.monotonic() - started < 2


# ---- one test per failure mode -------------------------------------------------------------------


def test_wrong_answer_fails_arithmetic(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="wrong-answer")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == "arithmetic"
    assert "expected content '221'" in failure.message
    assert "got '222'" in failure.message


def test_missing_tool_calls_fail_tool_call(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="no-tool-calls")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == "tool_call"
    assert "finish_reason=stop, 0 tool_calls" in failure.message
    assert "--tool-call-parser=glm47" in failure.message


def test_inline_reasoning_fails_arithmetic(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="inline-reasoning")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == "arithmetic"
    assert "inline" in failure.message
    assert "<think>" in failure.message
    assert "--reasoning-parser=glm45" in failure.message


def test_kv_pool_smaller_than_max_model_len_fails_with_the_levers(sims) -> None:
    sim = sims(VLLM_SIM_KV_POOL_TOKENS="8192")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == "kv_pool"
    message = failure.message
    assert "KV pool is 8,192 tokens (num_gpu_blocks 512 × block_size 16" in message
    assert "--max-model-len is 32,768" in message
    assert 'reason="capacity"' in message and "2,171 s" in message
    levers = [
        "--max-num-batched-tokens",
        "--gpu-memory-utilization",
        "--speculative-config",
        "--max-model-len",
    ]
    advice = message[message.index("Levers") :]
    assert [advice.index(lever) for lever in levers] == sorted(advice.index(lever) for lever in levers)
    assert "now 0.9" in message  # the rendered argv's --gpu-memory-utilization


def test_silent_server_fails_the_step_instead_of_hanging(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="silent")
    started = time.monotonic()
    failure = gate_fails(params(f"{sim.url}/v1", sim, request_timeout_seconds=1.5))
    assert failure.step == "arithmetic"
    assert "no complete answer within 1.5 s" in failure.message
    assert time.monotonic() - started < 5


def test_a_request_stuck_on_kv_capacity_is_named_in_the_timeout(sims) -> None:
    """The Ascend hang: HTTP accepted, the request waits for KV capacity forever."""
    sim = sims(VLLM_SIM_KV_POOL_TOKENS="512")  # smaller than prompt + max_tokens of the chat
    failure = gate_fails(params(f"{sim.url}/v1", sim, request_timeout_seconds=1.5))
    assert failure.step == "arithmetic"
    assert "no complete answer within 1.5 s" in failure.message
    assert "1 waiting for KV capacity" in failure.message
    assert "KV pool 512 tokens" in failure.message


def test_http_500_fails_arithmetic_with_the_body(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="http-500")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert failure.step == "arithmetic"
    assert "answered 500" in failure.message
    assert "EngineCore encountered an issue" in failure.message


def test_wrong_served_name_fails_models(sims) -> None:
    sim = sims()
    config = build_stack_config({"hardware": "local", "model": {"servedName": "someone-else"}})
    failure = gate_fails(params(f"{sim.url}/v1", sim, config=config))
    assert failure.step == "models"
    assert "['glm-5.3-flash']" in failure.message and "'someone-else'" in failure.message


def test_an_open_endpoint_fails_front_auth(sims) -> None:
    """vLLM's own port answers without a key: pointing the gate at it must not pass front_auth."""
    sim = sims()
    failure = gate_fails(params(f"{sim.url}/v1", sim, steps=["front_auth"]))
    assert failure.step == "front_auth"
    assert "answered 200, expected 401" in failure.message


def test_a_buffering_front_fails_streaming(sims, buffering_front) -> None:
    sim = sims()
    failure = gate_fails(params(buffering_front(sim), sim, steps=["streaming"]))
    assert failure.step == "streaming"
    assert "proxy_buffering off" in failure.message
    assert "arrived bunched" in failure.message


def test_messages_carry_at_most_an_excerpt_of_the_body(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="http-500")
    failure = gate_fails(params(f"{sim.url}/v1", sim))
    assert len(failure.message) < 700


# ---- the dynamic provider ------------------------------------------------------------------------


def test_create_and_update_return_full_outputs_without_the_key(sims, capsys) -> None:
    sim = sims()
    provider = SmokeTestProvider()
    props = {**params(f"{sim.url}/v1", sim, steps=["models", "arithmetic", "kv_pool"]), "api_key": KEY}

    created = provider.create(props)
    updated = provider.update(created.id, created.outs or {}, props)

    for outs in (created.outs, updated.outs):
        assert outs is not None
        serialized = json.dumps(outs)
        assert KEY not in serialized
        assert KEY[3:20] not in serialized
        assert outs["api_key"] == key_fingerprint(KEY)
        assert outs["results"]["kv_pool_tokens"] == 4 * 32768
        assert outs["argv"] == render_argv(local_config())
        assert outs["max_model_len"] == 32768  # coerced back from 32768.0
        for name in ("endpoint", "env", "image_ref", "model_path", "served_name", "smoke", "version"):
            assert name in outs
    assert created.id.startswith("smoke-")
    # Both ran the gate (progress goes to stderr: pulumi.log is only a stderr pass-through here).
    stderr = capsys.readouterr().err
    assert stderr.count("[smoke-gate] passed in") == 2
    assert KEY not in stderr


def test_create_fails_with_the_gate_failure(sims) -> None:
    sim = sims(VLLM_SIM_FAULT="wrong-answer")
    props = {**params(f"{sim.url}/v1", sim), "api_key": KEY}
    with pytest.raises(GateFailure, match="step 'arithmetic'"):
        SmokeTestProvider().create(props)


def _stored_outputs() -> dict[str, Any]:
    """What the state holds after a create: the inputs (coerced), the fingerprint, the results."""
    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY}
    outs = {k: plain(v) for k, v in news.items() if k != "api_key"}
    return {**outs, "api_key": key_fingerprint(KEY), "results": {"pass_seconds": 1.0}}


def test_diff_identical_inputs_no_changes() -> None:
    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY, "__provider": "pickled-b"}
    olds = {**_stored_outputs(), "__provider": "pickled-a"}
    result = SmokeTestProvider().diff("smoke-x", olds, news)
    assert result.changes is False
    assert changed_inputs(olds, news) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda n: n["argv"].append("--max-num-batched-tokens=8192"), "argv"),
        (lambda n: n["env"].update(VLLM_USE_BREAKABLE_CUDAGRAPH="1"), "env"),
        (lambda n: n.update(image_ref="glm53-vllm-sim:other"), "image_ref"),
        (lambda n: n.update(max_model_len=65536.0), "max_model_len"),
        (lambda n: n["smoke"].update(expected_answer="222"), "smoke"),
        (lambda n: n.update(version="2+abc"), "version"),
        (lambda n: n.update(api_key="sk-rotated-key-0123456789abcdef"), "api_key"),
        (lambda n: n.update(endpoint="http://127.0.0.1:9090/v1"), "endpoint"),
    ],
)
def test_diff_reruns_the_gate_for_what_affects_the_served_model(change, expected) -> None:
    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY}
    change(news)
    result = SmokeTestProvider().diff("smoke-x", _stored_outputs(), news)
    assert result.changes is True
    assert result.replaces == []  # an update, which re-runs the gate
    assert changed_inputs(_stored_outputs(), news) == [expected]


def test_diff_treats_unknown_inputs_as_changes() -> None:
    from pulumi.runtime import rpc

    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY, "image_ref": rpc.UNKNOWN}
    assert SmokeTestProvider().diff("smoke-x", _stored_outputs(), news).changes is True


def test_check_coerces_floats_and_refuses_bad_settings() -> None:
    provider = SmokeTestProvider()
    news = {**params("http://127.0.0.1:8080/v1"), "api_key": KEY}
    ok = provider.check({}, news)
    assert ok.failures == []
    assert ok.inputs["max_model_len"] == 32768 and isinstance(ok.inputs["max_model_len"], int)

    bad = {**news, "endpoint": "127.0.0.1:8080", "smoke": {**news["smoke"], "steps": ["models", "vibes"]}}
    failures = {f.property: f.reason for f in provider.check({}, bad).failures}
    assert "not an http(s) URL" in failures["endpoint"]
    assert "vibes" in failures["smoke"]


def test_delete_is_a_tolerant_no_op() -> None:
    SmokeTestProvider().delete("smoke-x", {})


# ---- pure helpers --------------------------------------------------------------------------------


def test_kv_pools_reads_vllm_and_federated_metrics() -> None:
    vllm = 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="567"} 1.0\n'
    federated = (
        "# TYPE vllm:cache_config_info untyped\n"
        'vllm:cache_config_info{block_size="128",engine="1",instance="vllm:8000",job="vllm",'
        'num_gpu_blocks="70"} 1 1732896000000\n'
    )
    assert kv_pools(vllm) == [{"engine": "0", "num_gpu_blocks": 567, "block_size": 16, "tokens": 9072}]
    assert kv_pools(federated)[0]["tokens"] == 8960
    assert kv_pools("vllm:num_requests_running 0\n") == []


def test_stream_spread() -> None:
    assert stream_spread([0.98, 0.99, 1.0], 1.0) == 0.02  # buffered: everything at the end
    assert stream_spread([0.05, 0.5, 0.95], 1.0) == 0.9
    assert stream_spread([0.5], 1.0) == 0.0


def test_gate_params_are_deterministic() -> None:
    config = local_config()
    first = gate_params(config, "http://h:8080/v1", "img")
    second = gate_params(config, "http://h:8080/v1", "img")
    assert json.dumps(first) == json.dumps(second)
    assert list(first) == sorted(first)
    assert list(first["smoke"]) == sorted(first["smoke"])
    assert "api_key" not in first
