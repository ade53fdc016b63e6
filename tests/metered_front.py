"""The front as a stack runs it, on loopback: the real ``nginx`` with a rendered config (the usage
meter inside it, components/render/nginx_meter.py) and the vLLM-protocol simulator, each a process
of its own, stopped by its own pid. Used by tests/test_usage_meter.py and the benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

from components.config import StackConfig
from components.docker.rotation import rotation_script
from components.render.nginx_conf import render_nginx_conf
from components.render.nginx_meter import METER_DIR, METRICS_PATH, MeterPeers, MeterRoute
from tests.engine import free_port
from tests.front_rig import SERVED, SIM, nginx_argv, running, runtime_dir, wait_for_port

LUA_MODULES = Path("/usr/lib/nginx/modules")
"""Debian's nginx modules: the rendered config includes their snippets, which name them relative to
nginx's prefix (``-p``), as a container's nginx finds them under its own."""


def nginx_prefix() -> Path:
    """A runtime directory for nginx whose ``modules`` are Debian's (the usage meter's Lua)."""
    directory = runtime_dir()
    (directory / "modules").symlink_to(LUA_MODULES)
    return directory


@dataclass
class MeteredFront:
    base: str
    status_port: int | None
    """The front's status port: the meter's counters (``/metrics/usage``)."""
    directory: Path
    engine: str
    """The simulator's own base URL (its ``/metrics``: requests running and waiting)."""

    def client(self, key: str, **kwargs: object) -> openai.OpenAI:
        options: dict = {"max_retries": 0, "timeout": 60, **kwargs}
        return openai.OpenAI(base_url=f"{self.base}/v1", api_key=key, **options)

    def meter_metrics(self) -> str:
        assert self.status_port is not None, "this front runs without the meter"
        return httpx.get(f"http://127.0.0.1:{self.status_port}{METRICS_PATH}", timeout=5).text

    restart: Callable[[int], None] = lambda _signal: None
    """Stop nginx with ``signal`` (SIGQUIT: graceful, as ``docker stop``; SIGKILL: the master and its
    workers at once, as an OOM kill of the container), then start it again on the same config."""
    engines: tuple[str, ...] = ()
    """Every simulator's base URL, ``replica1``'s first (the rotation's names, with ``rotation``)."""

    def rotate(self, *argv: str) -> str:
        """Run the rotation (templates/rotation.sh: ``drain replica2 REASON 0``, ``admit replica2
        ADDRESS``...) on this front's rotation directory, then reload nginx as the container's
        rotation does, and wait until only new workers serve. Returns what the rotation printed."""
        done = _rotation(self.directory, *argv)
        old = set(self.workers())
        os.kill(self.nginx_pid(), signal.SIGHUP)
        deadline = time.monotonic() + 10
        while (not self.workers() or old & set(self.workers())) and time.monotonic() < deadline:
            time.sleep(0.05)
        return done

    def set_pods(self, pods: Mapping[str, str], *, age: float = 0.0) -> None:
        """Write the routes file a Kubernetes front pod's ``routes`` lister keeps (pod name → host:port),
        as written ``age`` seconds ago (components/host/k8s_targets.py ``routes``), and wait out the
        meter's read (meter_pods.lua READ_SECONDS)."""
        lines = [f"written {time.time() - age:.3f}", *(f"{name} {where}" for name, where in pods.items())]
        staging = self.directory / "pods.tmp"
        staging.write_text("\n".join(lines) + "\n")
        staging.replace(self.directory / "pods")
        time.sleep(0.6)

    def nginx_pid(self) -> int:
        return int((self.directory / "nginx.pid").read_text())

    def workers(self) -> list[int]:
        """The nginx master's worker processes now."""
        children = Path(f"/proc/{self.nginx_pid()}/task/{self.nginx_pid()}/children").read_text()
        return [int(pid) for pid in children.split()]


