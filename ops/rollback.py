"""The way back after a failed roll: put the last config whose gate passed back, then ``pulumi up``.

``make rollback STACK=a800`` (``scripts/ops.sh rollback -s a800``). The stack output ``verified`` is
published only by an update whose gate passed, and a failed ``up`` leaves it as it was; its
``config`` holds the keys that make a replica (``components.config.REPLICA_KEYS``) as the stack set
them then. This writes those keys back into the stack's config (so the next plain ``up`` does not
roll the bad version out again), says which changed, and runs ``pulumi up``: the replica that
failed is replaced by the version that passed, gated, and admitted to the front's rotation again.
Secrets are neither read nor written. Other keys (keys, front, monitoring) stay as they are.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from components.change_cost import one_box_outage_notice
from components.config import REPLICA_KEYS, ConfigError
from components.profiles import PROFILES
from ops.stack_file import build, glm_values, problems, with_verified


def changes(current: Mapping[str, Any], verified: Mapping[str, Any]) -> dict[str, Any | None]:
    """``glm:<key>`` → the verified value, or None to remove it, for each replica key that differs.

    ``current`` is ``pulumi config --json``; ``verified`` the ``config`` of the ``verified`` output.

    >>> now = {"glm:serving": {"objectValue": {"extraEnv": {"F": "wrong-answer"}}, "secret": False}}
    >>> changes(now, {"serving": {}})
    {'glm:serving': {}}
    >>> changes(now, {})
    {'glm:serving': None}
    """
    found: dict[str, Any | None] = {}
    for key in REPLICA_KEYS:
        entry = current.get(f"glm:{key}") or {}
        if entry.get("secret"):
            continue  # never a replica key; and nothing secret is read here
        now = entry.get("objectValue", entry.get("value"))
        if now in ({}, "", None):
            now = None  # Pulumi.yaml's empty default means "not set"
        want = verified.get(key)
        if want != now and not (want in ({}, None) and now is None):
            found[f"glm:{key}"] = want if want is not None else None
    return found


def outage_notice(current: Mapping[str, Any], verified: Mapping[str, Any]) -> str | None:
    """The one-box warning for the version the rollback goes back to; None with several hosts.

    Read from ``pulumi config --json`` (``glm:target``) and the verified keys, not through the
    models: the current file may be the one that is refused.

    >>> outage_notice({}, {"hardware": "local"})[:40]
    'rollback of a one-box stack: the API ans'
    >>> outage_notice({"glm:target": {"objectValue": {"hosts": [{}, {}]}}}, {"hardware": "a800"}) is None
    True
    """
    target = (current.get("glm:target") or {}).get("objectValue") or {}
    profile = PROFILES.get(str(verified.get("hardware")))
    if len(target.get("hosts") or [None]) > 1 or profile is None:
        return None
    return one_box_outage_notice("rollback", profile.name, profile.facts)


def rollback(stack: str, pulumi: Callable[..., str], pulumi_cli: list[str]) -> int:
    """Put the verified replica config back and run ``pulumi up``; returns its exit status.

    The keys are written with ``pulumi config``, where the stack's config lives: the local stack's
    is the user's copy (``scripts/pulumi.sh`` passes ``--config-file``), never the tracked file.
    Nothing is done, and nothing announced, where there is nothing to roll back: the file's replica
    keys are the verified ones and a preview plans no change; a file that would stay refused
    (a bad ``glm:front.*``: not a replica key) is refused before anything is written."""
    verified = json.loads(pulumi("stack", "output", "verified", "--json", stack=stack) or "null")
    if not isinstance(verified, dict) or not isinstance(verified.get("config"), dict):
        sys.exit(
            f"ops: stack {stack} has no verified config to go back to (its `verified` output comes from "
            "an update whose gate passed, made by this version of the program). Fix the config by hand "
            f"and run `make up STACK={stack}`."
        )
    current = json.loads(pulumi("config", "--json", stack=stack))
    try:
        build(with_verified(glm_values(current), verified["config"]), stack)
    except ConfigError as err:
        sys.exit(
            f"ops: rollback puts back a replica's keys only ({', '.join(f'glm:{k}' for k in REPLICA_KEYS)}), "
            f"and stack {stack}'s file would still be refused: {problems(err)[0]} Nothing was changed."
        )
    todo = changes(current, verified["config"])
    # A replica key that changes replaces the serving container; else a preview says what `up` would do.
    planned = (True, True) if todo else _planned(stack, pulumi_cli)
    if planned is None:
        return 1
    changes_anything, replaces = planned
    if not changes_anything:
        print(
            f"ops: nothing to roll back: {stack} already runs the version that last passed its gate (its "
            "replica config is the verified one, and a preview plans no change). Nothing was changed, "
            "no gate ran, and no request was refused."
        )
        return 0
    notice = outage_notice(current, verified["config"]) if replaces else None
    if notice:  # said before anything is written: rollback runs no preview of its own
        print(f"ops: {notice}", file=sys.stderr, flush=True)
    if not todo:
        print(f"ops: {stack}'s replica config already is the verified one; `pulumi up` brings back what runs")
    for key, value in todo.items():
        shown = "removed" if value is None else json.dumps(value, separators=(",", ":"))
        print(f"ops: {key} back to the last version that passed its gate: {shown}")
    for key, value in todo.items():
        if value is None:
            pulumi("config", "rm", key, stack=stack)
    to_set = {key: value for key, value in todo.items() if value is not None}
    if to_set:
        entries = {
            key: {"value": value if isinstance(value, str) else json.dumps(value), "secret": False}
            | ({} if isinstance(value, str) else {"objectValue": value})
            for key, value in to_set.items()
        }
        pulumi("config", "set-all", "--json", json.dumps(entries), stack=stack)
    started = time.monotonic()
    done = subprocess.run([*pulumi_cli, "up", "--yes", "--skip-preview", "-s", stack]).returncode
    took = time.monotonic() - started
    verdict = "passed its gates" if done == 0 else f"failed (exit {done})"
    print(f"ops: rollback of {stack} {verdict} in {took:.0f} s", file=sys.stderr)
    return done


CONTAINER = "docker:index/container:Container"
NEW_CONTAINER = {"create", "replace", "create-replacement"}


def _planned(stack: str, pulumi_cli: list[str]) -> tuple[bool, bool] | None:
    """What ``pulumi up`` would do, asked with a preview: whether it changes anything, and whether
    it (re)creates a container (the one-box 503 window); None when the preview failed (said why).

    The file's replica keys being the verified ones does not say what runs: the failed version's
    container may still be there."""
    preview = subprocess.run(
        [*pulumi_cli, "preview", "--json", "--non-interactive", "-s", stack], capture_output=True, text=True
    )
    try:
        steps = json.loads(preview.stdout or "{}").get("steps")
    except json.JSONDecodeError:
        steps = None
    if preview.returncode != 0 or not isinstance(steps, list):
        tail = (preview.stderr or preview.stdout or "").strip().splitlines()[-3:]
        print(f"ops: rollback's preview of {stack} failed: {' / '.join(tail)}", file=sys.stderr)
        return None
    changed = [s for s in steps if s.get("op") != "same"]
    return bool(changed), any(s.get("op") in NEW_CONTAINER and CONTAINER in s.get("urn", "") for s in changed)
