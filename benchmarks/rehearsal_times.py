"""What SSH costs: a rehearsal `up` on a stand-in GPU host against a local `up`, as a ratio, one run.

    .venv/bin/python benchmarks/rehearsal_times.py

Needs the complete engine, dockerd, root (network namespaces) and the local images
(glm53-local/{python,nginx,prometheus}:bookworm). Both sides run the same program to a passing gate:

- local: the ``local`` stack on the local Docker engine (free ports, its own container name);
- rehearsal: the ``a800`` stack with ``glm:rehearsal`` on the stand-in host
  (tests/standin_host.py): Docker over ``ssh://``, preflight over SSH, the gate across the veth.

Each side: a cold ``up`` (the simulator image is built on that engine; the base image is already
there), ``destroy``, then a warm ``up`` (the image and JIT cache volume kept). Prints the seconds
and rehearsal ÷ local for each.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.engine import PulumiProject, engine_missing
from tests.rehearsal_stack import API_KEY, LOCAL_IMAGES, rehearsal_config
from tests.standin_host import StandinHost, unavailable_reason

LOCAL_WEIGHTS = Path("/var/lib/glm53-local/models/GLM-5.3-Flash-sim")


def cold_and_warm(project: PulumiProject, stack: str) -> tuple[float, float]:
    """Seconds of a cold up and of a warm up (after destroy); destroys at the end."""
    try:
        project.run("up", "--yes", "--skip-preview", "-s", stack, label="cold")
        project.run("destroy", "--yes", "--run-program", "-s", stack)
        project.run("up", "--yes", "--skip-preview", "-s", stack, label="warm")
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", stack, check=False)
    return project.timings["cold"], project.timings["warm"]


def main() -> int:
    reason = engine_missing() or unavailable_reason()
    if reason is None and not (LOCAL_WEIGHTS / "config.json").exists():
        reason = f"the local weights fixture {LOCAL_WEIGHTS} is missing (make test writes it)"
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        local = PulumiProject.copy_of_repo(Path(tmp) / "local" / "glm")
        container = local.init_local_stack(
            "glm53-bench-rehearsal", secrets={"glm:apiKeys.bench": API_KEY}
        ).container
        local_cold, local_warm = cold_and_warm(local, "local")
        subprocess.run(["docker", "volume", "rm", f"{container}-jit-cache"], capture_output=True)

        with StandinHost.create() as host:
            for image in LOCAL_IMAGES.values():
                host.load_image(image)
            remote = PulumiProject.copy_of_repo(Path(tmp) / "rehearsal" / "glm")
            remote.init_stack(
                "a800", config=rehearsal_config(host, "a800"), secrets={"glm:apiKeys.b": API_KEY}
            )
            remote_cold, remote_warm = cold_and_warm(remote, "a800")

    print(f"{'':24}{'local (s)':>10}{'rehearsal (s)':>15}{'ratio':>8}")
    for label, mine, theirs in (
        ("up (cold)", local_cold, remote_cold),
        ("up (warm)", local_warm, remote_warm),
    ):
        print(f"{label:24}{mine:10.1f}{theirs:15.1f}{theirs / mine:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
