"""SmokeTest: the Pulumi resource around the gate's runtime (``components/gate/``).

``pulumi up`` reports success only after this resource's create/update has passed.
:class:`SmokeTestProvider` is the private dynamic provider that runs :func:`run_gate`, and
:class:`SmokeTest` is the component the program builds; :class:`GateArgs`, :func:`gate_params` and
:class:`GateComponent` are the wiring it shares with ``ReplicaGate`` (components/docker/replica_gate.py).
docs/smoke-gate.md is the operator's view.

Secrets: the API key is a secret *input* (Pulumi stores it encrypted with the inputs). The outputs
never carry it; they carry only a salted SHA-256 fingerprint under the same property name
``api_key``, so a key rotation re-runs the gate, and the engine encrypts that output as well
(a dynamic provider does not accept secrets; the engine marks an output secret when the input of
the same name was secret).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pulumi
import pulumi.dynamic

from components.config import HostConfig
from components.gate.checks import REQUEST_TIMEOUT_SECONDS, plain, run_gate, stderr_progress
from components.gate.container import watch_params
from components.gate.messages import LookAt
from components.gate.settings import SmokeConfig
from components.gate.tls import EndpointTls
from components.profiles import PROFILES
from components.serving.spec import ServingSpec

PROVIDER_VERSION = "1"
"""Bump by hand for a behaviour change that must re-run every stack's gate."""
GATE_PACKAGE = Path(__file__).resolve().parents[1] / "gate"


def package_hash(package: Path = GATE_PACKAGE, *modules: Path) -> str:
    """Hash of every file of the gate package, then of ``modules``: Python files by syntax tree
    (a comment or format change does not re-run the gate), any other file by its bytes."""
    files = sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    named = [(p.relative_to(package).as_posix(), p) for p in files] + [(m.name, m) for m in modules]
    digest = hashlib.sha256()
    for name, path in named:
        content = path.read_bytes()
        digest.update(name.encode() + b"\0")
        digest.update(ast.dump(ast.parse(content)).encode() if path.suffix == ".py" else content)
        digest.update(b"\0")
    return digest.hexdigest()[:12]


SOURCE_HASH = package_hash(GATE_PACKAGE, Path(__file__))
"""A code change anywhere in components/gate, or in this provider, re-runs the gate."""
VERSION = f"{PROVIDER_VERSION}+{SOURCE_HASH}"

# Not a secret, a domain separator: keeps the fingerprint from matching a plain sha256 of the key.
_FINGERPRINT_SALT = b"glm53-smoke-gate/api-key/v1\0"

# Inputs that decide what the gate verifies: a change to any of them re-runs it. The key is compared
# by fingerprint (see the module docstring); ``__provider`` is left out (``version`` stands for code).
GATE_INPUTS = (
    "container_id",
    "container_name",
    "endpoint",
    "env",
    "flags",
    "front_fingerprint",
    "image_ref",
    "max_model_len",
    "metrics_url",
    "model_path",
    "served_name",
    "smoke",
    "tls",
    "version",
)


def key_fingerprint(api_key: str) -> str:
    """16 hex digits of a salted SHA-256: tells a rotated key apart, reveals nothing of a random key."""
    return hashlib.sha256(_FINGERPRINT_SALT + api_key.encode()).hexdigest()[:16]


