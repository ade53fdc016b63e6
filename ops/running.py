"""What runs, looked at before ``pulumi up`` and ``pulumi preview`` decide there is nothing to do.

The engine compares the program with its state, never with the host: a container stopped, removed,
crash-looping or unhealthy since the last update still looks deployed, and ``up`` would change
nothing while every request gets a 503. ``scripts/pulumi.sh up|preview`` (and ``make up``) ask this
module first: it reads the stack's containers from the state, looks at each on its Docker host (one
``docker inspect`` per host, over the provider's own SSH options), says what it found, and hands the
engine the arguments that bring each back through its gate:

- a container that is there but not serving (exited, restarting, paused, unhealthy): ``--replace``
  it; the engine drains it, removes it and creates it again, as ``make restart`` does;
- a container that is gone (``up`` only): a refresh of that container alone (``pulumi refresh
  --target``, ~1 s on the local stack) takes it out of the state, and the engine creates it; a
  replace cannot (the provider's delete fails stopping a container Docker does not know). A preview
  never refreshes (it must change nothing, and the Docker provider's read *removes* a stopped
  ``must_run`` container), so there a gone one is shown replaced;
- with anything brought back, the gate through the front is replaced too: it re-runs.

Why not ``pulumi up --refresh`` every time: it reads every resource of the stack, +2.2-3.3 s on a
no-op ``up`` of the local stack (4.4-6.7 s → 7.1-8.8 s), prints a line for each, and still misses an
unhealthy container (running, to Docker); this look costs 0.5-0.9 s (the state export included).

    python -m ops.running up STATE.json -s STACK [--config-file F]   # STATE: pulumi stack export
    # stderr: what it found; stdout: the engine's extra arguments, one a line
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components.gate.container import docker_cli

CONTAINER = "docker:index/container:Container"
FRONT_GATE = "glm:smoke:SmokeTest$pulumi-python:dynamic:Resource"
"""The gate through the front (``components/verification/smoke_gate.py``): the one that asks as clients do."""
INSPECT_SECONDS = 30


@dataclass(frozen=True)
class Deployed:
    """A container the stack's state holds, and the Docker host it lives on."""

    urn: str
    id: str
    name: str
    docker_host: str
    ssh: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    """A container that does not serve, and what was seen."""

    container: Deployed
    seen: str
    """What ``docker inspect`` says, for the user: ``exited (code 137) at 21:40:12 UTC``."""
    gone: bool = False
    """Not on its host at all: only a refresh takes it out of the state."""
    running: bool = False
    """Docker counts it running (unhealthy, restarting, paused): a refresh keeps it in the state."""


def deployed(state: Mapping[str, Any]) -> list[Deployed]:
    """The containers of the stack's state that must run, each with its provider's host.

    >>> p = {"urn": "urn:pulumi:local::glm::pulumi:providers:docker::d", "id": "9",
    ...      "type": "pulumi:providers:docker", "inputs": {"host": "unix:///var/run/docker.sock"}}
    >>> c = {"urn": "urn:…::glm53-flash-local", "id": "abc", "type": CONTAINER,
    ...      "outputs": {"name": "glm53-flash-local"}, "provider": p["urn"] + "::9"}
    >>> deployed({"deployment": {"resources": [p, c]}})
    [Deployed(urn='urn:…::glm53-flash-local', id='abc', name='glm53-flash-local', docker_host='unix:///var/run/docker.sock', ssh=())]
    >>> c["inputs"] = {"mustRun": False}
    >>> deployed({"deployment": {"resources": [p, c]}})
    []
    """
    resources = (state.get("deployment") or {}).get("resources") or []
    providers = {f"{r['urn']}::{r.get('id', '')}": r.get("inputs") or {} for r in resources if "id" in r}
    found = []
    for r in resources:
        if r.get("type") != CONTAINER or not r.get("id") or r.get("delete"):
            continue
        if (r.get("inputs") or {}).get("mustRun") is False:
            continue  # a one-shot container: not running is what it is for
        provider = providers.get(r.get("provider", ""), {})
        found.append(
            Deployed(
                urn=r["urn"],
                id=r["id"],
                name=(r.get("outputs") or {}).get("name") or r["id"][:12],
                docker_host=provider.get("host") or "unix:///var/run/docker.sock",
                ssh=tuple(_list(provider.get("sshOpts"))),
            )
        )
    return found


