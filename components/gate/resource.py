"""Where stacks deployed before this release find the smoke gate's provider: not the gate's runtime.

Pulumi keeps a dynamic resource's provider in the state, pickled by reference to its module; the
provider lived here until it moved to ``components/smoke_test.py``. Without this name, ``pulumi
destroy`` or ``refresh`` of such a stack stops at ``ModuleNotFoundError: components.gate.resource``
until its next ``up`` stores the new path. Nothing imports this module and the probe's image does
not carry it; it can go once every stack has had one ``up`` since.
"""

from components.smoke_test import SmokeTestProvider

__all__ = ["SmokeTestProvider"]
