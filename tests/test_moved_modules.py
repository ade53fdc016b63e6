"""A stack deployed before issue 38's floors still loads its dynamic providers from the state.

Pulumi stores each dynamic resource's provider pickled (dill) by reference to its class's module:
the paths below are the ones the states of that time hold (decoded from the render snapshot's
``__provider`` values), written out here rather than read from ``components.MOVED``.
"""

from __future__ import annotations

import importlib
import pickle

import dill
import pytest

STORED = [
    ("components.k8s_roll", "RollWatchProvider", "components.kubernetes.roll"),
    ("components.nginx_reload", "NginxReloadProvider", "components.docker.nginx_reload"),
    ("components.replica_gate", "ReplicaGateProvider", "components.docker.replica_gate"),
    ("components.replica_tls", "_ReplicaCertificateProvider", "components.serving.replica_credentials"),
    # issue 49: the Kubernetes target imports nothing of components/docker/
    (
        "components.docker.replica_tls",
        "_ReplicaCertificateProvider",
        "components.serving.replica_credentials",
    ),
    # issue 51: the gate's resource in components/verification/
    ("components.smoke_gate", "SmokeTestProvider", "components.verification.smoke_gate"),
    ("components.smoke_test", "SmokeTestProvider", "components.verification.smoke_gate"),
    # never moved: still at the path the states hold
    ("components.secrets", "_GeneratedKeyProvider", "components.secrets"),
]


@pytest.mark.parametrize(("old_module", "name", "new_module"), STORED)
def test_a_provider_stored_under_its_old_module_still_loads(
    old_module: str, name: str, new_module: str
) -> None:
    provider_class = getattr(importlib.import_module(new_module), name)
    stored = pickle.dumps(provider_class(), protocol=0)
    assert f"{new_module}\n{name}".encode() in stored
    old = stored.replace(f"{new_module}\n".encode(), f"{old_module}\n".encode())

    assert type(dill.loads(old)) is provider_class


@pytest.mark.parametrize(("old_module", "name", "new_module"), STORED)
def test_the_old_module_path_still_imports(old_module: str, name: str, new_module: str) -> None:
    assert getattr(importlib.import_module(old_module), name) is getattr(
        importlib.import_module(new_module), name
    )
