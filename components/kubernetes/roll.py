"""RollWatch: ``pulumi up`` waits for the serving pods' roll, and stops the moment a new pod failed.

pulumi-kubernetes would wait for a Deployment until its rollout timeout, whatever its new pod says:
a vLLM that refused a flag in its first second, or a preflight that found no free card, made ``up``
wait the whole deadline (the gate's per replica, minutes) and then say only that the Deployment
did not become ready. So the serving Deployment is applied without that wait
(``pulumi.com/skipAwait``), and this resource's create and update do it instead: every
``POLL_SECONDS`` they read the Deployment and its pods with ``kubectl`` (the user's kubeconfig and
context; it handles every way a kubeconfig authenticates) and decide with
components/kubernetes/pod_status.py. A failed pod fails ``up`` within seconds, naming the pod, the
container and its own last lines; a pod that has not started, its events too (a volume, the
scheduler, an image, the sandbox: components/kubernetes/pod_events.py), naming the config key
behind them. A roll that only stalls fails at the same deadline as before.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic

POLL_SECONDS = 2.0
KUBECTL_TIMEOUT_SECONDS = 30
SETTLE_SECONDS = 6.0
"""How long a failure that must last (a pod no node takes) stands before it fails ``up``."""
WATCHED = (
    "context",
    "deadline_seconds",
    "deployment",
    "generation",
    "keys",
    "kubeconfig",
    "namespace",
    "selector",
    "template",
    "version",
)
"""The inputs that make a new roll to watch (``template``: the pod template's digest; ``generation``:
the Deployment's, so that a change back to the template of a roll that failed is watched too)."""
VERSION = hashlib.sha256(
    b"".join(Path(__file__).with_name(f).read_bytes() for f in ("roll.py", "pod_status.py", "pod_events.py"))
).hexdigest()[:12]


def kubectl_argv(props: dict[str, Any], *args: str) -> list[str]:
    """``kubectl`` in the stack's namespace, with its kubeconfig and context when set."""
    argv = ["kubectl"]
    if props.get("kubeconfig"):
        argv += ["--kubeconfig", str(props["kubeconfig"])]
    if props.get("context"):
        argv += ["--context", str(props["context"])]
    return [*argv, "--namespace", str(props["namespace"]), *args]


def say(line: str) -> None:
    """Progress for the operator (a dynamic provider's ``pulumi.log`` only writes to stderr anyway)."""
    import sys

    print(f"[roll] {line}", file=sys.stderr, flush=True)


def watch_roll(props: dict[str, Any]) -> dict[str, Any]:
    """Poll until the roll is done (returns the outputs), has failed or ran past its deadline
    (raises an :class:`OperatorError` that says why)."""
    import json
    import subprocess
    import time

    from components.kubernetes.pod_status import FAILED, READY, pending, roll_verdict
    from components.provider_errors import OperatorError, report_plainly

    report_plainly()
    started = time.monotonic()
    deadline = started + float(props["deadline_seconds"])
    said, problem = "", ""
    lasting: dict[str, float] = {}
    """A failure that must last (``Verdict.settles``) → when it was first seen."""

    def get(*what: str) -> Any:
        argv = kubectl_argv(props, "get", *what, "--output", "json")
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_SECONDS, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()[-400:]}")
        return json.loads(done.stdout)

    while True:
        try:
            deployment = get("deployment", str(props["deployment"]))
            pods = get("pods", "--selector", str(props["selector"]))["items"]
            # Only while a pod has not started: what stops it before its containers is in its events.
            events = (
                get("events", "--field-selector", "involvedObject.kind=Pod")["items"] if pending(pods) else []
            )
        except FileNotFoundError:
            raise OperatorError(
                "the serving pods' roll is watched with kubectl, which is not on PATH. Fix: install kubectl "
                "(the one-node cluster's: export PATH=$(scripts/k8s/build.sh --check):$PATH)"
            ) from None
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as err:
            # The API server restarting, a network blip: tried again until the deadline, said once.
            problem = str(err)
            if problem != said:
                say(f"kubectl failed, trying again: {problem}")
                said = problem
        else:
            verdict = roll_verdict(
                deployment, pods, str(props["template"]), events, dict(props.get("keys") or {})
            )
            first_seen = lasting.setdefault(verdict.detail, time.monotonic()) if verdict.settles else None
            if first_seen is not None and time.monotonic() - first_seen < SETTLE_SECONDS:
                problem = verdict.detail  # not yet: the scheduler may place it in a moment
            elif verdict.state == FAILED:
                raise OperatorError(
                    f"the serving pods' roll failed after {time.monotonic() - started:.0f} s: {verdict.detail}\n"
                    "The pods of the previous template keep serving (maxUnavailable 1: one fewer while this "
                    "lasts). Fix the cause and run `pulumi up` again, or go back to the last config that passed."
                )
            if verdict.state == READY:
                say(f"{verdict.detail} in {time.monotonic() - started:.0f} s")
                return {k: props.get(k) for k in WATCHED}
            if verdict.detail != said:
                say(verdict.detail)
                said = verdict.detail
            problem = verdict.detail
        if time.monotonic() > deadline:
            raise OperatorError(
                f"the serving pods' roll did not finish in {float(props['deadline_seconds']):.0f} s "
                f"(the gate's deadline per replica, plus a margin): {problem}"
            )
        time.sleep(POLL_SECONDS)