def _rotation(directory: Path, *argv: str) -> str:
    """templates/rotation.sh on ``directory/rotation``; nginx is not PID 1 here, so it only writes
    the files (the caller reloads nginx)."""
    script = rotation_script(
        str(directory / "rotation"), str(directory / "status"), str(directory / "no-container-conf")
    )
    done = subprocess.run(["sh", "-c", script, "sh", *argv], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _alive(pid: int) -> bool:
    """The process runs (a zombie has closed its sockets already)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _wait_healthy(url: str, proc, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, log.read_text()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        assert time.monotonic() < deadline, f"{url} not ready in 30 s"
        time.sleep(0.1)


@contextlib.contextmanager
def metered_front(
    config: StackConfig,
    keys: Mapping[str, str],
    *,
    max_num_seqs: int = 8,
    sim_env: Mapping[str, str] | None = None,
    meter: bool = True,
    queue_seconds: float | None = None,
    upstream: str | None = None,
    replicas: int = 1,
    state_file: bool = True,
    minute_seconds: int = 60,
    status_port: int | None = None,
    peers: MeterPeers | None = None,
    engines: Sequence[str] | None = None,
    rotation: bool = False,
    max_model_len: int = 32768,
    sim_args: Sequence[str] = (),
    service: int | None = None,
) -> Iterator[MeteredFront]:
    """``meter`` False: the front without the meter (nginx straight to the simulator). ``upstream``:
    the engine's address instead of a simulator's. ``replicas``: that many simulators, the front's
    replicas, each at its own address (the meter shares their slots). ``state_file``: keep the counters in the run's directory.
    ``queue_seconds``: ``glm:front.usageMeter.queueSeconds`` instead of the config's.
    ``minute_seconds``: a budget's "minute", shortened for a test's clock. ``status_port``, ``peers``:
    one of several front pods sharing one account (meter_peers.lua); ``engines``: the simulators of
    another front (host:port each), started by it. ``rotation``: the replicas
    are the rotation's (templates/rotation.sh, ``replica1``...), all admitted at the start; change
    them with ``MeteredFront.rotate``. ``service``: a Kubernetes front, whose meter routes to the pods
    of its routes file (``MeteredFront.set_pods``; none at the start) and sends anything else to the
    Service: the simulator of this 1-based index alone stands for it."""
    front = config.front
    if queue_seconds is not None:
        meter_config = front.usage_meter.model_copy(update={"queue_seconds": queue_seconds})
        front = front.model_copy(update={"usage_meter": meter_config})
    directory = nginx_prefix()
    sim_ports = [free_port() for _ in range(replicas)] if engines is None else []
    port = free_port()
    status_port = status_port or free_port()
    engine_addresses = list(engines) if engines is not None else [f"127.0.0.1:{p}" for p in sim_ports]
    env = {**os.environ, "VLLM_SIM_QUIET": "1", **(sim_env or {})}
    with contextlib.ExitStack() as stack:
        for index, each in enumerate(sim_ports if upstream is None else []):
            sim_argv = [
                sys.executable, str(SIM), "serve", "/models/x", "--host", "127.0.0.1", "--port", str(each),
                "--served-model-name", SERVED, "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
                "--enable-prompt-tokens-details",  # as every stack renders it (glm:serving.enablePromptTokensDetails)
                *sim_args,
            ]  # fmt: skip
            log = directory / ("sim.log" if index == 0 else f"sim{index}.log")
            sim = stack.enter_context(running(sim_argv, log, env))
            _wait_healthy(f"http://127.0.0.1:{each}/health", sim, log)
        route = MeterRoute(
            max_num_seqs,
            replicas,
            str(directory / "usage" / "counters.json") if state_file else None,
            max_model_len=max_model_len,
            own_clients=("smoke-gate", "semantic-probe"),
            unshared=("smoke-gate",),
            minute_seconds=minute_seconds,
            peers=peers,
            pods_file=str(directory / "pods") if service else None,
        )
        addresses = [upstream] if upstream else engine_addresses
        if service:
            addresses = [addresses[service - 1]]
        for index, address in enumerate(addresses if rotation else [], 1):
            _rotation(directory, "admit", f"replica{index}", address)
        conf = render_nginx_conf(
            front, addresses, dict(keys), listen=f"127.0.0.1:{port}",
            runtime_dir=str(directory), meter=route if meter else None, status_listen=f"127.0.0.1:{status_port}",
            rotation_dir=str(directory / "rotation") if rotation else None,
        )  # fmt: skip
        (directory / "nginx.conf").write_text(conf)
        argv = nginx_argv(directory)
        proc = stack.enter_context(running(argv, directory / "nginx.log"))
        wait_for_port(port, proc)

        def restart(how: int) -> None:
            nonlocal proc
            master = proc.pid
            children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
            os.kill(master, how)
            if how == signal.SIGKILL:
                for child in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(child), signal.SIGKILL)
            proc.wait(timeout=30)
            for child in children:  # killed workers close their sockets as they die, not at once
                deadline = time.monotonic() + 10
                while _alive(int(child)) and time.monotonic() < deadline:
                    time.sleep(0.02)
            with contextlib.suppress(FileNotFoundError):
                (directory / "nginx.pid").unlink()
            proc = stack.enter_context(running(argv, directory / "nginx.log.restarted"))
            wait_for_port(port, proc)
            if meter:
                wait_for_port(status_port, proc)

        yield MeteredFront(
            f"http://127.0.0.1:{port}",
            status_port if meter else None,
            directory,
            f"http://{engine_addresses[0]}",
            restart,
            tuple(f"http://{a}" for a in engine_addresses),
        )
    shutil.rmtree(directory, ignore_errors=True)


REPLY = """local function reply(answer)
  local file = io.open(OUT, "w")
  file:write(require("cjson").encode(answer))
  file:close()
  os.exit(0)
end
"""
"""How a driver of ``run_in_nginx_lua`` ends: its answer, as JSON, in ``OUT``; nginx's master exits."""

TABLE_DICT = """local function table_dict(data)
  return {
    get = function(_, key) return data[key] end,
    set = function(_, key, value) data[key] = value end,
    add = function(_, key, value) if data[key] ~= nil then return false end data[key] = value return true end,
    incr = function(_, key, by, init) data[key] = (data[key] or init) + by return data[key] end,
    delete = function(_, key) data[key] = nil end,
    get_keys = function()
      local keys = {}
      for key in pairs(data) do keys[#keys + 1] = key end
      return keys
    end,
  }
end
"""
"""``table_dict(data)`` in every driver: ngx.shared.DICT's methods the meter calls, over the Lua table
``data`` (which the driver may read and set directly); expiry times are ignored."""


def run_in_nginx_lua(modules: Sequence[str], driver: str, given: object) -> object:
    """Run ``driver`` (Lua) in the real nginx's LuaJIT, with the meter's ``modules`` preloaded:
    ``init_by_lua`` runs it as the config loads. It reads ``given`` as JSON from the file ``IN`` and
    ends with ``reply(answer)`` (REPLY), which writes the answer as JSON to ``OUT`` and ends the
    master; ``table_dict(data)`` (TABLE_DICT) stands in for the shared dict. Returns the answer."""
    directory = nginx_prefix()
    (directory / "in.json").write_text(json.dumps(given))
    preload = "".join(
        f'package.preload["{name}"] = function(...)\n{(METER_DIR / f"{name}.lua").read_text()}end\n'
        for name in modules
    )
    paths = f'local IN, OUT = "{directory}/in.json", "{directory}/out.json"\n' + REPLY + TABLE_DICT
    (directory / "nginx.conf").write_text(
        "include /etc/nginx/modules-enabled/*.conf;\n"
        f"pid {directory}/nginx.pid;\nerror_log stderr;\nevents {{}}\n"
        f"http {{\n    init_by_lua_block {{\n{preload}{paths}{driver}\n    }}\n}}\n"
    )
    done = subprocess.run(
        nginx_argv(directory),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads((directory / "out.json").read_text())
