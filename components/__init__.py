"""The components of a GLM-5.3-Flash deployment, one module each (see README)."""

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

MOVED = {
    "components.gate.resource": "components.verification.smoke_gate",
    "components.smoke_test": "components.verification.smoke_gate",
    # issue 38's floors: the modules whose dynamic providers a stack's state holds
    "components.k8s_roll": "components.kubernetes.roll",
    "components.nginx_reload": "components.docker.nginx_reload",
    "components.replica_gate": "components.docker.replica_gate",
    "components.replica_tls": "components.serving.replica_credentials",
    # issue 49: the certificate both targets' guards serve
    "components.docker.replica_tls": "components.serving.replica_credentials",
    # issue 51: what proves a deployment serves right, one package
    "components.smoke_gate": "components.verification.smoke_gate",
}
"""Where a dynamic provider lived before: Pulumi keeps a dynamic resource's provider in the state
pickled by reference to its class's module (nothing else: the providers hold no state of their own,
and what their methods import is looked up anew), so ``pulumi destroy`` or ``refresh`` of a stack
deployed then would stop at ``ModuleNotFoundError`` until its next ``up`` stores the new path. An
old name is an alias of the new module; it can go once every stack has had one ``up`` since."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old name of :data:`MOVED` as a module that hands on the new one's names."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, self) if fullname in MOVED else None

    def exec_module(self, module: ModuleType) -> None:
        moved = importlib.import_module(MOVED[module.__name__])
        module.__getattr__ = lambda name: getattr(moved, name)  # type: ignore[method-assign]


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
