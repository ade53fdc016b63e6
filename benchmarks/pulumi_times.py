"""Times of the real engine on the local stack: up (cold, warm), no-op up, preview per stack, destroy.

    .venv/bin/python benchmarks/pulumi_times.py          # needs the complete engine and dockerd

Cold: first `up` on a fresh state (images built, containers created, gate waits for the simulator).
Warm: `up` after `destroy`, with the images and the JIT cache volume still on the host.
Prints one line per figure; with an incomplete engine it prints why and exits 2.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.engine import PulumiProject, engine_missing, free_port

KEY = "sk-bench-0123456789abcdef0123"


def main() -> int:
    missing = engine_missing()
    if missing:
        print(f"pulumi_times: cannot run: {missing}")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        project = PulumiProject.copy_of_repo(Path(tmp) / "glm")
        port = free_port()
        name = f"glm53-bench-{port}"
        project.init_stack(
            "local",
            config={
                "glm:front.port": str(port),
                "glm:monitoring.port": str(free_port()),
                "glm:container.name": name,
            },
            secrets={"glm:apiKeys.bench": KEY},
        )
        try:
            project.run("up", "--yes", "--skip-preview", "-s", "local", label="up (cold)")
            project.run("up", "--yes", "--skip-preview", "-s", "local", label="up (no-op)")
            project.run("preview", "-s", "local", label="preview local (no changes)")
            project.run("destroy", "--yes", "-s", "local", label="destroy")
            project.run("up", "--yes", "--skip-preview", "-s", "local", label="up (warm)")
            for stack in ("a800", "ascend", "rtx5090"):
                project.init_stack(stack, config={}, secrets={"glm:apiKeys.bench": KEY})
                project.run(
                    "preview",
                    "-s",
                    stack,
                    label=f"preview {stack}",
                    extra_env={"GLM_DOCKER_HOST": "unix:///var/run/docker.sock"},
                )
        finally:
            project.run("destroy", "--yes", "-s", "local", check=False)
            subprocess.run(["docker", "volume", "rm", f"{name}-jit-cache"], capture_output=True)
        for label, seconds in project.timings.items():
            print(f"{label:32s} {seconds:7.1f} s")
        cold, warm = project.timings["up (cold)"], project.timings["up (warm)"]
        print(f"{'warm/cold up':32s} {warm / cold:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
