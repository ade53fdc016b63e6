"""The stack's file and the version that runs, for the day-2 commands (ops/__main__.py, ops/rollback.py).

A look at the running stack (``status``, ``logs``, ``smoke``, ``debug``) must not depend on a file
the program refuses: the keys that make a replica are taken from the last version that passed its
gate (the ``verified`` output), the others (target, front, smoke, …) from the config of the last
update that succeeded (``pulumi stack history``, which records each update's config). What
``make rollback`` can mend is the replica keys alone, so a refusal suggests it only where the
file with those keys put back is accepted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from components.config import REPLICA_KEYS, SECRET_KEYS, ConfigError, StackConfig, build_stack_config
from components.config.loading import STACK_KEYS


def glm_values(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``glm:*`` keys of ``pulumi config --json`` (or an update's ``config`` in ``stack history
    --json``, the same shape) as the models read them; secrets left out, as no look needs one.

    >>> glm_values({"glm:hardware": {"value": "local", "secret": False},
    ...     "glm:front": {"value": '{"port":1}', "objectValue": {"port": 1}, "secret": False},
    ...     "glm:apiKeys": {"secret": True}, "aws:region": {"value": "x", "secret": False}})
    {'hardware': 'local', 'front': {'port': 1}}
    """
    raw: dict[str, Any] = {}
    for key, entry in config.items():
        name = key.removeprefix("glm:")
        if key.startswith("glm:") and name not in SECRET_KEYS and not entry.get("secret"):
            raw[name] = entry.get("objectValue", entry.get("value"))
    return raw


def build(raw: Mapping[str, Any], stack: str) -> StackConfig:
    """``raw`` through the models, as the program builds it (``GLM_DOCKER_HOST`` included)."""
    return build_stack_config(dict(raw), docker_host=os.environ.get("GLM_DOCKER_HOST") or None, stack=stack)


def problems(err: ConfigError) -> list[str]:
    """A refusal's problems, one a line (the first line of a report is its heading)."""
    lines = [line.strip() for line in str(err).splitlines()]
    return lines[1:] if len(lines) > 1 else lines


def with_verified(raw: Mapping[str, Any], verified: Mapping[str, Any]) -> dict[str, Any]:
    """``raw``'s keys but the replica's, which are the verified ones: what ``make rollback`` writes.

    >>> with_verified({"hardware": "local", "serving": {"maxNumSeq": 6}, "front": {"port": 1}},
    ...     {"hardware": "local"})
    {'front': {'port': 1}, 'hardware': 'local'}
    """
    return {k: v for k, v in raw.items() if k not in REPLICA_KEYS} | dict(verified)


def rollback_mends(raw: Mapping[str, Any], verified: Mapping[str, Any] | None, stack: str) -> bool:
    """Whether ``make rollback`` would leave a file the program accepts (it puts back only the
    replica keys: a bad ``glm:front.*`` value stays as it is)."""
    if verified is None:
        return False
    try:
        build(with_verified(raw, verified), stack)
    except ConfigError:
        return False
    return True


def last_succeeded_config(history: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The ``glm:*`` keys of the newest update that succeeded (``stack history --json``), or None.

    >>> last_succeeded_config([{"kind": "update", "result": "failed", "config": {}},
    ...     {"kind": "update", "result": "succeeded",
    ...      "config": {"glm:hardware": {"value": "local", "secret": False}}}])
    {'hardware': 'local'}
    """
    for update in history:
        if update.get("kind") == "update" and update.get("result") == "succeeded" and update.get("config"):
            return glm_values(update["config"])
    return None


def running_candidates(
    raw: Mapping[str, Any], verified: Mapping[str, Any] | None, history: Iterable[Mapping[str, Any]]
) -> list[tuple[str, dict[str, Any]]]:
    """What runs, best first, each with how it was found: the last succeeded update's keys with the
    verified replica keys; the file's other keys with them (a history without configs)."""
    found: list[tuple[str, dict[str, Any]]] = []
    last = last_succeeded_config(history)
    if last is not None:
        if verified is None:
            found.append(("the last update that succeeded", last))
        else:
            found.append(
                (
                    "the last update that succeeded, its replica as its gate passed",
                    with_verified(last, verified),
                )
            )
    if verified is not None:
        known = {k: v for k, v in raw.items() if k in STACK_KEYS}
        found.append(("the last version that passed its gate", with_verified(known, verified)))
    return found
