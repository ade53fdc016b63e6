"""ReplicaGate: the smoke gate against one replica directly; it alone puts the replica in rotation.

Each replica passes the gate's steps (readiness, models, arithmetic, tool call, KV pool, streaming;
not ``front_auth``: vLLM has no key behind the front) on its own vLLM, reached from the machine
running Pulumi through an SSH tunnel to the host (``ssh -L`` to vLLM's fixed address on the host's
private Docker network), so the gate needs no route to the private network. Then:

- passed: the replica is admitted to the front's rotation (components/docker/rotation.py);
- failed: it stays out, the front's 503 names the failure while no other replica serves, and
  ``pulumi up`` stops with one message naming the host, the step, what came back and what to do.
  The roll goes no further: the next host's container waits for this gate.

Removing the host from the stack deletes this resource: the replica leaves the rotation (drained)
before its container goes.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic

from components.config import HostConfig
from components.verification.smoke_gate import (
    VERSION,
    GateArgs,
    GateComponent,
    SmokeTestProvider,
    changed_inputs,
    gate_outputs,
    gate_params,
    say_why_it_reruns,
)

REPLICA_INPUTS = ("address", "front", "front_container_id", "grace_seconds", "host", "tunnel")
"""Besides the gate's own inputs: a new front container (its rotation is new) re-admits."""
TUNNEL_READY_SECONDS = 60.0
_SOURCES = [
    Path(__file__),
    Path(__file__).with_name("rotation.py"),
    Path(__file__).parents[1] / "host" / "templates" / "rotation.sh",
]
REPLICA_VERSION = f"{VERSION}+{hashlib.sha256(b''.join(p.read_bytes() for p in _SOURCES)).hexdigest()[:12]}"
"""A change of the gate package, of this file or of the rotation re-runs every replica's gate."""


