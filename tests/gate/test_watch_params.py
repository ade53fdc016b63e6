"""What the gates get to follow the serving containers (``container_watch``), rendered under mocks:
each replica gate its own host's container over that host's SSH identity, the front's gate the
front host's; the known times are the a800 seed's (weights ~36 s, engine init 335.5 s)."""

from __future__ import annotations

from tests.conftest import run_program, unwrap
from tests.multihost_stacks import GATE, THREE, target


def test_each_gate_follows_its_hosts_container_over_that_hosts_ssh() -> None:
    deployment = run_program("a800", overrides={"glm:target": target(*THREE)})
    gates = {r.name: unwrap(r.inputs) for r in deployment.of_type(GATE) if r.name.endswith("-gate")}
    watched = {name: gate["container_watch"] for name, gate in gates.items()}
    assert {n: w["docker_host"] for n, w in watched.items()} == {
        "a800-replica-gate": "ssh://deploy@10.0.0.11",
        "a800-gpu02-replica-gate": "ssh://deploy@10.0.0.12",
        "a800-gpu03-replica-gate": "ssh://deploy@10.0.0.13",
        "a800-smoke-gate": "ssh://deploy@10.0.0.11",
    }
    for watch in watched.values():
        assert watch["name"] == "glm53-flash-a800-8008"  # the a800 seed's container name
        assert "StrictHostKeyChecking=yes" in watch["ssh"] and "BatchMode=yes" in watch["ssh"]
        assert (watch["known_weights_seconds"], watch["known_start_seconds"]) == (36.0, 36.0 + 335.5)


def test_the_watch_is_not_a_gate_input() -> None:
    """A new host key or known time changes no gate input: `up` does not re-run the gate for it."""
    from components.verification.smoke_gate import GATE_INPUTS

    assert "container_watch" not in GATE_INPUTS


def test_a_poll_stops_waiting_once_the_container_stopped() -> None:
    """A readiness poll through an SSH tunnel to a container that is gone hangs until its timeout
    (10 s); the gate stops waiting for it as soon as the watch saw the container stop."""
    import threading
    import time

    import pytest

    from components.gate.checks import Overrun, within

    stopped = threading.Event()
    threading.Timer(0.3, stopped.set).start()
    began = time.monotonic()
    with pytest.raises(Overrun):
        within(10.0, lambda: time.sleep(5), until=stopped.is_set)
    assert time.monotonic() - began < 1.0
