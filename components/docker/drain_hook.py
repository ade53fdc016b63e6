"""The drain before a serving container goes: a Pulumi ``before_delete`` hook that takes the
replica out of the front's rotation (components/docker/rotation.py) and waits for its requests in
flight, so that Docker stops a container nothing routes to.

The hook is registered by the program on every run, from the config (``drain_hook``), or from the
stack's ``drain`` output where ``make destroy`` meets a config the program refuses
(``drain_for_destroy``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from typing import Any

import pulumi

from components.docker import rotation
from components.docker.vllm_server import REPLICA_LABEL

DRAIN_HOOK = "glm53-drain-replica"
"""The serving containers' ``before_delete`` hook. One name for every replica, registered on every
run, so that a host removed from the stack is still drained; ``pulumi destroy`` needs
``--run-program`` to find it (``make destroy`` passes it)."""
DESTROY_DRAIN = "GLM_DESTROY_DRAIN"
"""Set by ``make destroy`` (``scripts/pulumi.sh destroy``) to the stack's ``drain`` output (JSON):
the program registers the drain hook from it when it refuses the stack's config."""


def drain_hook(front: Mapping[str, Any], grace_seconds: int) -> pulumi.ResourceHook:
    """The serving containers' ``before_delete`` hook: drains the replica named by the container's
    :data:`REPLICA_LABEL` before Docker stops it."""

    async def before_delete(args: pulumi.ResourceHookArgs) -> None:
        labels = (args.old_inputs or {}).get("labels") or []
        replica = next((str(item["value"]) for item in labels if item.get("label") == REPLICA_LABEL), None)
        if replica is None:
            return  # a container from before the rotation existed: nothing routes to it by name
        reason = f"the replica on host {replica!r} is being replaced by pulumi up; retry shortly"
        # In a thread: the drain waits for requests in flight, and the program's loop must go on.
        done = await asyncio.to_thread(rotation.drain, front, replica, reason, grace_seconds)
        pulumi.log.info(f"replica {replica!r} left the front's rotation before its container: {done}")

    return pulumi.ResourceHook(DRAIN_HOOK, before_delete)


def drain_for_destroy(problem: str) -> bool:
    """In ``make destroy``, on a config the program refuses: register the drain hook from the stack's
    ``drain`` output (the front's access and the grace) instead of the config, so that the destroy
    removes the stack whatever its file now says. False outside a destroy: the refusal stands.

    The drain needs the replicas and the front, which the state has, not a valid config."""
    if DESTROY_DRAIN not in os.environ:
        return False
    first = problem.splitlines()[-1].strip()
    drain = json.loads(os.environ[DESTROY_DRAIN] or "null")
    if isinstance(drain, dict) and isinstance(drain.get("front"), dict):
        _destroy_hooks.append(drain_hook(drain["front"], int(drain.get("graceSeconds", 30))))
        how = "each serving container drained from the front first (the stack's `drain` output)"
    else:

        async def nothing(args: pulumi.ResourceHookArgs) -> None:
            return None

        _destroy_hooks.append(pulumi.ResourceHook(DRAIN_HOOK, nothing))
        how = "without a drain: the stack has no `drain` output (deployed before it existed)"
    pulumi.log.warn(f"the stack's config is refused ({first}); destroying from the state, {how}")
    return True


_destroy_hooks: list[pulumi.ResourceHook] = []
"""The hooks registered for a destroy, kept for the run."""
