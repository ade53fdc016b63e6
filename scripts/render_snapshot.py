"""What every kind of stack renders under mocks, as one JSON file: to show that a refactor changed
no resource (issue 38: "every stack's rendered resources identical, or each difference explained").

    .venv/bin/python scripts/render_snapshot.py OUT.json      # then: diff two snapshots
    .venv/bin/python scripts/render_snapshot.py --diff A.json B.json [--mask-hashes]

Each committed profile stack, a three-host a800 stack and the Kubernetes kinds of
``tests/k8s_urns.py`` run through ``tests/conftest.py``'s mocks; every resource is kept as its URN
(type chain and name) and inputs. Certificates from a test CA differ per run and are kept as
``<PEM>``; two hashes over them differ too (k8s-local-tls-operator: the front's ``glm53/release``
and the probe's ``glm53/params`` pod annotations), so two runs of one commit differ there only.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HASH = re.compile(r"\b[0-9a-f]{12,64}\b")
PEM = re.compile(r"-----BEGIN [A-Z ]+-----.*?-----END [A-Z ]+-----\n?", re.S)


def _plain(value: Any) -> Any:
    """Inputs as JSON: outputs already resolved by the mocks, PEM text replaced."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return PEM.sub("<PEM>", value)
    if value is None or isinstance(value, bool | int | float):
        return value
    return f"<{type(value).__name__}>"


def _masked(value: Any, key: str = "") -> Any:
    """``--mask-hashes``: what is left of inputs once hashes over code are set aside (image tags over
    their files, a gate's ``version``, the pickled ``__provider``): a refactor that moves code changes
    those and nothing else."""
    if key == "__provider":
        return "<provider>"
    if isinstance(value, dict):
        return {k: _masked(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return HASH.sub("<hash>", value) if isinstance(value, str) else value


def snapshot() -> dict[str, dict[str, Any]]:
    from tests.conftest import profile_stacks, run_program
    from tests.k8s_urns import KINDS, _urn, recorded
    from tests.multihost_stacks import THREE, target

    runs: dict[str, Callable[[], Any]] = {
        stack: functools.partial(run_program, stack) for stack in profile_stacks()
    }
    runs["a800-three-hosts"] = lambda: run_program("a800", overrides={"glm:target": target(*THREE)})
    runs.update({f"k8s-{kind}": run for kind, run in KINDS.items()})
    found: dict[str, dict[str, Any]] = {}
    for kind, run in runs.items():
        with contextlib.redirect_stderr(io.StringIO()), recorded() as seen:
            deployment = run()
        engine: dict[str, str] = {}  # the mock's URN -> the engine's (parents register first)
        for r in seen:
            engine[r.urn] = _urn(r.urn, engine.get(r.parent), r.type, r.name)
        # Components reach the monitor only: the mocks record custom resources, in the same order.
        mine: dict[tuple[str, str], list[str]] = {}
        for r in seen:
            mine.setdefault((r.type, r.name), []).append(engine[r.urn])
        found[kind] = {mine[(r.type, r.name)].pop(0): _plain(r.inputs) for r in deployment.resources}
        found[kind].update({urns[0]: "<component>" for urns in mine.values() for _ in urns[:1] if urns})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="write the snapshot of this checkout here")
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("A", "B"), help="compare two snapshots")
    parser.add_argument("--mask-hashes", action="store_true", help="with --diff: hashes over code set aside")
    args = parser.parse_args()
    if args.diff is None and args.out is None:
        parser.error("name a file to write the snapshot to, or --diff A B")
    if args.diff:
        a, b = (json.loads(p.read_text()) for p in args.diff)
        if args.mask_hashes:
            a, b = _masked(a), _masked(b)
        print(f"{_print_differences(a, b)} resources differ")
        return
    args.out.write_text(json.dumps(snapshot(), indent=1, sort_keys=True))


def _print_differences(a: dict[str, Any], b: dict[str, Any]) -> int:
    """Each resource only in one snapshot, or with different inputs (naming them); their count."""
    differ = 0
    for kind in sorted(set(a) | set(b)):
        ra, rb = a.get(kind, {}), b.get(kind, {})
        for urn in sorted(set(ra) - set(rb)):
            differ += 1
            print(f"{kind}: only before: {urn}")
        for urn in sorted(set(rb) - set(ra)):
            differ += 1
            print(f"{kind}: only after: {urn}")
        for urn in sorted(set(ra) & set(rb)):
            if ra[urn] != rb[urn]:
                differ += 1
                keys = sorted(k for k in set(ra[urn]) | set(rb[urn]) if ra[urn].get(k) != rb[urn].get(k))
                print(f"{kind}: inputs differ: {urn}: {', '.join(keys)}")
    return differ


if __name__ == "__main__":
    main()
