"""What a gate's failure and an alert tell the user to run, on the Kubernetes target: kubectl, at the
objects the program renders, never ``docker`` (there is none there); on a Docker host, Docker's as before.

Both gates of a Kubernetes stack carry the cluster's commands: the smoke gate through the front (its
``look_at`` input) and each pod's readiness gate (its ``--look-at-*`` options). The expected commands
are built from what the mocks render (the serving Deployment's namespace and name, the container
that runs ``vllm serve``, the pods' selector); the failures are driven through the gate's runtime
against a stand-in front on loopback. Prometheus' rule file on the cluster names the same commands,
and the probe's log by its rendered Deployment and container.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.gate.__main__ import main as gate_main
from components.gate.checks import GateFailure, run_gate
from tests.conftest import CONTAINER, Deployment, run_program, unwrap
from tests.engine import free_port
from tests.k8s_look_at_cases import DOCKER_SAYS, FAILURES, KEY, NAMESPACE, as_argv, rendered_kubectl
from tests.k8s_rendered import DEPLOYMENT, k8s_target

GATE = "pulumi-python:dynamic:Resource"


def gate_inputs(deployment: Deployment) -> dict[str, Any]:
    return dict(unwrap(deployment.one(GATE, "-smoke-gate").inputs))


def readiness_options(deployment: Deployment) -> dict[str, str]:
    """The readiness sidecar's command line, as ``{option: value}`` after ``python3 -m components.gate``."""
    pods = unwrap(deployment.one(DEPLOYMENT, "-vllm").inputs)["spec"]["template"]["spec"]
    commands = [c.get("command", []) for c in pods["containers"]]
    [command] = [argv for argv in commands if argv[:3] == ["python3", "-m", "components.gate"]]
    return dict(zip(command[3::2], command[4::2], strict=True))


def test_the_front_gate_names_kubectl_at_the_rendered_objects(stacks: dict[str, Deployment]) -> None:
    look_at = gate_inputs(stacks["k8s"])["look_at"]
    assert {name: as_argv(command) for name, command in look_at.items()} == rendered_kubectl(stacks["k8s"])


def test_each_pods_readiness_gate_names_the_same_commands(stacks: dict[str, Deployment]) -> None:
    options = readiness_options(stacks["k8s"])
    look_at = gate_inputs(stacks["k8s"])["look_at"]
    assert {name: options[f"--look-at-{name}"] for name in look_at} == look_at


def test_new_commands_do_not_re_run_the_gate(stacks: dict[str, Deployment]) -> None:
    """Not a gate input, as the container watch is not: what a failure names verifies nothing."""
    from components.verification.smoke_gate import changed_inputs, gate_outputs

    news = gate_inputs(stacks["k8s"])
    stored = gate_outputs({k: v for k, v in news.items() if k != "look_at"}, results={})
    assert changed_inputs(stored, news) == []


def test_the_docker_gate_keeps_its_inputs(stacks: dict[str, Deployment]) -> None:
    """No new input on a Docker host: its gate would re-run on the next up for nothing."""
    inputs = gate_inputs(stacks["docker"])
    assert "look_at" not in inputs
    assert inputs["container_name"] == unwrap(stacks["docker"].one(CONTAINER, "-vllm").inputs)["name"]


def failure(inputs: dict[str, Any], case: str, stand_in: Any) -> GateFailure:
    """The gate run with a stack's rendered inputs against the stand-in, failing as ``case`` says."""
    does, step, _ = FAILURES[case]
    served, length = inputs["served_name"], int(inputs["max_model_len"])
    if does == "closed":
        endpoint = f"http://127.0.0.1:{free_port()}/v1"
    else:
        endpoint = stand_in(served, length + 1 if does == "length" else length, does)
    deadline = 0.3 if does == "closed" else 30
    # Without the Docker gate's container watch: it would run the docker CLI against this machine.
    left_out = ("api_key", "metrics_key", "metrics_url", "container_watch")
    params = {
        **{k: v for k, v in inputs.items() if k not in left_out},
        "endpoint": endpoint,
        # Short only where the failure is the wait itself: on a loaded machine 0.3 s ran out before the
        # stand-in's answer, and the gate failed at the wrong step.
        "smoke": {
            **inputs["smoke"],
            "steps": [step] if step != "readiness" else [],
            "deadline_seconds": deadline,
        },
    }
    with pytest.raises(GateFailure) as info:
        run_gate(params, KEY, lambda _line: None)
    assert info.value.step == step
    return info.value


