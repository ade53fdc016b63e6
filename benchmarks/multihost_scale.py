"""How cost grows with hosts, measured on the simulator across stand-in hosts (issue 15, item 5).

For 1, 2 and 3 stand-in hosts, in one run: a cold ``pulumi up`` and a no-op ``pulumi preview``
(wall clock), then for 1 and 2 replicas the capacity probe's concurrency sweep through the front
(``python -m capacity_probe --phases concurrency``). Each stack is destroyed before the next.

    PATH=<engine>/bin:.venv/bin:$PATH .venv/bin/python benchmarks/multihost_scale.py --out /tmp/scale

Needs root (stand-in hosts) and the local images (offline/images.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.engine import PulumiProject
from tests.multihost import IMAGES, init_stack, load_images
from tests.standin_host import StandinHost, link_private_network

API_KEY = "sk-multihost-97b4f1e3ef97eef652"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--sweep-top", type=int, default=16, help="top of the probe's concurrency sweep")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, dict[str, float | None]] = {}
    with contextlib.ExitStack() as stack:
        hosts = [stack.enter_context(StandinHost.create(lifetime_s=5400)) for _ in range(args.hosts)]
        link_private_network(hosts)
        load_images(hosts, Path(tempfile.mkdtemp(prefix="glm-multi-images-")))
        print(f"{len(hosts)} stand-in hosts ready, images {', '.join(IMAGES)} loaded", file=sys.stderr)
        for n in range(1, args.hosts + 1):
            project = PulumiProject.copy_of_repo(Path(tempfile.mkdtemp(prefix=f"glm-scale-{n}-")) / "glm")
            init_stack(project, "local", hosts[:n], API_KEY, front_port=18490)
            row: dict[str, float | None] = {}
            try:
                project.run("up", "--yes", "--skip-preview", "-s", "local", label="up", timeout=2400)
                project.run("preview", "--expect-no-changes", "-s", "local", label="preview")
                row = {"up_s": project.timings["up"], "preview_s": project.timings["preview"]}
                if n <= 2:
                    row["tok_s"] = probe(project, n, args)
            finally:
                project.run("destroy", "--yes", "--run-program", "-s", "local", check=False, timeout=1800)
            figures[str(n)] = row
            print(f"{n} host(s): {row}", file=sys.stderr)
    base = figures["1"]
    for row in figures.values():
        for key in ("up_s", "preview_s", "tok_s"):
            if row.get(key) is not None and base.get(key):
                row[f"{key}_ratio"] = round(float(row[key] or 0) / float(base[key] or 1), 2)
    (args.out / "multihost-scale.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


def probe(project: PulumiProject, n: int, args: argparse.Namespace) -> float | None:
    """The best aggregate tok/s of the probe's concurrency sweep through the front."""
    endpoint = project.outputs("local")["endpoint"]
    out = args.out / f"probe-{n}"
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "capacity_probe", "--endpoint", endpoint, "--api-key-env", "GLM_SCALE_KEY",
         "--phases", "concurrency", "--max-num-seqs", str(args.sweep_top), "--max-concurrency",
         str(args.sweep_top), "--sweep-tokens", "64", "--sweep-rounds", "2", "--time-budget", "300",
         "--max-requests", "400", "--out", str(out), "--quiet"],
        env={**os.environ, "GLM_SCALE_KEY": API_KEY}, check=False, timeout=600,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    print(f"probe ({n} replica(s)) took {time.monotonic() - started:.0f} s", file=sys.stderr)
    result = json.loads((out / "probe-result.json").read_text())
    levels = (result.get("phases", {}).get("concurrency") or result.get("concurrency") or {}).get(
        "levels"
    ) or []
    best = max((lvl.get("aggregate_tok_s") or 0 for lvl in levels), default=None)
    (args.out / f"probe-{n}-levels.json").write_text(json.dumps(levels, indent=2))
    return best


if __name__ == "__main__":
    raise SystemExit(main())
