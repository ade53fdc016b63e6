"""Where a local ``pulumi up`` from nothing spends its time, and its ratio to the seeds' way.

    .venv/bin/python benchmarks/up_timeline.py [--runs 3]

Needs the complete engine and dockerd (make test sets both up). Each run starts from nothing but
the images (``destroy`` before it; the local base images and the engine stay warm), runs
``pulumi up --json`` and stamps each engine event as it arrives (the events' own timestamps are
whole seconds): a resource's bar runs from its step's start (``resourcePreEvent``) to its outputs
(``resOutputsEvent``). Prints the per-resource timeline of the median run, then the seeds' way (the
same three ``docker run`` as a shell script polling ``/v1/models`` and asking 13*17; see
``pulumi_times.py``) for as many runs, and ``pulumi up`` ÷ script as a ratio of medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.pulumi_times import KEY, STACK, clean_script_run, deployed_as_script, sh, timed
from tests.engine import PulumiProject, engine_missing


@dataclass(frozen=True)
class Step:
    name: str
    type: str
    start: float
    end: float


def stamped_up(project: PulumiProject) -> tuple[float, list[Step]]:
    """``pulumi up --json``: the whole time and each resource's step, stamped on arrival."""
    began = time.monotonic()
    proc = subprocess.Popen(
        ["pulumi", "up", "--yes", "--skip-preview", "--json", "--non-interactive", "-s", STACK],
        cwd=project.root, env=project.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    started: dict[str, float] = {}
    steps: list[Step] = []
    tail: list[str] = []
    for line in proc.stdout:
        now = time.monotonic() - began
        tail = [*tail[-20:], line]
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        for kind in ("resourcePreEvent", "resOutputsEvent"):
            if kind not in event:
                continue
            meta = event[kind]["metadata"]
            if meta.get("op") == "same" or meta["type"].startswith("pulumi:providers:"):
                continue
            urn = meta["urn"]
            if kind == "resourcePreEvent":
                started[urn] = now
            elif urn in started:
                steps.append(Step(urn.rsplit("::", 1)[1], meta["type"], started.pop(urn), now))
    if proc.wait() != 0:
        raise SystemExit("pulumi up failed:\n" + "".join(tail))
    return time.monotonic() - began, steps


def timeline(total: float, steps: list[Step]) -> str:
    """One line per resource: its start and end, and a bar on a 0.5 s grid."""
    width = max(len(s.name) for s in steps)
    lines = [f"{'resource':{width}s}  start    end   took  (total {total:.2f} s, one mark per 0.5 s)"]
    for s in sorted(steps, key=lambda s: (s.start, s.end)):
        if s.type == "pulumi:pulumi:Stack" or (s.type.startswith("glm:") and s.end - s.start < 0.05):
            continue
        bar = " " * int(s.start / 0.5) + "#" * max(1, round((s.end - s.start) / 0.5))
        lines.append(f"{s.name:{width}s} {s.start:6.2f} {s.end:6.2f} {s.end - s.start:6.2f}  |{bar}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    missing = engine_missing()
    if missing:
        print(f"up_timeline: cannot run: {missing}")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        project = PulumiProject.copy_of_repo(Path(tmp) / "glm")
        local = project.init_local_stack("glm53-timeline", secrets={"glm:apiKeys.bench": KEY})
        runs: list[tuple[float, list[Step]]] = []
        script_times: list[float] = []
        try:
            for _ in range(args.runs):
                runs.append(stamped_up(project))
                print(f"up from nothing: {runs[-1][0]:.2f} s", flush=True)
                script = deployed_as_script(project, local.container, local.front_port, Path(tmp))
                project.run("destroy", "--yes", "--run-program", "-s", STACK)
            (Path(tmp) / "deploy.sh").write_text(script)
            for _ in range(args.runs):
                clean_script_run()
                script_times.append(timed(lambda: sh(f"timeout 120 bash {tmp}/deploy.sh")))
                print(f"seeds' way to 221: {script_times[-1]:.2f} s", flush=True)
        finally:
            clean_script_run()
            project.run("destroy", "--yes", "--run-program", "-s", STACK, check=False)
            subprocess.run(["docker", "volume", "rm", f"{local.container}-jit-cache"], capture_output=True)
    median_run = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    print(timeline(*median_run))
    up, seeds = statistics.median(r[0] for r in runs), statistics.median(script_times)
    print(f"pulumi up from nothing: median {up:.2f} s; the seeds' way: median {seeds:.2f} s (n={args.runs})")
    print(f"pulumi up ÷ the seeds' way (medians): {up / seeds:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
