"""The front's rotation: a replica receives client traffic only while its current container has
passed its gate.

The front's nginx.conf lists no replica. Its ``upstream`` includes ``rotation/upstream.conf``, which
``templates/rotation.sh`` writes inside the front container from one small state per replica (its
address, ``in`` or ``out``, and why), then checks with ``nginx -t`` and loads with a graceful reload.
Three moments of a replica's life change it:

- **before its container is deleted** (replaced by ``pulumi up``, ``make restart``, or removed): a
  ``before_delete`` hook on the serving container (components/docker/drain_hook.py) drains it: out
  of rotation, then wait until every request nginx began before the reload has finished, bounded by
  ``glm:container.stopGraceSeconds``;
- **after its gate passed** (components/docker/replica_gate.py): admitted, by its fixed address;
- **when its gate failed**: kept out, with the failure as the reason. While no replica is in
  rotation the front answers a JSON 503 carrying that reason instead of a generic "unavailable".

The state lives in the front's config volume beside the releases, so a key revoked while an engine
is down, or a front release for any other reason, neither needs an engine nor changes the rotation.
Every change runs through ``docker exec`` on the front's host, as the front's releases do.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from typing import Any

from components.docker.nginx_reload import (
    CURRENT_CONF,
    RELOAD_WAIT_SECONDS,
    container_exec_argv,
    docker_argv,
)
from components.render.nginx_conf import (
    ROTATION_DIR,
    STATUS_DIR,
    replica_group,
    replica_server,
    upstream_server,
)
from components.render.openai_errors import no_replica_body
from components.template import shell_program

_ADDRESS = '$(cat "$f")'
"""A replica's address where rotation.sh writes its ``server`` line: its ``.address`` file."""
_GROUP = replica_group("$name", _ADDRESS, ['$(cat "$g")'])
"""A replica's own upstream (prefix affinity), as rotation.sh writes it: ``$g`` is each other replica in."""


def rotation_script(
    root: str = ROTATION_DIR, status: str = STATUS_DIR, current_conf: str = CURRENT_CONF
) -> str:
    """templates/rotation.sh for a front whose rotation lies in ``root`` (a harness may put it elsewhere)."""
    return shell_program(
        "rotation.sh",
        {
            "ROOT": root,
            "STATUS": status,
            "CURRENT_CONF": current_conf,
            "SERVER_IN": replica_server(_ADDRESS),
            "SERVER_OUT": upstream_server(_ADDRESS, down=True),
            "GROUP_OPEN": _GROUP[0],
            "GROUP_SERVER": _GROUP[1],
            "GROUP_BACKUP": _GROUP[2],
            "GROUP_CLOSE": "\n".join(_GROUP[3:]),
            "TRIES": str(RELOAD_WAIT_SECONDS * 20),
            "WAIT": str(RELOAD_WAIT_SECONDS),
        },
    )


SCRIPT = rotation_script()
EXEC_TIMEOUT_SECONDS = 90
"""A rotation change is a file write, ``nginx -t`` and a reload: seconds, plus the drain's grace."""


class RotationError(RuntimeError):
    """The front refused or could not apply a rotation change."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def front_access(docker_host: str, ssh: Mapping[str, Any] | None, container: str) -> dict[str, Any]:
    """How to reach the front container: its Docker host, the ssh options for it, its name."""
    return {"docker_host": docker_host, "ssh": dict(ssh) if ssh else None, "container": container}


def run(front: Mapping[str, Any], command: str, *args: str, timeout: float = EXEC_TIMEOUT_SECONDS) -> str:
    """One rotation command in the front container; its last line. Raises :class:`RotationError`."""
    argv = container_exec_argv(
        str(front["docker_host"]),
        front.get("ssh"),
        str(front["container"]),
        SCRIPT,
        command,
        *args,
    )
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RotationError(
            f"the front's rotation did not answer within {timeout:.0f} s ({command})"
        ) from None
    if done.returncode != 0:
        raise RotationError(
            f"the front's rotation refused {command} (exit {done.returncode}): {done.stderr.strip()}",
            done.returncode,
        )
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


STOPPING_SECONDS = 15
"""How long a front whose exec died (126/137) may take to show as stopped."""
EXEC_REFUSED_WHILE_STOPPING = "unable to upgrade to tcp, received 500"
"""What the docker CLI prints (exit 1) when the daemon refuses an exec's start because the
container's process has just exited: met by ``benchmarks/up_timeline.py``'s ``destroy``."""


def front_absent(front: Mapping[str, Any], err: RotationError) -> bool:
    """The front container does not exist or is not running: it routes nothing, so nothing to drain.

    ``pulumi destroy`` deletes the front beside the replicas: an exec into a container Docker is
    stopping dies with 126 (or 137) and no message, or the CLI's exec start is refused with
    :data:`EXEC_REFUSED_WHILE_STOPPING`; those wait for the container to show as stopped (at most
    :data:`STOPPING_SECONDS`)."""
    text = str(err)
    if "No such container" in text or "is not running" in text:
        return True
    if err.exit_code not in (126, 137) and EXEC_REFUSED_WHILE_STOPPING not in text:
        return False
    argv = docker_argv(
        str(front["docker_host"]),
        front.get("ssh"),
        "inspect",
        "-f",
        "{{.State.Running}}",
        str(front["container"]),
    )
    deadline = time.monotonic() + STOPPING_SECONDS
    while time.monotonic() < deadline:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except subprocess.TimeoutExpired:
            return False
        if done.returncode != 0:
            return "No such" in done.stderr
        if done.stdout.strip() != "true":
            return True
        time.sleep(1)
    return False


def admit(front: Mapping[str, Any], replica: str, address: str) -> str:
    return run(front, "admit", replica, address)


def keep_out(front: Mapping[str, Any], replica: str, reason: str) -> str:
    return run(front, "fail", replica, no_replica_body(reason))


def drain(front: Mapping[str, Any], replica: str, reason: str, grace_seconds: int) -> str:
    """Out of rotation, then wait for the requests in flight (at most ``grace_seconds``); nothing to
    do while the front does not run (the first deploy)."""
    try:
        return run(
            front,
            "drain",
            replica,
            no_replica_body(reason),
            str(grace_seconds),
            timeout=EXEC_TIMEOUT_SECONDS + grace_seconds,
        )
    except RotationError as err:
        if front_absent(front, err):
            return "no front running: nothing to drain"
        raise


def forget(front: Mapping[str, Any], replica: str, grace_seconds: int) -> str:
    try:
        return run(front, "forget", replica, str(grace_seconds), timeout=EXEC_TIMEOUT_SECONDS + grace_seconds)
    except RotationError as err:
        if front_absent(front, err):
            return "no front running"
        raise
