"""How long after vLLM becomes ready does the smoke gate see it, and pass (KV check included)?

Starts the vLLM-protocol simulator with ``VLLM_SIM_LOADING_SECONDS=T`` (connections refused while
"loading", as vLLM does), optionally behind the real Nginx front, runs the gate at once, and
measures per run:

* readiness lag: when the gate saw readiness - when the simulator bound its port;
* kv_pool:       how long the KV-pool step took;
* gate lag:      when the whole gate passed (every step, kv_pool included) - the same moment.

``--metrics front`` (the default) reads vLLM's ``/metrics`` through the front's metrics route with
the gate's own metrics key, as every stack does; ``--metrics vllm`` reads vLLM's ``/metrics`` directly.
``--metrics federate`` reads a real Prometheus's ``/federate`` scraping the simulator with the
local stack's ``prometheus.yml``: the previous design, where kv_pool waited for a scrape.

Each run starts the gate after a random fraction of one poll interval, so the ready moment falls at
a random point between two polls. The simulator's ready moment is when its "Starting vLLM API
server" line reaches our pipe (written right after the port is bound). Run from the project root::

    python3 benchmarks/gate_lag.py                     # 5 runs, T=3 s, poll 1 s, through nginx
    python3 benchmarks/gate_lag.py --metrics federate  # the old kv_pool path, for comparison
    python3 benchmarks/gate_lag.py --runs 10 --poll-seconds 0.25 --no-front
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from components.config import GATE_METRICS_CLIENT, build_stack_config  # noqa: E402
from components.gate.checks import run_gate  # noqa: E402
from components.render.prometheus_config import ScrapeSpec, render_prometheus_config  # noqa: E402
from components.render.prometheus_rules import render_alert_rules  # noqa: E402
from components.serving.spec import render_argv, render_serving  # noqa: E402
from components.verification.smoke_gate import gate_params  # noqa: E402
from tests.engine import free_port  # noqa: E402
from tests.gate.support import start_front  # noqa: E402

SIM = PROJECT / "images" / "vllm-sim" / "vllm_sim.py"
KEY = "sk-benchmark-9122ab2e080838eb9e9e"
METRICS_KEY = "sk-gate-metrics-a98598f0b32b121c7f1d"
MAX_RUNS = 50


def wait_listening(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def start_prometheus(config: Any, sim_port: int, runtime: str) -> tuple[subprocess.Popen[bytes], str]:
    """A real Prometheus with the stack's rendered config, scraping the simulator; its /federate URL."""
    port = free_port()
    rules = Path(runtime, "rules.yml")
    rules.write_text(render_alert_rules(ScrapeSpec.of(config)))
    conf = Path(runtime, "prometheus.yml")
    conf.write_text(
        render_prometheus_config(config.monitoring, f"127.0.0.1:{sim_port}", "vllm", rules_path=str(rules))
    )
    proc = subprocess.Popen(
        [
            shutil.which("prometheus") or "prometheus",
            f"--config.file={conf}",
            f"--storage.tsdb.path={runtime}/tsdb",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_listening(port, 30.0)
    return proc, f"http://127.0.0.1:{port}/federate?match[]=vllm:cache_config_info"


def one_run(
    loading_seconds: float, poll_seconds: float, use_front: bool, phase: float, metrics: str
) -> tuple[float, float, float]:
    """(readiness lag, kv_pool step, gate lag) in seconds."""
    config = build_stack_config(
        {"hardware": "local", "smoke": {"chatTemplateKwargs": {"reasoning_effort": "low"}}}
    )
    sim_port = free_port()
    ready_at: list[float] = []
    sim = subprocess.Popen(
        [sys.executable, str(SIM), "serve", *render_argv(config), "--host=127.0.0.1", f"--port={sim_port}"],
        env={**os.environ, "VLLM_SIM_LOADING_SECONDS": str(loading_seconds)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def watch() -> None:
        assert sim.stderr is not None
        for line in sim.stderr:
            if "Starting vLLM API server" in line and not ready_at:
                ready_at.append(time.monotonic())

    threading.Thread(target=watch, daemon=True).start()
    procs: list[subprocess.Popen[str] | subprocess.Popen[bytes]] = [sim]
    runtime = tempfile.mkdtemp(prefix="gate-lag-")
    try:
        os.chmod(runtime, 0o755)
        metrics_url = f"http://127.0.0.1:{sim_port}/metrics"
        if metrics == "federate":
            prometheus, metrics_url = start_prometheus(config, sim_port, runtime)
            procs.append(prometheus)
        endpoint = f"http://127.0.0.1:{sim_port}/v1"
        steps = ["models", "arithmetic", "tool_call", "kv_pool"]
        if use_front:
            front, front_port = start_front(
                sim_port, {"bench": KEY}, Path(runtime), metrics_keys={GATE_METRICS_CLIENT: METRICS_KEY}
            )
            procs.append(front)
            endpoint = f"http://127.0.0.1:{front_port}/v1"
            steps = [*steps, "front_auth", "streaming"]
            if metrics == "front":
                metrics_url = f"http://127.0.0.1:{front_port}/metrics"
        params = gate_params(render_serving(config), config.smoke, endpoint, "bench", metrics_url)
        params["smoke"].update(deadline_seconds=loading_seconds + 30, poll_seconds=poll_seconds, steps=steps)
        # Where the ready moment falls between two polls would otherwise be the same in every run
        # (the simulator's start-up time); a random phase makes the lag a fair sample.
        time.sleep(phase)
        detected_at: list[float] = []

        def progress(line: str) -> None:  # the gate reports each step the moment it passes
            if line.startswith("readiness: ok"):
                detected_at.append(time.monotonic())

        results = run_gate(params, KEY, progress, METRICS_KEY if metrics == "front" else None)
        passed_at = time.monotonic()
        if not ready_at:
            raise RuntimeError("the simulator never logged that it was ready")
        kv_seconds = results["latency_ms"]["kv_pool"] / 1000
        return detected_at[0] - ready_at[0], kv_seconds, passed_at - ready_at[0]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(runtime, ignore_errors=True)


def summary(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{label}: median {statistics.median(ms):7.1f} ms, min {min(ms):7.1f} ms, max {max(ms):7.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help=f"number of runs (1-{MAX_RUNS}, default 5)")
    parser.add_argument("--loading-seconds", type=float, default=3.0, help="simulated load time T")
    parser.add_argument("--poll-seconds", type=float, default=1.0, help="glm:smoke.pollSeconds (≤ 1)")
    parser.add_argument("--no-front", action="store_true", help="talk to the simulator directly")
    parser.add_argument(
        "--metrics",
        choices=["front", "vllm", "federate"],
        default="front",
        help="kv_pool reads the front's /metrics route with the gate's metrics key (default, as every "
        "stack does), vLLM's /metrics directly, or a Prometheus /federate",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random poll phase per run")
    args = parser.parse_args()
    if not 1 <= args.runs <= MAX_RUNS:
        parser.error(f"--runs must be between 1 and {MAX_RUNS}")
    if not 0 < args.poll_seconds <= 1:
        parser.error("--poll-seconds must be in (0, 1]")
    use_front = not args.no_front
    if use_front and not (shutil.which("nginx") or Path("/usr/sbin/nginx").exists()):
        parser.error("nginx is not installed: pass --no-front")
    if args.metrics == "front" and not use_front:
        parser.error("--metrics front needs the front: leave out --no-front or pick --metrics vllm")
    if args.metrics == "federate" and not shutil.which("prometheus"):
        parser.error("prometheus is not installed: leave out --metrics federate")

    where = "through the Nginx front" if use_front else "direct to the simulator"
    print(
        f"gate lag: T={args.loading_seconds:g} s, pollSeconds {args.poll_seconds:g}, {where}, "
        f"kv_pool via {args.metrics}, {args.runs} runs"
    )
    detects, kvs, passes = [], [], []
    rng = random.Random(args.seed)
    for run in range(1, args.runs + 1):
        phase = rng.uniform(0, args.poll_seconds)
        detect, kv, passed = one_run(args.loading_seconds, args.poll_seconds, use_front, phase, args.metrics)
        detects.append(detect)
        kvs.append(kv)
        passes.append(passed)
        print(
            f"run {run}: readiness seen {detect * 1000:7.1f} ms after ready, kv_pool {kv * 1000:7.1f} ms, "
            f"gate passed {passed * 1000:7.1f} ms after ready"
        )
    print(summary("readiness lag", detects))
    print(summary("kv_pool step ", kvs))
    print(summary("gate lag     ", passes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
