"""The gate's fixtures (simulators, real Nginx fronts) for the probe's tests."""

from tests.gate.conftest import front, sims

__all__ = ["front", "sims"]