def _list(value: Any) -> list[str]:
    """A provider input list, as the state holds it (a list, or its JSON text)."""
    if isinstance(value, str):
        value = json.loads(value or "[]")
    return [str(v) for v in value or []]


def not_serving(container: Deployed, inspected: Mapping[str, Any] | None) -> Finding | None:
    """What is wrong with ``container`` by ``docker inspect``'s answer; None when it serves (running,
    healthy or still starting).

    >>> c = Deployed("urn", "abc", "glm53-flash-local", "unix:///var/run/docker.sock")
    >>> not_serving(c, {"State": {"Status": "running", "Health": {"Status": "healthy"}}}) is None
    True
    >>> not_serving(c, None).seen
    'removed'
    >>> not_serving(c, {"State": {"Status": "exited", "ExitCode": 137,
    ...                           "FinishedAt": "2026-12-05T21:40:12.5Z"}}).seen
    'exited (code 137) at 2026-12-05 21:40:12 UTC'
    >>> not_serving(c, {"State": {"Status": "running", "Health": {"Status": "unhealthy",
    ...     "FailingStreak": 3, "Log": [{"ExitCode": 1, "Output": "curl: (7) refused\\n"}]}}}).seen
    'unhealthy (3 failed checks in a row; the last: curl: (7) refused)'
    """
    if inspected is None:
        return Finding(container, "removed", gone=True)
    state = inspected.get("State") or {}
    status = state.get("Status", "?")
    health = state.get("Health") or {}
    if status == "running" and health.get("Status") != "unhealthy":
        return None
    if status == "running":
        last = ((health.get("Log") or [{}])[-1].get("Output") or "").strip().splitlines()
        why = f"; the last: {last[-1][:160]}" if last else ""
        streak = health.get("FailingStreak", "?")
        return Finding(container, f"unhealthy ({streak} failed checks in a row{why})", running=True)
    if status in ("exited", "dead"):
        return Finding(
            container, f"{status} (code {state.get('ExitCode', '?')}) at {_when(state.get('FinishedAt'))}"
        )
    # restarting (a crash loop), paused, created: not serving
    return Finding(container, status, running=bool(state.get("Running")))


def _when(stamp: Any) -> str:
    """Docker's RFC 3339 time to the second, UTC."""
    text = str(stamp or "?")
    return f"{text[:10]} {text[11:19]} UTC" if len(text) >= 19 else text


def look(containers: Iterable[Deployed]) -> list[Finding]:
    """Each container as its host runs it: one ``docker inspect`` of a host's containers, by the
    ids the state holds (a container of that name made by hand is not the stack's)."""
    by_host: dict[tuple[str, tuple[str, ...]], list[Deployed]] = defaultdict(list)
    for c in containers:
        by_host[(c.docker_host, c.ssh)].append(c)
    findings = []
    for (host, ssh), group in by_host.items():
        with docker_cli({"docker_host": host, "ssh": list(ssh)}) as (docker, env):
            done = subprocess.run(
                [*docker, "inspect", "--type", "container", *(c.id for c in group)],
                capture_output=True, text=True, env=env, timeout=INSPECT_SECONDS,
            )  # fmt: skip
        # Exit 1 where any is missing; the ones found are printed all the same.
        if done.returncode != 0 and "No such" not in done.stderr:
            raise RuntimeError(f"docker -H {host} inspect: {done.stderr.strip() or done.returncode}")
        seen = {item["Id"]: item for item in json.loads(done.stdout or "[]")}
        findings += [f for c in group if (f := not_serving(c, seen.get(c.id)))]
    return findings