@pytest.mark.parametrize("case", FAILURES)
def test_on_the_cluster_a_failure_names_kubectl_never_docker(
    stacks: dict[str, Deployment], case: str, stand_in: Any
) -> None:
    inputs = gate_inputs(stacks["k8s"])  # its look_at: the rendered objects' (the first test)
    message = failure(inputs, case, stand_in).message
    named = FAILURES[case][2]
    assert inputs["look_at"][named] in message
    assert "docker" not in message.lower()
    if named == "running":  # and the serving container's log, by its command too
        assert inputs["look_at"]["logs"] in message


@pytest.mark.parametrize("case", FAILURES)
def test_on_a_docker_host_a_failure_names_docker_as_before(
    stacks: dict[str, Deployment], case: str, stand_in: Any
) -> None:
    inputs = gate_inputs(stacks["docker"])
    container = unwrap(stacks["docker"].one(CONTAINER, "-vllm").inputs)["name"]
    message = failure(inputs, case, stand_in).message
    assert DOCKER_SAYS[FAILURES[case][2]].format(container=container) in message
    assert "kubectl" not in message


def test_the_pods_readiness_check_as_rendered_names_kubectl(
    stacks: dict[str, Deployment], stand_in: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """The sidecar's own command line, one run of it against a stand-in that reports another length:
    the verdict the pod's guard reads, which the probe prints and ``kubectl describe pod`` shows,
    names the cluster's commands."""
    options = readiness_options(stacks["k8s"])
    options["--endpoint"] = stand_in(options["--served-name"], int(options["--max-model-len"]) + 1)
    options["--steps"] = "models"
    options["--verdict-file"] = str(tmp_path / Path(options["--verdict-file"]).name)
    del options["--every"], options["--checked-file"]  # one of the sidecar's runs, not its loop
    monkeypatch.setenv(options["--api-key-env"], "in-pod-no-key")
    assert gate_main([word for option in options.items() for word in option]) == 1
    said = capsys.readouterr().err
    assert "smoke gate failed at step 'models'" in said
    assert Path(options["--verdict-file"]).read_text().startswith("smoke gate failed at step 'models'")
    assert f"({options['--look-at-inspect']})" in said
    assert as_argv(options["--look-at-inspect"]) == rendered_kubectl(stacks["k8s"])["inspect"]
    assert "docker" not in said.lower()


# ---- the alerts -----------------------------------------------------------------------------------

PROBE_ALERTS = (
    "GlmModelAnswersWrong",
    "GlmToolCallsBroken",
    "GlmSemanticProbeStepFailing",
    "GlmSemanticProbeSilent",
)


def descriptions(rules_file: str) -> dict[str, str]:
    """Each alert's description, by the alert's name."""
    groups = yaml.safe_load(rules_file)["groups"]
    return {r["alert"]: r["annotations"]["description"] for g in groups for r in g["rules"] if "alert" in r}


def cluster_rules(deployment: Deployment) -> str:
    """The rule file in Prometheus' ConfigMap, as the cluster's Prometheus loads it."""
    return unwrap(deployment.one("kubernetes:core/v1:ConfigMap", "-prometheus-config").inputs)["data"][
        "rules.yml"
    ]


def probe_log(deployment: Deployment) -> list[str]:
    """The probe's log, for the objects as rendered: its Deployment's namespace and name, its one container."""
    probe = unwrap(deployment.one(DEPLOYMENT, "-semantic-probe").inputs)
    meta = probe["metadata"]
    [container] = probe["spec"]["template"]["spec"]["containers"]
    return ["kubectl", "-n", meta["namespace"], "logs", f"deploy/{meta['name']}", "-c", container["name"]]


def test_the_clusters_alerts_name_kubectl_never_docker(stacks: dict[str, Deployment]) -> None:
    rules = cluster_rules(stacks["k8s"])
    assert "docker" not in rules.lower()
    kubectl = rendered_kubectl(stacks["k8s"])
    assert kubectl["logs"][:3] == ["kubectl", "-n", NAMESPACE]
    down = descriptions(rules)["VllmTargetDown"]
    # The pod that is down, by the alert's host label (the pod's name), not one kubectl picks.
    container = kubectl["logs"][kubectl["logs"].index("-c") + 1]
    assert f"Check `kubectl -n {NAMESPACE} logs {{{{ $labels.host }}}} -c {container}` (OOM," in down
    assert f"its restart count (RESTARTS in `{shlex.join(kubectl['running'])}`;" in down
    assert down.count("kubectl") == 2


def test_the_probe_alerts_name_the_rendered_probe_deployments_log(stacks: dict[str, Deployment]) -> None:
    texts = descriptions(cluster_rules(stacks["k8s"]))
    log = shlex.join(probe_log(stacks["k8s"]))
    assert log.startswith(f"kubectl -n {NAMESPACE} logs deploy/")
    for alert in PROBE_ALERTS[:3]:
        assert f"what to look at: {log}. The probe runs every" in texts[alert], alert
        assert texts[alert].count("kubectl") == 1, alert
    running = shlex.join(rendered_kubectl(stacks["k8s"])["running"])
    assert texts["GlmSemanticProbeSilent"].endswith(f"Look at: {running} and {log}.")
    assert texts["GlmSemanticProbeSilent"].count("kubectl") == 2


def test_the_operators_rule_names_the_same_commands() -> None:
    """``prometheusOperator``: the PrometheusRule is rendered from the same spec, kubectl's commands in it."""
    deployment = run_program(
        "local", {"glm:target": k8s_target(namespace=NAMESPACE, prometheusOperator=True)}
    )
    rule = next(r for r in deployment.resources if r.name.endswith("-alert-rules"))
    text = json.dumps(unwrap(rule.inputs)["spec"])
    assert "docker" not in text.lower()
    assert shlex.join(probe_log(deployment)) in text
    assert f"kubectl -n {NAMESPACE} logs {{{{ $labels.host }}}} -c vllm" in text


DOCKER_ALERTS_SAY = {
    "VllmTargetDown": "Check `docker logs` of the serving container (OOM, engine-ready timeout, NCCL/HCCL "
    "errors) and its restart count.",
    **{
        alert: "The probe's log says what came back and what to look at: docker logs {probe}. The probe runs every"
        for alert in PROBE_ALERTS[:3]
    },
    "GlmSemanticProbeSilent": "Wrong answers would not alert. Look at: docker ps -a and docker logs {probe}.",
}
"""Docker's words, as the alerts said them before the cluster had its own."""


def test_a_docker_hosts_alerts_name_docker_as_before(stacks: dict[str, Deployment]) -> None:
    rules = unwrap(stacks["docker"].one("pulumi-python:dynamic:Resource", "-monitoring-files").inputs)[
        "contents"
    ]["rules.yml"]
    probe = unwrap(stacks["docker"].one(CONTAINER, "-semantic-probe-container").inputs)["name"]
    texts = descriptions(rules)
    for alert, said in DOCKER_ALERTS_SAY.items():
        assert said.format(probe=probe) in texts[alert], alert
    assert "kubectl" not in rules