@contextlib.contextmanager
def ssh_tunnel(spec: dict[str, Any] | None) -> Iterator[str | None]:
    """``http://127.0.0.1:PORT`` forwarded to ``spec["target"]`` through ``ssh``; None without a spec."""
    import socket
    import subprocess
    import time

    if not spec:
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [
        *spec["ssh"], "-N", "-o", "ExitOnForwardFailure=yes",
        "-L", f"127.0.0.1:{port}:{spec['target']}", spec["destination"],
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + TUNNEL_READY_SECONDS
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
                raise RuntimeError(f"ssh tunnel to {spec['destination']} for {spec['target']} failed: {err}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ssh tunnel to {spec['destination']} did not open") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def run_replica_gate(props: dict[str, Any]) -> dict[str, Any]:
    """The gate against the replica (through its tunnel), then the replica's place in the rotation:
    admitted when it passed, kept out with the failure when it did not."""
    from components.docker import rotation
    from components.gate.checks import GateFailure, plain, run_gate, stderr_progress
    from components.provider_errors import OperatorError, report_plainly

    report_plainly()
    params = plain(dict(props))
    host = params["host"]
    with ssh_tunnel(params.get("tunnel")) as local:
        if local is not None:
            params["endpoint"], params["metrics_url"] = f"{local}/v1", f"{local}/metrics"
        try:
            results = run_gate(params, str(props["api_key"]), lambda line: stderr_progress(f"{host}: {line}"))
        except GateFailure as err:
            failure = f"the replica on host {host!r} failed its gate at step {err.step!r}: {err.message}"
            one_box = bool(params.get("one_box"))
            kept = _rotation_note(lambda: rotation.keep_out(params["front"], host, failure), one_box)
            stopped = "" if one_box else "The roll stopped here; no other host was touched. "
            raise OperatorError(
                f"{failure}\n{kept}\n{stopped}To go back to the last version that passed: "
                f"make rollback STACK={params.get('stack') or '<stack>'}."
            ) from None
    try:
        stderr_progress(f"{host}: passed; {rotation.admit(params['front'], host, params['address'])}")
    except rotation.RotationError as err:
        raise OperatorError(
            f"the replica on host {host!r} passed its gate but could not be admitted: {err}"
        ) from None
    return {**results, "host": host}


def _rotation_note(change: Any, one_box: bool) -> str:
    """What clients get now. On one box the failed replica was the only one: no replica is in
    rotation, and the front answers every API request 503 until a version that passes is back.

    >>> _rotation_note(lambda: None, one_box=True)[:70]
    "It is out of the front's rotation, and it was the stack's only replica"
    """
    from components.docker.rotation import RotationError

    try:
        change()
    except RotationError as err:
        return f"It could not be marked out of the front's rotation ({err}); it was drained before its replacement."
    if one_box:
        return (
            "It is out of the front's rotation, and it was the stack's only replica: the API answers 503 "
            "(no_replica_in_rotation, naming this failure) until a version that passes is back."
        )
    return "It is out of the front's rotation: clients are served by the other hosts' replicas, which passed."


class ReplicaGateProvider(SmokeTestProvider):
    """The smoke gate's provider, against one replica. Pickled with dill: imports in the methods."""

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        from components.gate.checks import plain

        changed = changed_inputs(olds, news) + [
            k for k in REPLICA_INPUTS if plain(olds.get(k)) != plain(news.get(k))
        ]
        say_why_it_reruns(f"the replica gate on {news.get('host')}", changed, news)
        return pulumi.dynamic.DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        results = run_replica_gate(props)
        ident = "replica-" + hashlib.sha256(f"{props['host']}|{props['endpoint']}".encode()).hexdigest()[:12]
        return pulumi.dynamic.CreateResult(ident, self._outputs(props, results))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult(self._outputs(news, run_replica_gate(news)))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        """The host left the stack: out of the front's rotation, drained, before its container goes."""
        from components.docker import rotation
        from components.gate.checks import plain, stderr_progress

        olds = plain(props)
        if olds.get("front"):
            stderr_progress(
                f"{olds['host']}: {rotation.forget(olds['front'], olds['host'], int(olds['grace_seconds']))}"
            )

    @staticmethod
    def _outputs(props: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
        from components.gate.checks import plain

        return {**gate_outputs(props, results), **{k: plain(props.get(k)) for k in REPLICA_INPUTS}}


def tunnel_spec(host: HostConfig, target: str) -> dict[str, Any] | None:
    """How the gate reaches ``target`` (an address on the host's private Docker network): none for
    the local engine (this machine routes to its bridges), else ``ssh -L`` with the provider's
    identity and host key."""
    if host.is_local:
        return None
    return {
        "ssh": ["ssh", *host.ssh_options, "-p", str(host.ssh_port)],
        "destination": host.ssh_address,
        "target": target,
    }


@dataclass(frozen=True)
class Admission:
    """Where a replica that passed its gate is admitted: the front (components/docker/rotation.py)."""

    front: pulumi.Input[dict[str, Any]]
    """``rotation.front_access``: the front container's Docker host, ssh options and name."""
    front_container_id: pulumi.Input[str]
    address: str
    """host:port the front proxies to for this replica."""
    grace_seconds: int
    """How long a removed replica's requests in flight may run (``glm:container.stopGraceSeconds``)."""
    stack: str
    """The stack's name, for the way back a failure prints (``make rollback STACK=…``)."""
    one_box: bool
    """The stack's only replica: while it is out, no replica is in rotation and the API answers 503."""


@dataclass(frozen=True, kw_only=True)
class ReplicaGateArgs(GateArgs):
    """The gate against one replica's own vLLM, and where the replica goes once it passed."""

    host: HostConfig
    """The replica's host: the gate reaches vLLM through an SSH tunnel to it and follows its log."""
    container_id: pulumi.Input[str]
    """The replica's serving container: a new one is gated, and admitted, again."""
    admission: Admission
    """The front whose rotation admits the replica."""


class ReplicaGate(GateComponent):
    """Blocks ``pulumi up`` until this host's replica answers the gate's steps directly, then admits
    it to the front's rotation."""

    results: pulumi.Output[dict[str, Any]]
    """The gate's results for this replica, plus ``host``."""

    def __init__(self, name: str, args: ReplicaGateArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("glm:smoke:ReplicaGate", name, None, opts)
        serving, host, admission = args.serving, args.host, args.admission
        target = f"{serving.container.vllm_address}:{serving.port}"
        params = gate_params(
            serving, args.smoke, f"http://{target}/v1", args.image_ref, f"http://{target}/metrics",
            args.container_id, host=host,
        )  # fmt: skip
        steps = [s for s in params["smoke"]["steps"] if s != "front_auth"]
        props = {
            **params,
            "smoke": {**params["smoke"], "steps": steps},
            "version": REPLICA_VERSION,
            "host": host.name,
            "tunnel": tunnel_spec(host, target),
            "front": admission.front,
            "front_container_id": admission.front_container_id,
            "address": admission.address,
            "grace_seconds": admission.grace_seconds,
            # Read by a failure's message only: not compared by diff, a rename re-gates nothing.
            "stack": admission.stack,
            "one_box": admission.one_box,
        }
        self._gate(name, ReplicaGateProvider(), props, args.api_key)
