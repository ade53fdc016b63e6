"""How long the program takes to render each stack under Pulumi mocks (what a unit test pays).

    .venv/bin/python benchmarks/mocks_render.py [--runs 15]

Runs ``__main__.py`` through ``tests/conftest.py``'s ``run_program`` (the mocks the tests use) for
every committed profile stack, after one warm-up run each, and prints min and median per stack in
milliseconds, plus the resources registered.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import profile_stacks, run_program  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print(f"{'stack':10s} {'min ms':>8s} {'median ms':>10s} {'resources':>10s}")
    for stack in profile_stacks():
        times = []
        with contextlib.redirect_stderr(io.StringIO()):  # the stacks' advisories
            resources = len(run_program(stack).resources)
            for _ in range(args.runs):
                started = time.perf_counter()
                run_program(stack)
                times.append((time.perf_counter() - started) * 1000)
        print(f"{stack:10s} {min(times):8.1f} {statistics.median(times):10.1f} {resources:10d}")


if __name__ == "__main__":
    main()
