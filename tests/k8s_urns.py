"""What the Kubernetes stack registers, by URN, and which URNs each resource answers to.

A URN is a resource's identity in the state: an object whose URN changes without an alias that
names the old one is deleted and created again by the next ``pulumi up``. The program is run under
mocks (``tests/conftest.py``) while the mock monitor's ``RegisterResource`` is recorded: the URN
it made, the parent, and the aliases the SDK sent (alias specs: the mock monitor supports them, as
the engine does).

``answers_to`` does what the engine does with those specs (the engine resolves them since
pulumi/pulumi#9734; children's inherited aliases fixed in #12848): a spec's empty fields are the
resource's own; ``noParent`` means the stack's root; and a child also answers to its own name and
type under every URN its parent answers to.

``KINDS`` are the stack variants the tests run, and ``tests/fixtures/k8s-urns-before-components.json``
holds the URNs main registered for them at 3a8e588, before the target became components
(``python -m tests.k8s_urns OUT`` run in a checkout of that commit, this file copied in).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi.runtime.mocks import MockMonitor

from tests.conftest import Deployment, run_program, stack_config
from tests.tls_certs import TestCa

ROOT_TYPE = "pulumi:pulumi:Stack"
BEFORE_COMPONENTS = Path(__file__).parent / "fixtures" / "k8s-urns-before-components.json"
LOCAL_DOCKER = {"name": "localhost", "dockerHost": "unix:///var/run/docker.sock"}


@dataclass(frozen=True)
class Registration:
    urn: str
    parent: str
    type: str
    name: str
    aliases: tuple[dict[str, Any], ...]
    """Alias specs as sent: ``name``, ``type``, ``parentUrn``, ``noParent`` (empty: the resource's own)."""


def _target(**extra: Any) -> dict[str, Any]:
    kubernetes = {"namespace": "glm53-test", "frontUrl": "http://127.0.0.1:30080/v1", "replicas": 2, **extra}
    return {"hosts": [LOCAL_DOCKER], "kubernetes": kubernetes}


def _local(section: str, **keys: Any) -> dict[str, Any]:
    return {f"glm:{section}": {**(stack_config("local").get(f"glm:{section}") or {}), **keys}}


def _with_tls(overrides: dict[str, Any]) -> Deployment:
    """The local stack with ``overrides`` and a TLS front, its certificate from a test CA."""
    with tempfile.TemporaryDirectory() as folder:
        ca = TestCa.create(Path(folder), "GLM URN test CA")
        cert, key = ca.issue(["DNS:api.glm.test", "IP:127.0.0.1"])
        front = _local("front", tls=True, tlsCaCertificate=ca.certificate)
        return run_program("local", {**overrides, **front}, {"glm:tlsCertificate": cert, "glm:tlsKey": key})


KINDS: dict[str, Callable[[], Deployment]] = {
    # A NodePort front, a hostPath cache volume, Prometheus in the namespace, the semantic probe.
    "local-node-port": lambda: run_program(
        "local",
        {
            "glm:target": _target(frontNodePort=30080, cacheHostPath="/srv/jit"),
            **_local("front", allowPlainHttp=True),
        },
    ),
    # TLS end to end (the replica certificate) and the Prometheus Operator's objects.
    "local-tls-operator": lambda: _with_tls(
        {"glm:target": _target(frontUrl="https://127.0.0.1:30443/v1", prometheusOperator=True)}
    ),
    # A hardware profile: cards requested, the serving image built from the patch layer.
    "a800": lambda: run_program("a800", {"glm:target": _target()}),
}


@contextmanager
def recorded() -> Iterator[list[Registration]]:
    """Every resource the program registers while in the block (the stack itself left out)."""
    seen: list[Registration] = []
    original = MockMonitor.RegisterResource

    def register(self: MockMonitor, request: Any) -> Any:
        response = original(self, request)
        if request.type != ROOT_TYPE:
            specs = tuple(
                {
                    "name": a.spec.name,
                    "type": a.spec.type,
                    "parentUrn": a.spec.parentUrn,
                    "noParent": a.spec.noParent,
                }
                for a in request.aliases
                if a.HasField("spec")
            )
            seen.append(Registration(response.urn, request.parent, request.type, request.name, specs))
        return response

    MockMonitor.RegisterResource = register  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        MockMonitor.RegisterResource = original  # type: ignore[method-assign]


def _urn(like: str, parent: str | None, type_: str, name: str) -> str:
    """The engine's URN of ``type_``/``name`` under ``parent`` (an engine URN; None: the stack's root).
    The engine qualifies the type with the parent's whole chain of types, the root's left out (the
    mock monitor's own URNs keep only the parent's last type: they are keys here, not identities)."""
    prefix = like.split("::", 2)[0] + "::" + like.split("::", 2)[1]
    qualified = type_ if parent is None else f"{parent.split('::')[2]}${type_}"
    return f"{prefix}::{qualified}::{name}"


def answers_to(registrations: list[Registration]) -> dict[str, set[str]]:
    """Each resource's engine URN → every URN it answers to: its own, its aliases', and its own
    name and type under each URN its parent answers to (the engine's inherited aliases)."""
    engine: dict[str, str] = {}  # the mock's URN → the engine's
    names: dict[str, set[str]] = {}  # the mock's URN → every URN it answers to
    for r in registrations:  # parents register before their children
        parent = engine.get(r.parent)  # None: the stack's root
        engine[r.urn] = _urn(r.urn, parent, r.type, r.name)
        found = {_urn(r.urn, p, r.type, r.name) for p in names.get(r.parent, {parent})}
        for spec in r.aliases:
            moved_from = None if spec["noParent"] else spec["parentUrn"] or r.parent
            for p in names.get(moved_from, {engine.get(moved_from)}) if moved_from else {None}:
                found.add(_urn(r.urn, p, spec["type"] or r.type, spec["name"] or r.name))
        names[r.urn] = found | {engine[r.urn]}
    return {engine[k]: v for k, v in names.items()}


def capture() -> dict[str, list[str]]:
    """Each kind's registered URNs, sorted."""
    urns: dict[str, list[str]] = {}
    for kind, run in KINDS.items():
        with recorded() as seen:
            run()
        urns[kind] = sorted(answers_to(seen))
    return urns


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(capture(), indent=1) + "\n")
