"""The long load and the fast failure, rehearsed: `pulumi up` of the a800 stack on a stand-in host
over SSH, the simulator in place of vLLM (``glm:rehearsal``).

1. A slowed start-up (``VLLM_SIM_LOADING_SECONDS``, ``VLLM_SIM_SHARDS`` through
   ``glm:serving.extraEnv``): the gate's progress lines as Pulumi printed them, each stamped with
   the seconds since `up` began.
2. A bad flag value in ``glm:serving.extraArgs`` (the simulator strict, as vLLM): `up` fails; the
   time from the engine's first exit (Docker's ``die`` event on the host, over SSH) to the line
   where Pulumi printed the gate's failure, and to `up`'s exit.
3. A memory failure (``VLLM_SIM_START_FAILURE=gpu-memory``): the same two figures.

Needs the Pulumi engine and the stand-in host (tests/standin_host.py). From the project root::

    PATH=~/.cache/glm53-engine/3.274.1/bin:$PATH .venv/bin/python benchmarks/startup_rehearsal.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.engine import PulumiProject, engine_missing
from tests.multihost import set_config
from tests.rehearsal_stack import API_KEY, LOCAL_IMAGES, rehearsal_config
from tests.standin_host import StandinHost, unavailable_reason

STACK = "a800"
CONTAINER = "glm53-flash-a800-8008"


def up(project: PulumiProject, stack: str = STACK) -> tuple[int, list[tuple[float, str]], float, float]:
    """`pulumi up`, its output lines stamped (seconds since start); returns the exit code, the
    lines, the wall-clock start and the wall-clock end."""
    began_wall, began = time.time(), time.monotonic()
    proc = subprocess.Popen(
        ["pulumi", "up", "--yes", "--skip-preview", "--non-interactive", "-s", stack],
        cwd=project.root, env=project.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.monotonic() - began, line.rstrip("\n")))
    code = proc.wait()
    return code, lines, began_wall, time.time()


def set_string(project: PulumiProject, key: str, value: str) -> None:
    project.run("config", "set", "--path", "--type", "string", key, value, "-s", STACK)


def first_die(host: StandinHost, since: float, until: float, container: str = CONTAINER) -> float | None:
    """The first exit of the container that is there now (by ID: the replaced one died too)."""
    ident = host.docker("inspect", "-f", "{{.Id}}", container).stdout.strip()
    out = host.docker(
        "events", "--since", f"{since:.3f}", "--until", f"{until:.3f}", "--filter", f"container={ident}",
        "--filter", "event=die", "--format", "{{.TimeNano}}",
    ).stdout.split()  # fmt: skip
    return int(out[0]) / 1e9 if out else None


def failing_run(project: PulumiProject, host: StandinHost, label: str) -> None:
    code, lines, began, ended = up(project)
    die = first_die(host, began, ended)
    failed = next((at for at, line in lines if "stopped while the gate waited" in line), None)
    print(f"\n== {label}: up exit {code} after {ended - began:.1f} s")
    for at, line in lines:
        if "smoke-gate" in line or "stopped while" in line or "cause:" in line or "Look at" in line:
            print(f"  [{at:6.1f}] {line[:300]}")
    if die is not None and failed is not None:
        print(f"  engine first exit → gate failure printed: {began + failed - die:.2f} s")
        print(f"  engine first exit → up exited:            {ended - die:.2f} s")
    else:
        print(f"  no die event ({die}) or no failure line ({failed}) seen")


def main() -> int:
    if (reason := engine_missing() or unavailable_reason()) is not None:
        print(f"cannot rehearse: {reason}", file=sys.stderr)
        return 2
    with StandinHost.create() as host, tempfile.TemporaryDirectory() as tmp:
        for image in LOCAL_IMAGES.values():
            host.load_image(image)
        project = PulumiProject.copy_of_repo(Path(tmp) / "glm")
        slow = {
            "glm:serving.extraEnv.VLLM_SIM_LOADING_SECONDS": "40",
            "glm:serving.extraEnv.VLLM_SIM_SHARDS": "12",
            "glm:serving.extraEnv.VLLM_SIM_STRICT_FLAGS": "1",
        }
        # Prometheus on the host's address, as tests/test_rehearsal.py has it: an opt-in since the hardening.
        config = {**rehearsal_config(host, STACK), "glm:monitoring.allowPublicBind": "true"}
        project.init_stack(STACK, config=config, secrets={"glm:apiKeys.e2e": API_KEY})
        for key, value in slow.items():
            set_string(project, key, value)
        try:
            code, lines, began, ended = up(project)
            print(f"== slowed start-up: up exit {code} after {ended - began:.1f} s; the gate's lines:")
            for at, line in lines:
                if "smoke-gate" in line or code != 0:
                    print(f"  [{at:6.1f}] {line[:300]}")
            if code != 0:
                return 1
            serving = {"extraEnv": {"VLLM_SIM_STRICT_FLAGS": "1", "VLLM_SIM_LOADING_SECONDS": "10"}}
            # A value starting with `--` is a flag to `pulumi config set`: written into the stack file.
            set_config(project, STACK, "glm:serving", {**serving, "extraArgs": ["--max-logprobs=abc"]})
            failing_run(project, host, "bad flag value in glm:serving.extraArgs")
            memory = {"extraEnv": {**serving["extraEnv"], "VLLM_SIM_START_FAILURE": "gpu-memory"}}
            set_config(project, STACK, "glm:serving", memory)
            failing_run(project, host, "memory failure (gpu-memory)")
        finally:
            project.run("destroy", "--yes", "-s", STACK, check=False, timeout=600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