def engine_args(verb: str, findings: list[Finding], state: Mapping[str, Any]) -> list[str]:
    """The arguments that make ``verb`` bring every finding back, and re-run the front's gate. In an
    ``up``, a gone container is not among them: :func:`refresh_out` took it out of the state, and
    the engine creates it.

    >>> c = Deployed("urn:c", "abc", "glm53-flash-local", "unix://")
    >>> state = {"deployment": {"resources": [{"urn": f"urn:…::{FRONT_GATE}::local-smoke-gate"}]}}
    >>> engine_args("up", [Finding(c, "exited (code 0)")], state)
    ['--replace', 'urn:c', '--replace', 'urn:…::glm:smoke:SmokeTest$pulumi-python:dynamic:Resource::local-smoke-gate']
    >>> engine_args("up", [Finding(c, "removed", gone=True)], state)[:1]
    ['--replace']
    >>> engine_args("preview", [Finding(c, "removed", gone=True)], state)[:2]
    ['--replace', 'urn:c']
    >>> engine_args("up", [], state)
    []
    """
    if not findings:
        return []
    args = [a for f in findings if not (verb == "up" and f.gone) for a in ("--replace", f.container.urn)]
    resources = (state.get("deployment") or {}).get("resources") or []
    return args + [
        a for r in resources if f"::{FRONT_GATE}::" in r.get("urn", "") for a in ("--replace", r["urn"])
    ]


def refresh_out(gone: Sequence[Finding], stack_args: Sequence[str]) -> None:
    """Take the containers gone from their hosts out of the state: a refresh of those alone, quiet
    unless it fails (then its output, and ``up`` goes on to say what the engine makes of them)."""
    if not gone:
        return
    started = time.monotonic()
    targets = [a for f in gone for a in ("--target", f.container.urn)]
    done = subprocess.run(
        ["pulumi", "refresh", "--yes", "--skip-preview", "--suppress-outputs", *targets, *stack_args],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        print(
            f"glm53: the refresh of what is gone failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}",
            file=sys.stderr,
        )
        return
    names = ", ".join(f.container.name for f in gone)
    took = time.monotonic() - started
    print(f"glm53: {names}: taken out of the state (pulumi refresh --target, {took:.1f} s)", file=sys.stderr)


def report(verb: str, findings: list[Finding]) -> str:
    """What was found, for the user, before the engine runs.

    >>> c = Deployed("urn:c", "abc", "glm53-flash-local", "unix://")
    >>> print(report("up", [Finding(c, "exited (code 0) at 2026-12-05 21:40:12 UTC")]))
    glm53: glm53-flash-local is not serving: exited (code 0) at 2026-12-05 21:40:12 UTC
    glm53: up creates it again, and the smoke gate runs again through the front
    """
    lines = [f"glm53: {f.container.name} is not serving: {f.seen}" for f in findings]
    them = "it" if len(findings) == 1 else "them"
    if verb == "up":
        lines.append(f"glm53: up creates {them} again, and the smoke gate runs again through the front")
    else:
        lines.append(f"glm53: the preview shows {them} replaced, and the gate re-run: `up` does it")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    verb, state_file, *stack_args = argv
    with open(state_file) as f:
        text = f.read()
    state = json.loads(text) if text.strip() else {}
    try:
        findings = look(deployed(state))
    except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as err:
        # The engine reaches the same host next and says why it cannot; nothing to add here.
        print(f"glm53: could not look at what runs before {verb}: {err}", file=sys.stderr)
        return 0
    if findings:
        print(report(verb, findings), file=sys.stderr)
    if verb == "up":
        refresh_out([f for f in findings if f.gone], stack_args)
    for arg in engine_args(verb, findings, state):
        print(arg)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
