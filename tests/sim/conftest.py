"""Fixtures that run the vLLM-protocol simulator (images/vllm-sim/vllm_sim.py) as a subprocess.

Every simulator listens on 127.0.0.1 on a free port and is stopped with SIGTERM at teardown.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.engine import free_port

SIM_DIR = Path(__file__).resolve().parents[2] / "images" / "vllm-sim"
SIM = SIM_DIR / "vllm_sim.py"
if str(SIM_DIR) not in sys.path:
    sys.path.insert(0, str(SIM_DIR))

MODEL = "zai-org/GLM-5.3-Flash"
MODEL_PATH = "/models/GLM-5.3-Flash"
MAX_MODEL_LEN = 4096

# The a800 profile's command line, shrunk: what the real program passes to `vllm serve`.
# The simulator must accept every flag and ignore the ones it does not model.
FULL_ARGS = [
    "serve",
    MODEL_PATH,
    "--served-model-name",
    MODEL,
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--max-num-seqs",
    "8",
    "--block-size",
    "16",
    "--gpu-memory-utilization",
    "0.95",
    "--tensor-parallel-size",
    "8",
    "--enable-expert-parallel",
    "--speculative-config",
    '{"method":"mtp","num_speculative_tokens":5}',
    "--trust-remote-code",
    "--seed",
    "1024",
    "--reasoning-parser",
    "glm45",
    "--tool-call-parser",
    "glm47",
    "--enable-auto-tool-choice",
    "--compilation-config",
    '{"cudagraph_mode":"FULL_DECODE_ONLY","cudagraph_capture_sizes":[1,2,4,8]}',
    "--limit-mm-per-prompt",
    '{"image":1,"video":0}',
    "--async-scheduling",
]

# No parsers, no speculative decoding, no auto tool choice.
PLAIN_ARGS = [
    "serve",
    MODEL_PATH,
    "--served-model-name",
    MODEL,
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--no-enable-prefix-caching",
]

# A reasoning parser and nothing else (the request-shape tests' simulator).
REASONING_ARGS = [*PLAIN_ARGS[:-1], "--reasoning-parser", "glm45"]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}


class Sim:
    """One running simulator process."""

    def __init__(self, proc: subprocess.Popen, port: int, log_path: Path):
        self.proc = proc
        self.port = port
        self.log_path = log_path
        self.base_url = f"http://127.0.0.1:{port}"
        # One client for the process's life: building an httpx client costs ~0.3 s here.
        self.http = httpx.Client(base_url=self.base_url, timeout=10.0)
        self._openai: Any = None

    def url(self, path: str) -> str:
        return self.base_url + path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, needle: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.log():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"{needle!r} never logged; log:\n{self.log()}")

    def wait_ready(self, timeout: float = 10.0) -> float:
        """Poll /health; connection refused means 'still loading'. Returns the wait."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.proc.poll() is not None:
                raise AssertionError(f"simulator exited {self.proc.returncode}:\n{self.log()}")
            try:
                if self.http.get("/health", timeout=1.0).status_code == 200:
                    return time.monotonic() - start
            except httpx.TransportError:
                pass
            time.sleep(0.01)
        raise AssertionError(f"simulator not ready after {timeout}s:\n{self.log()}")

    def openai(self, **kwargs: Any):
        """The real openai client (no retries), riding on this Sim's httpx client."""
        import openai

        if self._openai is None:
            self._openai = openai.OpenAI(
                base_url=self.url("/v1"), api_key="unused", max_retries=0, http_client=self.http
            )
        return self._openai.with_options(**kwargs) if kwargs else self._openai

    def chat(self, content: str, timeout: float = 10.0, **body: Any) -> httpx.Response:
        payload = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
        payload.update(body)
        return self.http.post("/v1/chat/completions", json=payload, timeout=timeout)

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Sample name -> [(labels, value)], parsed with prometheus_client."""
        text = self.http.get("/metrics").text
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples.setdefault(s.name, []).append((dict(s.labels), s.value))
        return samples

    def metric(self, name: str, **labels: str) -> float:
        for got, value in self.metrics().get(name, []):
            if all(got.get(k) == v for k, v in labels.items()):
                return value
        raise KeyError(f"{name}{labels} not in /metrics")

    def wait_metric(self, name: str, value: float, timeout: float = 5.0, **labels: str) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.metric(name, **labels)
            if last == value:
                return
            time.sleep(0.02)
        raise AssertionError(f"{name}{labels} stayed {last}, wanted {value}")

    def stop(self, timeout: float = 5.0) -> int:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def spawn(args: list[str], env: dict[str, str] | None, log_dir: Path, wait: bool = True) -> Sim:
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_SIM_")}
    full_env.update(env or {})
    log_path = log_dir / f"sim-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            # -I -S: no site-packages, no PYTHON* variables -- the simulator must run on a
            # bare python3 (and starts twice as fast without site).
            [sys.executable, "-I", "-S", str(SIM), *args, "--host", "127.0.0.1", "--port", str(port)],
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    sim = Sim(proc, port, log_path)
    if wait:
        try:
            sim.wait_ready()
        except BaseException:
            sim.stop()
            raise
    return sim


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator:
    """Factory: start_sim(args=FULL_ARGS, env={...}, wait=True) -> Sim, stopped at teardown."""
    started: list[Sim] = []

    def start(args: list[str] | None = None, env: dict[str, str] | None = None, wait: bool = True) -> Sim:
        sim = spawn(list(FULL_ARGS if args is None else args), env, tmp_path, wait)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture(scope="session")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """The shared simulator with the full (a800-like) command line."""
    s = spawn(FULL_ARGS, {}, tmp_path_factory.mktemp("sim"))
    yield s
    s.stop()


@pytest.fixture(scope="session")
def plain_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """A simulator without reasoning/tool parsers, MTP or prefix caching."""
    s = spawn(PLAIN_ARGS, {}, tmp_path_factory.mktemp("plain"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def shapes_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """A simulator with a reasoning parser and fast decoding whose token counters only the
    module using it moves (the request-shape tests read their deltas)."""
    s = spawn(REASONING_ARGS, {"VLLM_SIM_DECODE_TOKEN_SECONDS": "0.001"}, tmp_path_factory.mktemp("shapes"))
    yield s
    s.stop()
