"""The gate follows the serving container while it waits: real containers of the simulator image on
the local Docker engine, under the deploy's restart policy (``unless-stopped``).

The gate is reached the way the program reaches it (``run_gate`` with the ``container_watch``
parameter ``gate_params`` renders); the engine's exit time comes from Docker's own ``die`` events,
not from the code under test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from components.gate.checks import GateFailure, run_gate
from components.gate.container import start_watch
from components.serving.spec import render_serving
from tests.gate.support import local_config

PROJECT = Path(__file__).resolve().parents[2]
IMAGE = "glm53-vllm-sim:watch-test"
BASE = "glm53-local/python:bookworm"
A800_KNOWN = {"known_weights_seconds": 36.0, "known_start_seconds": 36.0 + 335.5}  # a800 seed


def _docker_missing() -> str | None:
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        return "no Docker engine answers (start dockerd)"
    if subprocess.run(["docker", "image", "inspect", BASE], capture_output=True).returncode:
        return f"local image {BASE} is missing (offline/images.sh makes it)"
    return None


pytestmark = pytest.mark.skipif(_docker_missing() is not None, reason=str(_docker_missing()))


@pytest.fixture(scope="module")
def image() -> str:
    subprocess.run(
        ["docker", "build", "-q", "--build-arg", f"BASE_IMAGE={BASE}", "-t", IMAGE, "images/vllm-sim"],
        cwd=PROJECT, check=True, capture_output=True, env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    return IMAGE


Run = Callable[..., tuple[str, dict]]


@pytest.fixture
def serving(image: str) -> Iterator[Run]:
    """Start the local stack's serving container (its rendered argv plus ``extra``), strict flags;
    returns its name and the gate's parameters."""
    names: list[str] = []
    spec = render_serving(local_config())

    def run(*extra: str, **env: str) -> tuple[str, dict]:
        name = f"glm-watch-test-{len(names)}-{int(time.time() * 1000) % 100000}"
        names.append(name)
        envs = [a for k, v in {"VLLM_SIM_STRICT_FLAGS": "1", **env}.items() for a in ("-e", f"{k}={v}")]
        subprocess.run(
            ["docker", "run", "-d", "--name", name, "--restart", "unless-stopped", *envs, image,
             "serve", *spec.argv, *extra],
            check=True, capture_output=True,
        )  # fmt: skip
        address = subprocess.run(
            ["docker", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", name],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        params = {
            "endpoint": f"http://{address}:{spec.port}/v1",
            "served_name": spec.served_name,
            "max_model_len": spec.max_model_len,
            "flags": spec.shown_flags,
            "container_name": name,
            "smoke": {"deadline_seconds": 120, "steps": ["models"]},
            "container_watch": {
                "name": name,
                "docker_host": "unix:///var/run/docker.sock",
                "ssh": [],
                **A800_KNOWN,
            },
        }
        return name, params

    yield run
    for name in names:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def first_exit(name: str, since: float) -> float:
    """When the engine first exited: Docker's ``die`` event (nanoseconds)."""
    out = subprocess.run(
        ["docker", "events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}",
         "--filter", f"container={name}", "--filter", "event=die", "--format", "{{.TimeNano}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert out, f"no die event for {name}"
    return int(out[0]) / 1e9


def gate_failure(params: dict) -> tuple[GateFailure, float, list[str]]:
    lines: list[str] = []
    with pytest.raises(GateFailure) as failed:
        run_gate(params, "unused-key", lines.append)
    return failed.value, time.time(), lines


def test_the_local_stacks_flags_pass_the_strict_parser_and_the_progress_shows(serving: Run) -> None:
    _name, params = serving(VLLM_SIM_LOADING_SECONDS="14", VLLM_SIM_SHARDS="5")
    lines: list[str] = []
    results = run_gate(params, "unused-key", lines.append)
    assert results["ready_seconds"] >= 12
    joined = "\n".join(lines)
    for expected in (r"start-up: weights loaded at 0:0\d of ~0:36: Loading weights took",
                     r"start-up: KV cache sized at 0:0\d: GPU KV cache size: 131,072 tokens",
                     r"start-up: CUDA graphs captured at 0:1\d",
                     r"start-up: startup complete at 0:1[45] of ~6:12: Application startup complete"):  # fmt: skip
        assert re.search(expected, joined), expected
    periodic = [line for line in lines if line.startswith("readiness: 10 s elapsed")]
    assert periodic and "engine init 0:0" in periodic[0] and "of ~5:36 (start-up 0:1" in periodic[0]
    assert len(lines) < 20, "the progress floods the output"


def test_a_bad_flag_value_fails_the_gate_within_seconds(serving: Run) -> None:
    began = time.time()
    name, params = serving("--max-num-batched-tokens=abc")
    failure, failed_at, _lines = gate_failure(params)
    assert failure.step == "readiness"
    assert "exit code 2" in failure.message and "restart count" in failure.message
    # vLLM's type for it is human_readable_int: argparse names it so.
    assert "argument --max-num-batched-tokens: invalid human_readable_int value: 'abc'" in failure.message
    assert "Look at: glm:serving.extraArgs" in failure.message
    assert failed_at - first_exit(name, began) <= 10


def test_a_misspelt_flag_is_vllms_unrecognized_argument(serving: Run) -> None:
    _name, params = serving("--enable-prefix-cacheing")
    failure, _at, _lines = gate_failure(params)
    assert "unrecognized arguments: --enable-prefix-cacheing" in failure.message
    assert "cause: a flag this vLLM does not have" in failure.message


def test_a_memory_failure_names_gpu_memory_utilization(serving: Run) -> None:
    began = time.time()
    name, params = serving(VLLM_SIM_START_FAILURE="gpu-memory", VLLM_SIM_LOADING_SECONDS="6")
    failure, failed_at, lines = gate_failure(params)
    assert "exit code 1" in failure.message
    assert "is less than desired GPU memory utilization (0.9," in failure.message
    assert "Look at: glm:serving.gpuMemoryUtilization" in failure.message
    assert any(line.startswith("start-up: weights loaded") for line in lines)  # it got that far
    assert failed_at - first_exit(name, began) <= 10


def test_a_crash_while_loading_fails_the_gate(serving: Run) -> None:
    began = time.time()
    name, params = serving(VLLM_SIM_LOADING_SECONDS="60", VLLM_SIM_CRASH_AFTER_SECONDS="3")
    failure, failed_at, _lines = gate_failure(params)
    assert "Engine core proc EngineCore_DP0 died unexpectedly" in failure.message
    assert failed_at - first_exit(name, began) <= 10


def followers_of(name: str) -> list[str]:
    """The ``docker logs -f`` / ``docker events`` processes still running for container ``name``."""
    found = subprocess.run(
        ["pgrep", "-af", f"docker .*(logs -f|events).*{name}"], capture_output=True, text=True
    )
    return found.stdout.splitlines()


def test_a_watch_closed_before_it_follows_leaves_no_docker_process(serving: Run) -> None:
    """A replica that is ready at the gate's first poll: the gate closes the watch while its thread
    is still reading ``docker inspect``. Nothing may follow the log after that (it did, and close()
    waited out its 5 s join: 5 s of every gate of a ready replica)."""
    name, params = serving()
    for _ in range(5):
        watch = start_watch(params["container_watch"], lambda _line: None, set())
        assert watch is not None
        watch.close()
        assert followers_of(name) == [], "a docker process follows the container after close()"
