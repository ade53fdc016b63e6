"""How fast does the gate fail once the serving container exits? At the gate level, on the local
Docker engine: the simulator image (strict flags) under ``--restart unless-stopped``, the gate
started at once with its ``container_watch``. For each case and run: Docker's first ``die`` event
of the container → the moment ``run_gate`` raised (negative: the engine had exited before the gate
started, so the figure is the gate's own time to notice).

    .venv/bin/python benchmarks/fail_fast.py            # 3 runs of each case
    .venv/bin/python benchmarks/fail_fast.py --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.gate.checks import GateFailure, run_gate
from components.serving.spec import render_serving
from tests.gate.support import local_config

IMAGE = "glm53-vllm-sim:fail-fast-bench"
CASES = {
    # exits at once: argparse refuses the value
    "bad flag value": (["--max-num-batched-tokens=abc"], {}),
    # the engine fails 12 % into a 30 s start-up (3.6 s): while the gate waits
    "memory (gpu-memory)": ([], {"VLLM_SIM_START_FAILURE": "gpu-memory", "VLLM_SIM_LOADING_SECONDS": "30"}),
    # a crash 5 s into a 60 s load
    "crash after 5 s": ([], {"VLLM_SIM_LOADING_SECONDS": "60", "VLLM_SIM_CRASH_AFTER_SECONDS": "5"}),
}


def once(name: str, extra: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    spec = render_serving(local_config())
    envs = [a for k, v in {"VLLM_SIM_STRICT_FLAGS": "1", **env}.items() for a in ("-e", f"{k}={v}")]
    began = time.time()
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--restart", "unless-stopped", *envs, IMAGE, "serve", *spec.argv, *extra],
        check=True, capture_output=True,
    )  # fmt: skip
    address = subprocess.run(
        ["docker", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", name], capture_output=True, text=True
    ).stdout.strip()
    params = {
        "endpoint": f"http://{address}:{spec.port}/v1", "served_name": spec.served_name,
        "max_model_len": spec.max_model_len, "flags": spec.shown_flags, "container_name": name,
        "smoke": {"deadline_seconds": 300, "steps": ["models"]},
        "container_watch": {"name": name, "docker_host": "unix:///var/run/docker.sock", "ssh": []},
    }  # fmt: skip
    gate_began = time.time()
    try:
        run_gate(params, "unused", lambda _line: None)
        raise SystemExit(f"{name}: the gate passed")
    except GateFailure as failure:
        failed = time.time()
        cause = failure.message.split("cause: ", 1)[1].split(".", 1)[0]
    die = subprocess.run(
        ["docker", "events", "--since", f"{began:.3f}", "--until", f"{time.time():.3f}", "--filter",
         f"container={name}", "--filter", "event=die", "--format", "{{.TimeNano}}"],
        capture_output=True, text=True,
    ).stdout.split()[0]  # fmt: skip
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    return failed - int(die) / 1e9, failed - gate_began, cause


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    subprocess.run(
        ["docker", "build", "-q", "--build-arg", "BASE_IMAGE=glm53-local/python:bookworm", "-t", IMAGE, "images/vllm-sim"],
        cwd=Path(__file__).resolve().parent.parent, check=True, capture_output=True,
        env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    for case, (extra, env) in CASES.items():
        figures = [once(f"glm-fail-fast-{i}", extra, env) for i in range(runs)]
        after_exit = [f[0] for f in figures]
        in_gate = [f[1] for f in figures]
        print(
            f"{case:22s} exit→gate failed: median {statistics.median(after_exit):.2f} s, max {max(after_exit):.2f} s; "
            f"gate ran {statistics.median(in_gate):.2f} s (median); cause: {figures[0][2]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