def changed_inputs(olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[str]:
    """Gate inputs that differ between the stored outputs and the new inputs (unknowns differ)."""
    changed = [k for k in GATE_INPUTS if plain(olds.get(k)) != plain(news.get(k))]
    for secret in ("api_key", "metrics_key"):
        new_key = news.get(secret)
        if new_key is None and olds.get(secret) is None:
            continue
        if not isinstance(new_key, str) or olds.get(secret) != key_fingerprint(new_key):
            changed.append(secret)
    return changed


def say_why_it_reruns(gate: str, changed: list[str], news: Mapping[str, Any]) -> None:
    """One line in the preview (and the up) for a gate that re-runs: which of its inputs changed.
    The preview's diff hides the gate's inputs (``hide_diffs``): they restate the serving
    container's argv and env, shown once on the container, and ``glm:smoke``.

    Said only when a known value changed: the engine also asks the diff of a delete-before-replace
    container's dependents with the old inputs and the container's id unknown, and a container
    replaced with nothing else changed is the container's own diff line.

    >>> say_why_it_reruns("the gate through the front", ["container_id", "flags"], {"flags": {}})
    >>> # on stderr: [smoke-gate] the gate through the front re-runs: container_id, flags changed
    """
    from pulumi.runtime import rpc

    if any(not rpc.contains_unknowns(news.get(k)) and news.get(k) != rpc.UNKNOWN for k in changed):
        stderr_progress(f"{gate} re-runs: {', '.join(changed)} changed")


def gate_outputs(news: Mapping[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """Full outputs: every input (so the next diff can compare) with the key replaced by its
    fingerprint, plus the results. The default ``update`` would return nothing and wipe state."""
    outs = {k: plain(news.get(k)) for k in GATE_INPUTS if news.get(k) is not None}
    outs["api_key"] = key_fingerprint(str(news["api_key"]))
    if news.get("metrics_key") is not None:
        outs["metrics_key"] = key_fingerprint(str(news["metrics_key"]))
    outs["results"] = results
    return outs


class SmokeTestProvider(pulumi.dynamic.ResourceProvider):
    """Runs the gate on create and update. Pickled with dill: imports live inside the methods."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        from pulumi.runtime import rpc

        failures = []

        def known(value: Any) -> bool:
            return value is not None and value != rpc.UNKNOWN

        endpoint = news.get("endpoint")
        if known(endpoint) and urlsplit(str(endpoint)).scheme not in ("http", "https"):
            failures.append(pulumi.dynamic.CheckFailure("endpoint", f"not an http(s) URL: {endpoint!r}"))
        metrics_url = news.get("metrics_url")
        if known(metrics_url) and urlsplit(str(metrics_url)).scheme not in ("http", "https"):
            failures.append(
                pulumi.dynamic.CheckFailure("metrics_url", f"not an http(s) URL: {metrics_url!r}")
            )
        if news.get("api_key") is None:
            failures.append(pulumi.dynamic.CheckFailure("api_key", "the gate needs an API key (glm:apiKeys)"))
        # ``smoke`` is not checked again: gate_params renders it from a SmokeConfig, which refused
        # unknown steps and a pollSeconds outside (0, 1] with the key and the fix already.
        inputs = {k: (v if v == rpc.UNKNOWN else plain(v)) for k, v in news.items()}
        return pulumi.dynamic.CheckResult(inputs, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        changed = changed_inputs(olds, news)
        say_why_it_reruns("the gate through the front", changed, news)
        # replaces stays empty: a changed input means "update", and update re-runs the gate.
        return pulumi.dynamic.DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        import httpx  # noqa: F401  (fail here, in the provider, if the runtime lacks it)

        results = run_gate(props, str(props["api_key"]), stderr_progress, _metrics_key(props))
        ident = (
            "smoke-" + hashlib.sha256(f"{props['endpoint']}|{props['served_name']}".encode()).hexdigest()[:12]
        )
        return pulumi.dynamic.CreateResult(ident, gate_outputs(props, results))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        import httpx  # noqa: F401

        results = run_gate(news, str(news["api_key"]), stderr_progress, _metrics_key(news))
        return pulumi.dynamic.UpdateResult(gate_outputs(news, results))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Nothing to remove: the gate leaves no trace on the host."""


def _metrics_key(props: Mapping[str, Any]) -> str | None:
    key = props.get("metrics_key")
    return str(key) if key else None


@dataclass(frozen=True, kw_only=True)
class GateArgs:
    """What every gate takes: the serving container it checks, how, with which key."""

    serving: ServingSpec
    """What ``VllmServer`` runs (the gate's messages quote its flags)."""
    smoke: SmokeConfig
    """``glm:smoke``: the steps, the prompts, the deadline."""
    api_key: pulumi.Output[str]
    """The key the gate asks with; made secret whatever the caller passed."""
    image_ref: pulumi.Input[str]
    """The serving image: a new one re-runs the gate."""
    container_id: pulumi.Input[str] | None = None
    """The serving container: one replaced for any reason (mounts, devices, shm) re-runs the gate."""
    host: HostConfig | None = None
    """Where the serving container runs: the gate follows its log while it waits."""


@dataclass(frozen=True, kw_only=True)
class SmokeTestArgs(GateArgs):
    """The gate through the front door, as clients reach the model."""

    front_url: pulumi.Input[str]
    """The front's OpenAI base URL, ending in ``/v1``."""
    metrics_url: pulumi.Input[str] | None = None
    """Where ``kv_pool`` reads vLLM's metrics (the front's route); without it the step is skipped."""
    metrics_key: pulumi.Output[str] | None = None
    """The bearer token of ``metrics_url`` (the front's route); secret."""
    front_fingerprint: pulumi.Input[str] | None = None
    """The front's config, image and key names (``NginxFront.fingerprint``): a change re-runs the gate."""
    tls: EndpointTls | None = None
    """The name the front's certificate carries and what to trust (components/front_tls.py)."""
    look_at: LookAt | None = None
    """What the gate's failures name to see the serving container: the target's own commands
    (kubectl's on Kubernetes); unset, Docker's for the serving container."""


def gate_params(
    serving: ServingSpec,
    smoke: SmokeConfig,
    endpoint: pulumi.Input[str],
    image_ref: pulumi.Input[str],
    metrics_url: pulumi.Input[str] | None = None,
    container_id: pulumi.Input[str] | None = None,
    front_fingerprint: pulumi.Input[str] | None = None,
    host: HostConfig | None = None,
    tls: EndpointTls | None = None,
    look_at: LookAt | None = None,
) -> dict[str, Any]:
    """The gate's inputs except the key: deterministic (sorted, no timestamps or random values),
    so a ``pulumi preview`` after ``pulumi up`` shows no change. With ``host`` (where the serving
    container runs), the gate follows the container's log while it waits and fails as soon as the
    container stops (``container_watch``: not a gate input, a new host key does not re-run it).
    ``tls``: the endpoint's certificate name and trust, when its address is not that name.
    ``look_at``: the commands the failures name, when the target is not a Docker host (not a gate
    input either: new commands do not re-run it)."""
    settings = {**smoke.model_dump(mode="json"), "request_timeout_seconds": REQUEST_TIMEOUT_SECONDS}
    params: dict[str, Any] = {
        "container_name": serving.container.name,
        "endpoint": endpoint,
        "env": serving.env,
        "flags": serving.shown_flags,
        "image_ref": image_ref,
        "max_model_len": serving.max_model_len,
        "model_path": serving.model_path,
        "served_name": serving.served_name,
        "smoke": plain(settings),
        "version": VERSION,
    }
    if metrics_url is not None:
        params["metrics_url"] = metrics_url
    if container_id is not None:
        # A container replaced for any reason (mounts, devices, shm: not gate inputs) re-runs the gate.
        params["container_id"] = container_id
    if host is not None:
        profile = PROFILES.get(serving.hardware)
        ssh = host.ssh_options if host.docker_host.startswith("ssh://") else []
        facts = profile.facts if profile else None
        params["container_watch"] = watch_params(serving.container.name, host.docker_host, ssh, facts)
    if tls is not None:
        params["tls"] = tls.params()
    if look_at is not None:
        params["look_at"] = look_at.params()
    if front_fingerprint is not None:
        # Anything between a client and the model changed (nginx.conf, image, key names, TLS): re-run.
        params["front_fingerprint"] = front_fingerprint
    return params


class GateResource(pulumi.dynamic.Resource):
    """The dynamic child that runs a gate (``pulumi-python:dynamic:Resource``, whichever provider)."""

    results: pulumi.Output[dict[str, Any]]

    def __init__(
        self,
        provider: pulumi.dynamic.ResourceProvider,
        name: str,
        props: dict[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(provider, name, {**props, "results": None}, opts)


class GateComponent(pulumi.ComponentResource):
    """A component that blocks ``pulumi up`` on one gate child, ``<name>-gate``."""

    results: pulumi.Output[dict[str, Any]]
    gate: GateResource

    def _gate(
        self,
        name: str,
        provider: pulumi.dynamic.ResourceProvider,
        params: dict[str, Any],
        api_key: pulumi.Output[str],
    ) -> None:
        """The child with the key as a secret input, and its results as this component's output."""
        # Secret whatever the caller passed: Pulumi then stores this input encrypted.
        secret_key: pulumi.Output[str] = pulumi.Output.secret(api_key)
        props = {**params, "api_key": secret_key}
        # A preview prints none of the gate's inputs (~30 lines each): they restate the serving
        # container's argv and env, which its own diff shows, and glm:smoke. The provider's diff
        # says in one line which changed (say_why_it_reruns). Display only (hide_diffs): what is
        # compared and when the gate re-runs are unchanged.
        hidden = pulumi.ResourceOptions(parent=self, hide_diffs=["*"])
        self.gate = GateResource(provider, f"{name}-gate", props, opts=hidden)
        # The results carry no secret; unsecret keeps them readable as stack outputs even though
        # the resource also holds a secret input.
        self.results = pulumi.Output.unsecret(self.gate.results)
        self.register_outputs({"results": self.results})


class SmokeTest(GateComponent):
    """Blocks ``pulumi up`` until the model answers 13x17 and calls a tool through the front."""

    results: pulumi.Output[dict[str, Any]]
    """Latencies per step (ms), KV pool tokens, vLLM version, served name, seconds to pass, steps
    run and skipped. Nothing secret."""

    def __init__(self, name: str, args: SmokeTestArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("glm:smoke:SmokeTest", name, None, opts)
        params = gate_params(
            args.serving, args.smoke, args.front_url, args.image_ref, args.metrics_url, args.container_id,
            args.front_fingerprint, args.host, args.tls, args.look_at,
        )  # fmt: skip
        if args.metrics_key is not None:
            params["metrics_key"] = pulumi.Output.secret(args.metrics_key)
        self._gate(name, SmokeTestProvider(), params, args.api_key)
