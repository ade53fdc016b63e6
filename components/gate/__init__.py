"""The smoke gate: what "deployed" means (SPEC §4).

- ``checks.py``: the entry points, no Pulumi (:func:`run_gate`, :func:`check_steps`, :class:`GateFailure`);
- ``steps.py`` and ``readiness.py``: the seven steps and their one table; ``run.py``: one run's
  parameters and results; ``transport.py``: the bounded client; ``messages.py``: what a failure says;
- ``settings.py``: ``SmokeConfig``, the gate's settings (``glm:smoke``);
- ``sse.py`` and ``metrics.py``: the SSE reader and the Prometheus text parser, shared with the probe;
- ``__main__.py``: the same checks from a command line (``python -m components.gate --help``).

This package is the gate's runtime only: it imports neither Pulumi nor the stack configuration, and
the semantic probe's image carries it whole. The Pulumi resources that run it live outside:
``SmokeTest`` (components/verification/smoke_gate.py) and ``ReplicaGate`` (components/docker/replica_gate.py).
"""

from components.gate.checks import GateFailure, run_gate

__all__ = ["GateFailure", "run_gate"]
