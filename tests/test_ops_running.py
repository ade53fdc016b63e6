"""What `up` and `preview` see before the engine runs (ops/running.py): the state's containers read
right, and on the real Docker engine each way a container stops serving found, named and turned
into the engine's arguments."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ops.running import FRONT_GATE, Deployed, Finding, deployed, engine_args, look

SOCKET = "unix:///var/run/docker.sock"
IMAGE = "glm53-local/python:bookworm"  # offline/images.sh: the local stack's base
PROVIDER = "urn:pulumi:a800::glm::pulumi:providers:docker::gpu01-docker"
GATE = f"urn:pulumi:a800::glm::{FRONT_GATE}::a800-smoke-gate"


def state_of(*containers: dict[str, Any]) -> dict[str, Any]:
    """A `pulumi stack export` holding a provider over SSH, the front's gate and ``containers``."""
    provider = {
        "urn": PROVIDER, "id": "p1", "type": "pulumi:providers:docker",
        "inputs": {"host": "ssh://deploy@gpu01:22", "sshOpts": '["-o","UserKnownHostsFile=/dev/null"]'},
    }  # fmt: skip
    gate = {"urn": GATE, "id": "g1", "type": "pulumi-python:dynamic:Resource"}
    return {"deployment": {"resources": [provider, *containers, gate]}}


def container(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "urn": f"urn:pulumi:a800::glm::docker:index/container:Container::{name}",
        "id": f"id-{name}", "type": "docker:index/container:Container",
        "outputs": {"name": name}, "provider": f"{PROVIDER}::p1", **fields,
    }  # fmt: skip


def test_the_states_containers_each_with_its_providers_host_and_ssh_options() -> None:
    found = deployed(state_of(container("glm53-flash"), container("glm53-flash-nginx")))
    assert [(d.name, d.id, d.docker_host, d.ssh) for d in found] == [
        ("glm53-flash", "id-glm53-flash", "ssh://deploy@gpu01:22", ("-o", "UserKnownHostsFile=/dev/null")),
        (
            "glm53-flash-nginx",
            "id-glm53-flash-nginx",
            "ssh://deploy@gpu01:22",
            ("-o", "UserKnownHostsFile=/dev/null"),
        ),
    ]


def test_one_shot_containers_and_pending_deletes_are_not_looked_at() -> None:
    one_shot = container("download", inputs={"mustRun": False})
    leaving = container("old", delete=True)
    assert [d.name for d in deployed(state_of(one_shot, leaving, container("glm53-flash")))] == [
        "glm53-flash"
    ]
    assert deployed({}) == []


def test_a_stopped_one_is_replaced_and_the_front_gate_with_it() -> None:
    stopped = Finding(Deployed("urn:c", "id", "glm53-flash", SOCKET), "exited (code 0)")
    state = state_of()
    assert engine_args("up", [stopped], state) == ["--replace", "urn:c", "--replace", GATE]
    assert engine_args("preview", [stopped], state) == ["--replace", "urn:c", "--replace", GATE]


def test_in_an_up_a_gone_one_is_left_to_the_refresh_and_the_rest_replaced() -> None:
    gone = Finding(Deployed("urn:gone", "id", "glm53-flash", SOCKET), "removed", gone=True)
    stopped = Finding(Deployed("urn:stopped", "id2", "glm53-flash-nginx", SOCKET), "exited (code 0)")
    sick = Finding(Deployed("urn:sick", "id3", "glm53-flash-prometheus", SOCKET), "unhealthy", running=True)
    # The gone one was refreshed out of the state (refresh_out): the engine creates it.
    up = engine_args("up", [gone, stopped, sick], state_of())
    assert up == ["--replace", "urn:stopped", "--replace", "urn:sick", "--replace", GATE]
    # A preview must not refresh, nor change anything: the gone one is shown replaced.
    preview = engine_args("preview", [gone, stopped, sick], state_of())
    assert (
        "--refresh" not in preview
        and preview[:2] == ["--replace", "urn:gone"]
        and preview.count("--replace") == 4
    )


@pytest.fixture
def running() -> Iterator[Deployed]:
    """A container of this test on the local engine, with a health check that passes."""
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        pytest.skip(f"no Docker engine with {IMAGE} (make up makes it)")
    name = f"glm53-running-test-{time.monotonic_ns()}"
    started = subprocess.run(
        ["docker", "run", "-d", "--name", name, "--health-cmd", "test ! -e /tmp/sick",
         "--health-interval", "1s", "--health-retries", "1", IMAGE, "sleep", "600"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    try:
        yield Deployed(f"urn:…::{name}", started.stdout.strip(), name, SOCKET)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def settle(c: Deployed, health: str) -> None:
    for _ in range(60):
        got = subprocess.run(
            ["docker", "inspect", "--format", "{{.State.Health.Status}}", c.id],
            capture_output=True,
            text=True,
        )
        if got.stdout.strip() == health:
            return
        time.sleep(0.5)
    raise AssertionError(f"{c.name} never became {health}")


def test_on_docker_each_way_a_container_stops_serving_is_found_and_said(running: Deployed) -> None:
    settle(running, "healthy")
    assert look([running]) == []
    subprocess.run(["docker", "exec", running.name, "touch", "/tmp/sick"], check=True)
    settle(running, "unhealthy")
    [sick] = look([running])
    assert sick.running and sick.seen.startswith("unhealthy (") and "failed checks in a row" in sick.seen
    subprocess.run(["docker", "stop", "-t", "0", running.name], capture_output=True, check=True)
    [stopped] = look([running])
    finished = json.loads(
        subprocess.run(["docker", "inspect", "--format", "{{json .State.FinishedAt}}", running.id],
                       capture_output=True, text=True, check=True).stdout
    )  # fmt: skip
    assert stopped.seen == f"exited (code 137) at {finished[:10]} {finished[11:19]} UTC", stopped
    assert not stopped.running and not stopped.gone
    subprocess.run(["docker", "rm", running.name], capture_output=True, check=True)
    [gone] = look([running])
    assert (gone.seen, gone.gone) == ("removed", True)


def test_a_container_of_the_same_name_made_by_hand_is_not_the_stacks(running: Deployed) -> None:
    """The state's id is what is looked at: a hand-made namesake does not hide that it went."""
    subprocess.run(["docker", "rm", "-f", running.name], capture_output=True, check=True)
    subprocess.run(
        ["docker", "run", "-d", "--name", running.name, IMAGE, "sleep", "600"],
        capture_output=True,
        check=True,
    )
    [gone] = look([running])
    assert gone.gone
