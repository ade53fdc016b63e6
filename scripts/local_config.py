"""The user's copy of the local stack's config: theirs to change, the repository's defaults merged in.

The local stack reads ``$GLM_STATE_DIR/Pulumi.local.yaml`` (``scripts/env.sh``), not the tracked
``Pulumi.local.yaml``: its API key and passphrase salt must never land in the repository, and what a
user sets with ``scripts/pulumi.sh config set … -s local`` (or ``config rm``, or ``make rollback``)
is kept there and deployed by the next ``up``, like on any stack. The repository's file still
brings its new defaults: a three-way merge against the tracked file as last merged (kept beside
the copy as ``Pulumi.local.tracked.yaml``) applies only what changed in the repository since, leaf
by leaf, so a key the user set and the repository did not touch stays the user's.

    python3 scripts/local_config.py TRACKED MINE
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import yaml

HEADER = (
    "# The local stack's config: yours (scripts/pulumi.sh config set … -s local writes here). Made from\n"
    "# the repository's Pulumi.local.yaml, whose later changes scripts/env.sh merges in key by key.\n"
)
_ABSENT = object()


def merge(base: Any, tracked: Any, mine: Any) -> Any:
    """``mine`` with what changed from ``base`` to ``tracked`` applied (``_ABSENT``: no such key).

    >>> merge({"a": 1}, {"a": 1, "b": 2}, {"a": 5})  # a new default arrives; the user's value stays
    {'a': 5, 'b': 2}
    >>> merge({"a": 1, "b": 2}, {"a": 1}, {"b": 2, "c": 3})  # removed upstream; the user's rm stays
    {'c': 3}
    """
    if tracked == base:
        return mine
    if isinstance(base, dict) and isinstance(tracked, dict) and isinstance(mine, dict):
        merged = dict(mine)
        for key in {**base, **tracked}:
            value = merge(base.get(key, _ABSENT), tracked.get(key, _ABSENT), mine.get(key, _ABSENT))
            if value is _ABSENT:
                merged.pop(key, None)
            else:
                merged[key] = value
        return merged
    return tracked if tracked is _ABSENT else copy.deepcopy(tracked)


def sync(tracked_path: Path, mine_path: Path) -> None:
    """Bring the repository's changes since the last sync into the user's copy (made on first use)."""
    base_path = mine_path.with_name(mine_path.name.replace(".yaml", ".tracked.yaml"))
    tracked = _read(tracked_path)
    tracked_config = tracked.get("config") or {}
    if not mine_path.exists():
        mine = copy.deepcopy(tracked)
    else:
        mine = _read(mine_path)
        # No record of the last merge: the copy was made from the tracked file as it is now.
        base = _read(base_path).get("config") or {} if base_path.exists() else tracked_config
        mine["config"] = merge(base, tracked_config, mine.get("config") or {})
    # `stack init` has just written the passphrase salt into the tracked file: it is the user's.
    if "encryptionsalt" in tracked and "encryptionsalt" not in mine:
        mine["encryptionsalt"] = tracked["encryptionsalt"]
    mine_path.parent.mkdir(parents=True, exist_ok=True)
    text = HEADER + yaml.safe_dump(mine, sort_keys=False)
    if not mine_path.exists() or mine_path.read_text() != text:
        mine_path.write_text(text)
    base_path.write_text(yaml.safe_dump({"config": tracked_config}, sort_keys=False))


def _read(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


if __name__ == "__main__":
    sync(Path(sys.argv[1]), Path(sys.argv[2]))
