"""What the semantic probe's failures tell the user to run: on the Kubernetes target the cluster's
commands, the ones the gate names (tests/test_k8s_look_at.py), never ``docker``; on a Docker host,
Docker's as before, from params that did not change.

The expected commands come from what the mocks render for the cluster's objects (the serving
Deployment's namespace and container, the selector the serving Service has); the failures are driven
through the probe's own checks (``check_steps`` with ``gate_params``) against a stand-in front.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from components.gate.checks import check_steps
from components.semantic_probe import PROBE_STEPS
from components.semantic_probe.settings import ProbeSettings
from components.verification.semantic_probe_spec import PARAMS_PATH
from tests.conftest import CONTAINER, Deployment, unwrap
from tests.engine import free_port
from tests.k8s_look_at_cases import DOCKER_SAYS, FAILURES, KEY, NAMESPACE, as_argv, rendered_kubectl
from tests.k8s_rendered import SERVICE

PROBE_FAILURES = {case: failure for case, failure in FAILURES.items() if failure[1] in PROBE_STEPS}
"""The gate's failures in the steps the probe runs too."""


def probe_params(deployment: Deployment) -> str:
    """The probe's ``params.json`` as the stack renders it: its ConfigMap on the cluster, its
    container's upload on a Docker host."""
    if deployment.of_type(CONTAINER):
        uploads = unwrap(deployment.one(CONTAINER, "-semantic-probe-container").inputs)["uploads"]
        return str(next(u["content"] for u in uploads if u["file"] == PARAMS_PATH))
    params = unwrap(deployment.one("kubernetes:core/v1:ConfigMap", "-semantic-probe-params").inputs)
    assert params["metadata"]["namespace"] == NAMESPACE
    return str(params["data"]["params.json"])


def test_the_cluster_probes_params_name_kubectl_at_the_rendered_objects(
    stacks: dict[str, Deployment],
) -> None:
    text = probe_params(stacks["k8s"])
    look_at = json.loads(text)["look_at"]
    assert {name: as_argv(command) for name, command in look_at.items()} == rendered_kubectl(stacks["k8s"])
    selector = unwrap(stacks["k8s"].one(SERVICE, "-vllm-service").inputs)["spec"]["selector"]
    assert as_argv(look_at["inspect"])[-1] == ",".join(sorted(f"{k}={v}" for k, v in selector.items()))
    assert all(command.startswith(f"kubectl -n {NAMESPACE} ") for command in look_at.values())
    assert "docker" not in text.lower()


def test_a_docker_hosts_probe_params_have_no_look_at(stacks: dict[str, Deployment]) -> None:
    """Left out, not null: the params file, and so the probe's container, stay as they were."""
    settings = ProbeSettings.from_json(probe_params(stacks["docker"]))
    assert "look_at" not in json.loads(probe_params(stacks["docker"]))
    assert "look_at" not in settings.gate_params(settings.targets[0])


def probe_failure(text: str, case: str, stand_in: Any) -> str:
    """The probe's check of ``case``'s step, with the rendered params, against the stand-in front."""
    does, step, _ = PROBE_FAILURES[case]
    settings = ProbeSettings.from_json(text)
    endpoint = (
        f"http://127.0.0.1:{free_port()}/v1"
        if does == "closed"
        else stand_in(settings.served_name, settings.max_model_len, does)
    )
    settings = dataclasses.replace(
        settings, endpoint=endpoint, smoke={**settings.smoke, "deadline_seconds": 0.3}
    )
    params = {k: v for k, v in settings.gate_params(settings.targets[0]).items() if k != "metrics_url"}
    [outcome] = check_steps(params, KEY, [step], progress=lambda _line: None)
    assert not outcome.ok and outcome.failure is not None
    return outcome.failure


@pytest.mark.parametrize("case", PROBE_FAILURES)
def test_on_the_cluster_a_probe_failure_names_kubectl_never_docker(
    stacks: dict[str, Deployment], case: str, stand_in: Any
) -> None:
    text = probe_params(stacks["k8s"])
    look_at = json.loads(text)["look_at"]  # the rendered objects' (the first test)
    message = probe_failure(text, case, stand_in)
    assert look_at[PROBE_FAILURES[case][2]] in message
    assert "docker" not in message.lower()


@pytest.mark.parametrize("case", PROBE_FAILURES)
def test_on_a_docker_host_a_probe_failure_names_docker_as_before(
    stacks: dict[str, Deployment], case: str, stand_in: Any
) -> None:
    """The probe has always named the serving container so on a Docker host (its params hold no name)."""
    message = probe_failure(probe_params(stacks["docker"]), case, stand_in)
    assert DOCKER_SAYS[PROBE_FAILURES[case][2]].format(container="the serving container") in message
    assert "kubectl" not in message