class RollWatchProvider(pulumi.dynamic.ResourceProvider):
    """Waits for the roll on create and on an update that brings a new one. Pickled with dill:
    imports live inside the methods."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures = [
            pulumi.dynamic.CheckFailure(k, f"{k} must be set")
            for k in ("namespace", "deployment", "selector")
            if not news.get(k)
        ]
        if float(news.get("deadline_seconds") or 0) <= 0:
            failures.append(
                pulumi.dynamic.CheckFailure("deadline_seconds", "a roll needs a positive deadline")
            )
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        from components.gate.run import plain

        changed = [k for k in WATCHED if plain(olds.get(k)) != plain(news.get(k))]
        return pulumi.dynamic.DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        outs = watch_roll(props)
        return pulumi.dynamic.CreateResult(f"roll-{props['namespace']}-{props['deployment']}", outs)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult(watch_roll(news))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Nothing to undo: the watch leaves nothing on the cluster."""


@dataclass(frozen=True)
class RollWatchArgs:
    """Which roll to watch, how to reach the cluster, and for how long."""

    kubeconfig: str | None
    """``glm:target.kubernetes.kubeconfig`` (expanded); None: kubectl's own default."""
    context: str | None
    namespace: str
    deployment: str
    """The serving Deployment's name in the cluster."""
    selector: str
    """Its pods' label selector (``key=value,...``)."""
    template: pulumi.Input[str]
    """The digest of the pod template rolled out (``TEMPLATE_ANNOTATION``): a new one, a new watch."""
    generation: pulumi.Input[int | None]
    """The Deployment's ``metadata.generation`` after this ``up`` applied it. The template alone
    missed a roll back: after a failed roll (the watch's state keeps the good digest), going back to
    the good config changed the Deployment but not the watch, and ``up`` ended before the pods had."""
    deadline_seconds: int
    """How long a roll may take before it fails (the old rollout timeout)."""
    keys: dict[str, str]
    """``volume:<name>``, ``container:<name>``, ``claim:<name>``, ``cards`` → the config key behind
    it and its fix (``pod_events.config_keys``): what a failure read from the pods' events names."""


class RollWatch(pulumi.dynamic.Resource):
    """Blocks ``up`` until the serving pods of ``template`` are rolled out; fails it as soon as one
    of them failed, with the failing container's own message."""

    def __init__(self, name: str, args: RollWatchArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        props = {**{k: getattr(args, k) for k in WATCHED if k != "version"}, "version": VERSION}
        super().__init__(RollWatchProvider(), name, props, opts)
