"""Roll time per host: one vLLM flag rolled over 1, 2 and 3 stand-in hosts (the simulator), split
into what each host costs: the drain, the container's replacement, its gate and the rest (the
overhead), beside the previous design's fixed wait of 31 s per host for nginx's ``fail_timeout``.

    PATH=<engine>/bin:.venv/bin:$PATH .venv/bin/python benchmarks/roll_time.py --out /tmp/roll

Needs root (stand-in hosts) and the local images (offline/images.sh). Figures come from the
``pulumi up`` output itself: the drain hook's and the replica gates' own lines, and the wall clock.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.engine import PulumiProject
from tests.multihost import init_stack, load_images
from tests.standin_host import StandinHost, link_private_network

API_KEY = "sk-roll-4c9e2a7f18b3d65e0a9c7f42"
PREVIOUS_WAIT_PER_HOST_S = 31.0
"""The previous design: after each replacement, ``fail_timeout`` (30 s) + 1 for nginx to take it back."""
DRAINED = re.compile(r"drained[^(]*\((\d+) s\)")
GATE = re.compile(r"\] ([\w.-]+): passed in ([\d.]+) s")
REPLACED = re.compile(r"serving-vllm created replacement \(([\d.]+)s\)")
DELETED = re.compile(r"serving-vllm deleted original \(([\d.]+)s\)")


def roll(n: int, hosts: list[StandinHost]) -> dict[str, float]:
    project = PulumiProject.copy_of_repo(Path(tempfile.mkdtemp(prefix=f"glm-roll-{n}-")) / "glm")
    init_stack(project, "local", hosts[:n], API_KEY, front_port=18491)
    try:
        project.run("up", "--yes", "--skip-preview", "-s", "local", timeout=2400)
        project.run("config", "set", "--path", "glm:serving.maxNumSeqs", "6", "-s", "local")
        out = project.run("up", "--yes", "--skip-preview", "-s", "local", label="roll", timeout=2400)
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", "local", check=False, timeout=1800)
    drains = [float(x) for x in DRAINED.findall(out)]
    gates = [float(s) for _, s in GATE.findall(out)]
    replace = [float(x) for x in REPLACED.findall(out)] + [float(x) for x in DELETED.findall(out)]
    per_host = project.timings["roll"] / n
    parts = (sum(drains) + sum(gates) + sum(replace)) / n
    return {
        "roll_s": round(project.timings["roll"], 1),
        "per_host_s": round(per_host, 1),
        "drain_per_host_s": round(sum(drains) / n, 2),
        "replace_per_host_s": round(sum(replace) / n, 2),
        "gate_per_host_s": round(sum(gates) / n, 2),
        "overhead_per_host_s": round(per_host - parts, 2),
        "previous_wait_per_host_s": PREVIOUS_WAIT_PER_HOST_S,
        "per_host_vs_previous_wait_ratio": round(per_host / PREVIOUS_WAIT_PER_HOST_S, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--hosts", type=int, default=3)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, dict[str, float]] = {}
    with contextlib.ExitStack() as stack:
        hosts = [stack.enter_context(StandinHost.create(lifetime_s=5400)) for _ in range(args.hosts)]
        link_private_network(hosts)
        load_images(hosts, Path(tempfile.mkdtemp(prefix="glm-roll-images-")))
        for n in range(1, args.hosts + 1):
            figures[str(n)] = roll(n, hosts)
            print(f"{n} host(s): {figures[str(n)]}", file=sys.stderr)
    # What each further host adds to the roll (the fixed cost of an `up` left out), beside what that
    # host's drain, replacement and gate took: the difference is the per-host overhead.
    one = figures["1"]
    for n, row in figures.items():
        if int(n) > 1:
            marginal = (row["roll_s"] - one["roll_s"]) / (int(n) - 1)
            work = row["drain_per_host_s"] + row["replace_per_host_s"] + row["gate_per_host_s"]
            row["marginal_per_host_s"] = round(marginal, 2)
            row["marginal_overhead_per_host_s"] = round(marginal - work, 2)
    (args.out / "roll-time.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
