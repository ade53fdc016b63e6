"""The fast failure on a replica: `pulumi up` of a two-host stack (the local profile, the simulator
strict as vLLM) on stand-in hosts over SSH; then a bad flag value, then a memory failure. The
rolling update replaces the first host's replica first; its ReplicaGate follows that container
over SSH and fails `up` with the cause.

Prints, for each failure, the time from the engine's first exit on that host (Docker's ``die``
event) to the line where Pulumi printed the replica gate's failure, and to `up`'s exit. From the
project root::

    PATH=~/.cache/glm53-engine/3.274.1/bin:$PATH .venv/bin/python benchmarks/startup_replicas.py
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.startup_rehearsal import first_die, up
from tests.engine import PulumiProject, engine_missing
from tests.multihost import init_stack, load_images, set_config
from tests.standin_host import StandinHost, link_private_network, unavailable_reason

STACK = "local"
API_KEY = "sk-" + secrets.token_hex(24)  # random: the config refuses a guessable key
STRICT = {"VLLM_SIM_STRICT_FLAGS": "1", "VLLM_SIM_LOADING_SECONDS": "5"}


def failing_run(project: PulumiProject, host: StandinHost, label: str) -> None:
    code, lines, began, ended = up(project, STACK)
    container = f"glm53-multi-{STACK}"
    die = first_die(host, began, ended, container)
    failed = next((at for at, line in lines if "stopped while the gate waited" in line), None)
    print(f"\n== {label}: up exit {code} after {ended - began:.1f} s")
    for at, line in lines:
        steps = ("serving-vllm", "replica-gate ", "stopped while", "cause:", "Look at")
        if any(step in line for step in steps) and "Traceback" not in line:
            print(f"  [{at:6.1f}] {line[:300]}")
    if die is not None and failed is not None:
        print(
            f"  engine first exit on {host.name} → replica gate failure printed: {began + failed - die:.2f} s"
        )
        print(f"  engine first exit on {host.name} → up exited:                    {ended - die:.2f} s")
    else:
        print(f"  no die event ({die}) or no failure line ({failed}) seen")


def main() -> int:
    if (reason := engine_missing() or unavailable_reason()) is not None:
        print(f"cannot rehearse: {reason}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        hosts = [stack.enter_context(StandinHost.create()) for _ in range(2)]
        link_private_network(hosts)
        load_images(hosts, Path(tmp))
        project = PulumiProject.copy_of_repo(Path(tmp) / "glm")
        init_stack(project, STACK, hosts, API_KEY, front_port=18490)
        try:
            set_config(project, STACK, "glm:serving", {"extraEnv": STRICT})
            code, _lines, began, ended = up(project, STACK)
            print(f"== two hosts up: exit {code} after {ended - began:.1f} s")
            if code != 0:
                print("\n".join(line for _at, line in _lines[-60:]))
                return 1
            bad = {"extraEnv": STRICT, "extraArgs": ["--max-logprobs=abc"]}
            set_config(project, STACK, "glm:serving", bad)
            failing_run(project, hosts[0], "bad flag value, replica on the first host")
            memory = {"extraEnv": {**STRICT, "VLLM_SIM_START_FAILURE": "gpu-memory"}}
            set_config(project, STACK, "glm:serving", memory)
            failing_run(project, hosts[0], "memory failure, replica on the first host")
        finally:
            project.run("destroy", "--yes", "-s", STACK, check=False, timeout=600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
