"""The smoke gate: what "deployed" means (SPEC §4).

- ``checks.py``: the seven steps in plain Python, no Pulumi (:func:`run_gate`, :class:`GateFailure`);
- ``sse.py`` and ``metrics.py``: the SSE reader and the Prometheus text parser, shared with the probe;
- ``resource.py``: ``SmokeTest``, the Pulumi component, and its private dynamic provider;
- ``__main__.py``: the same checks from a command line (``python -m components.gate --help``).

Importing this package does not import Pulumi; ``components.gate.resource`` does.
"""

from components.gate.checks import GateFailure, run_gate

__all__ = ["GateFailure", "run_gate"]
