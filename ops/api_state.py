"""What ``make status`` says first: whether the API answers, and if not why, with the fix.

The API is asked, never inferred from the containers: ``GET /v1/models`` through the front with
the stack's first API key, the route every client's first request takes to vLLM. A container
"running" says nothing of a front whose rotation is empty (a failed gate: every request a 503
``no_replica_in_rotation``), and a stopped one is named with the time it stopped, not the time it
started.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.gate.tls import EndpointTls

NEVER = "0001-01-01T00:00:00Z"
"""Docker's time for an event that never happened (``FinishedAt`` of a container never stopped)."""


@dataclass(frozen=True)
class Reply:
    """What the API said to one request: its HTTP status (None: no answer at all) and body or error."""

    status: int | None
    text: str


@dataclass(frozen=True)
class Verdict:
    answers: bool
    line: str


def ask(endpoint: str, key: str, tls: EndpointTls | None, timeout: float = 5.0) -> Reply:
    """``GET <endpoint>/models`` with ``key``, as a client sends it."""
    import httpx

    url = f"{endpoint.rstrip('/')}/models"
    try:
        with httpx.Client(trust_env=False, verify=tls.verify() if tls else True, timeout=timeout) as client:
            got = client.get(
                url,
                headers={"Authorization": f"Bearer {key}"},
                extensions=tls.extensions(url, endpoint) if tls else {},
            )
    except httpx.HTTPError as err:
        return Reply(None, f"{type(err).__name__}: {err}" if str(err) else type(err).__name__)
    return Reply(got.status_code, got.text)


def state_line(state: Mapping[str, Any] | None) -> str:
    """A container's state with the time of its own last event (``docker inspect``'s ``State``).

    >>> state_line({"Status": "exited", "ExitCode": 0, "StartedAt": "T1", "FinishedAt": "T2"})
    'exited at T2 (exit code 0)'
    >>> state_line({"Status": "running", "StartedAt": "T1", "FinishedAt": NEVER, "Health": {"Status": "healthy"}})
    'running since T1, health healthy'
    """
    if not state:
        return "not found"
    status = state.get("Status", "?")
    if status == "running":
        health = (state.get("Health") or {}).get("Status", "no health check")
        return f"running since {state.get('StartedAt', '?')}, health {health}"
    if status == "created":
        return "created, never started"
    if status in ("exited", "dead"):
        oom = ", killed: out of memory" if state.get("OOMKilled") else ""
        error = f", {state['Error']}" if state.get("Error") else ""
        return (
            f"{status} at {state.get('FinishedAt', '?')} (exit code {state.get('ExitCode', '?')}{oom}{error})"
        )
    if status == "restarting":
        return (
            f"restarting (last exit {state.get('FinishedAt', '?')}, exit code {state.get('ExitCode', '?')})"
        )
    return f"{status} since {state.get('StartedAt', '?')}"


def _running(state: Mapping[str, Any] | None) -> bool:
    return bool(state and state.get("Running") and not state.get("Restarting"))


def _error(text: str) -> tuple[str | None, str]:
    """An OpenAI-style error body's code and message; (None, the text) for anything else."""
    try:
        error = json.loads(text).get("error") or {}
    except (ValueError, AttributeError):
        return None, text.strip()[:200]
    return error.get("code"), str(error.get("message", ""))


def container_down(
    serving: Mapping[str, Any] | None,
    front: Mapping[str, Any] | None,
    names: tuple[str, str],
    stack: str,
    docker_cli: str,
) -> str | None:
    """Which of the front and the serving container is not running, since when, and the fix; None
    when both run. (``status`` leads with it; ``smoke`` says it instead of waiting for an engine
    that is not there.)"""
    serving_name, front_name = names
    if not _running(front):
        fix = f"`{docker_cli} start {front_name}`" if front else f"`make up STACK={stack}`"
        return f"the front {front_name} is {state_line(front)}, so nothing answers. Fix: {fix}."
    if not _running(serving):
        again = f", or `{docker_cli} start {serving_name}` as it was" if serving else ""
        return (
            f"the serving container {serving_name} is {state_line(serving)}, so every request fails. "
            f"Fix: `make restart STACK={stack}` (re-creates it; its gate runs){again}."
        )
    return None


def verdict(
    reply: Reply,
    serving: Mapping[str, Any] | None,
    front: Mapping[str, Any] | None,
    names: tuple[str, str],
    stack: str,
    docker_cli: str,
) -> Verdict:
    """The API's state in one line, the cause before the detail and the fix last.

    ``names`` are the serving container's and the front's; ``docker_cli`` the docker command for
    the stack's host (``docker -H …``) a fix on a container is pasted with."""
    if reply.status == 200:
        return Verdict(True, "answers (GET /v1/models through the front: 200)")
    down = container_down(serving, front, names, stack, docker_cli)
    if down is not None:
        return Verdict(False, f"DOWN: {down}")
    code, message = _error(reply.text)
    if reply.status == 503 and code == "no_replica_in_rotation":
        fix = (
            f"`make rollback STACK={stack}` (back to the version that last passed its gate)"
            if "gate" in message
            else f"`make logs STACK={stack}` (why the replica is out)"
        )
        return Verdict(
            False, f"DOWN: every request gets 503 no_replica_in_rotation: {message.rstrip('.')}. Fix: {fix}."
        )
    health = ((serving or {}).get("Health") or {}).get("Status")
    if reply.status in (502, 503, 504) and health == "starting":
        return Verdict(
            False,
            f"not yet: vLLM is starting (since {serving.get('StartedAt', '?') if serving else '?'}), "
            f"the front answers {reply.status} until it serves. Progress: `make logs STACK={stack}`.",
        )
    if reply.status is None:
        return Verdict(
            False, f"DOWN: no answer at the endpoint ({reply.text}). Look: `make logs STACK={stack}`."
        )
    if reply.status == 401:
        return Verdict(
            False,
            f"the front refuses the stack's API key (401: {message}); its keys come from the last `up`. "
            f"Fix: `make up STACK={stack}`.",
        )
    return Verdict(False, f"DOWN: {reply.status} {code or ''}: {message}. Look: `make logs STACK={stack}`.")
