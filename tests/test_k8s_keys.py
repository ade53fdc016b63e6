"""Nothing a stack sets is silently lost on Kubernetes (issues 34 and 36).

A key the Docker hosts honour and the cluster's path does not read is refused when the stack sets
it, naming the key, what happens on the cluster and the fix; a Docker host's setting the cluster
does for itself is a warning, so a Docker stack's file still deploys there. A profile's own values
(the seeds') are not the user's: the committed stack files deploy on the cluster as they are.

Expected messages are what a user reads: the key as `pulumi config` names it, "is not read on
Kubernetes", and the command that fixes it.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from components.config import ConfigError, build_stack_config, usage_meter_runs
from components.config.secret_inputs import SecretInputs
from components.render.prometheus_config import ScrapeSpec
from tests.conftest import Deployment, run_program, stack_config, unwrap
from tests.k8s_urns import KINDS

LOCAL_DOCKER = {"name": "localhost", "dockerHost": "unix:///var/run/docker.sock"}
ON_DOCKER = {"hosts": [LOCAL_DOCKER]}
ON_K8S = {**ON_DOCKER, "kubernetes": {"namespace": "glm53-test", "frontUrl": "http://127.0.0.1:30080/v1"}}
NOT_READ = "is not read on Kubernetes"
API_KEYS = {"ops": "sk-7f3c9a1e5b2d8f4a6c0e9b7d3a1f5c8e"}


def refused(raw: dict[str, Any], secrets: SecretInputs | None = None) -> str:
    with pytest.raises(ConfigError) as err:
        build_stack_config(raw, secrets)
    return str(err.value)


# ---- refused: what the cluster would lose -------------------------------------------------------

REFUSED = {
    "the weights' download": (
        {"model": {"download": {"enabled": True, "repo": "zai-org/GLM-5.3-Flash"}}},
        "glm:model.download.enabled=true is not read on Kubernetes: no pod downloads zai-org/GLM-5.3-Flash",
        "then `scripts/pulumi.sh config rm --path 'glm:model.download.enabled'",
    ),
    "a promotion": (
        {"promoteFrom": "organization/glm/local-staging"},
        "glm:promoteFrom='organization/glm/local-staging' is not read on Kubernetes",
        "Fix: `scripts/pulumi.sh config rm glm:promoteFrom -s <stack>`, and pin the source's image yourself",
    ),
    "extra device nodes": (
        {"container": {"devices": ["/dev/infiniband/uverbs0"]}},
        "glm:container.devices=['/dev/infiniband/uverbs0'] is not read on Kubernetes",
        "Fix: `scripts/pulumi.sh config rm --path 'glm:container.devices' -s <stack>`, and have a device plugin",
    ),
    "a privileged container": (
        {"container": {"privileged": True}},
        "glm:container.privileged=true is not read on Kubernetes: no serving pod is privileged",
        "Fix: `scripts/pulumi.sh config rm --path 'glm:container.privileged'",
    ),
    "the host's network": (
        {"container": {"networkMode": "host"}, "serving": {"host": "172.17.0.1"}},
        "glm:container.networkMode=host is not read on Kubernetes: a pod never uses its node's network",
        "Fix: `scripts/pulumi.sh config rm --path 'glm:container.networkMode' -s <stack>` (bridge)",
    ),
    "the host's IPC namespace": (
        {"container": {"ipcMode": "host"}},
        "glm:container.ipcMode=host is not read on Kubernetes",
        "Fix: `scripts/pulumi.sh config rm --path 'glm:container.ipcMode' -s <stack>`, and set glm:container.shmSize",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_key_the_cluster_would_lose_is_refused_naming_it_and_the_fix(case: str) -> None:
    keys, what, fix = REFUSED[case]
    message = refused({"hardware": "local", "target": ON_K8S, **keys})
    assert what in message and fix in message
    # The same key on a Docker host is honoured: the refusal is the cluster's alone.
    build_stack_config({"hardware": "local", "target": ON_DOCKER, **keys})


def test_the_secret_env_is_refused_naming_the_variables_never_their_values() -> None:
    secrets = SecretInputs(api_keys=API_KEYS, serving_env={"HF_TOKEN": "hf_Secret0Value"})
    message = refused({"hardware": "local", "target": ON_K8S}, secrets)
    assert "glm:servingSecretEnv (HF_TOKEN) is not read on Kubernetes" in message
    assert "Fix: `scripts/pulumi.sh config rm glm:servingSecretEnv -s <stack>`" in message
    assert "hf_Secret0Value" not in message
    build_stack_config({"hardware": "local", "target": ON_DOCKER}, secrets)


def test_every_lost_key_is_reported_at_once() -> None:
    keys: dict[str, Any] = {}
    for case in ("a promotion", "the host's IPC namespace"):
        keys |= REFUSED[case][0]
    message = refused({"hardware": "local", "target": ON_K8S, **keys})
    assert [line.split("=")[0].strip() for line in message.splitlines()[1:]] == [
        "glm:promoteFrom",
        "glm:container.ipcMode",
    ]


@pytest.mark.parametrize(
    "meter",
    [
        {},  # the default: on
        {"enabled": True, "weights": {"ops": 2, "batch": 0.5}, "queueSeconds": 2.5},
        {"limits": {"ops": {"tokensPerMinute": 9000}}, "defaultLimits": {"tokensPerDay": 500000}},
        {"enabled": False, "weights": {"ops": 2}},  # off: nginx straight to the Service, anywhere
    ],
)
def test_the_meter_runs_on_the_cluster_as_on_docker_hosts(meter: dict[str, Any]) -> None:
    """Issue 49: the meter, its fair share and its budgets are the cluster's too, with the same keys:
    nothing refused or warned about that works on Docker hosts."""
    config = build_stack_config({"hardware": "local", "target": ON_K8S, "front": {"usageMeter": meter}})
    on_docker = build_stack_config({"hardware": "local", "target": ON_DOCKER, "front": {"usageMeter": meter}})
    assert not [a for a in config.advisories() if "usageMeter" in a]
    assert usage_meter_runs(config) == usage_meter_runs(on_docker) == meter.get("enabled", True)
    assert (ScrapeSpec.of(config).usage_meter is None) == (not meter.get("enabled", True))


# ---- warned: a Docker host's setting the cluster does for itself ---------------------------------

WARNED = {
    "container.name": ({"container": {"name": "glm53-team-b"}}, "in the stack's namespace"),
    "container.networkSubnet": ({"container": {"networkSubnet": "172.31.9.0/24"}}, "pod network"),
    "container.restart": ({"container": {"restart": "no"}}, "restartPolicy Always"),
    "container.logMaxSize": ({"container": {"logMaxSize": "1g"}}, "containerLogMaxSize"),
    "container.logMaxFiles": ({"container": {"logMaxFiles": 20}}, "containerLogMaxFiles"),
    "front.port": ({"front": {"port": 443}}, "the front's Service listens on 8080"),
    "front.bindAddress": (
        {"front": {"bindAddress": "10.0.0.5", "allowPlainHttp": True}},
        "every pod of the cluster reaches",
    ),
    "monitoring.port": ({"monitoring": {"port": 9091}}, "Prometheus' Service listens on 9090"),
    "monitoring.bindAddress": (
        {"monitoring": {"bindAddress": "10.0.0.5", "allowPublicBind": True}},
        "Prometheus' Service is a ClusterIP",
    ),
    "image.keepLocally": (
        {"image": {"reference": "vllm/vllm-openai:v0.23.0", "keepLocally": False}},
        "the nodes pull glm:image.reference themselves",
    ),
    "serving.host": ({"serving": {"host": "0.0.0.0"}}, "--host=127.0.0.1"),
    "semanticProbe.ejectReplicas": ({"semanticProbe": {"ejectReplicas": False}}, "readiness"),
}


@pytest.mark.parametrize("key", WARNED)
def test_a_docker_hosts_setting_deploys_on_the_cluster_with_a_warning(key: str) -> None:
    keys, instead = WARNED[key]
    config = build_stack_config({"hardware": "local", "target": ON_K8S, **keys}, stack="local")
    [warning] = [a for a in config.advisories() if NOT_READ in a]
    assert warning.startswith(f"glm:{key}=") and instead in warning
    # The stack named in the command: the advisory is printed by the program, which knows it.
    assert f"`scripts/pulumi.sh config rm --path 'glm:{key}' -s local`" in warning
    on_docker = build_stack_config({"hardware": "local", "target": ON_DOCKER, **keys}, stack="local")
    assert not [a for a in on_docker.advisories() if NOT_READ in a]


# ---- the profiles' values and the committed stacks ----------------------------------------------


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090", "local", "a800-staging"])
def test_a_committed_stack_file_moves_to_the_cluster_unrefused_and_unwarned(stack: str) -> None:
    """The seeds' own devices, privileged: false, --host and front port (ascend's) are the
    profile's, which docs/scaling.md maps: the stack set none of them."""
    raw = {key.removeprefix("glm:"): value for key, value in stack_config(stack).items()}
    front = {**raw.get("front", {}), "allowPlainHttp": True}
    config = build_stack_config({**raw, "target": ON_K8S, "front": front}, stack=stack)
    assert [a for a in config.advisories() if NOT_READ in a] == []


@pytest.mark.parametrize("kind", KINDS)
def test_the_committed_kubernetes_kinds_build_and_warn_of_no_lost_key(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *_, **__: said.append(str(message)))
    deployment = KINDS[kind]()
    assert deployment.outputs["target"] == "kubernetes"
    assert [line for line in said if NOT_READ in line] == []
    # The usage meter runs in every front pod; Prometheus reads each pod's counters.
    front = unwrap(deployment.one("kubernetes:core/v1:ConfigMap", "-front-config").inputs)["data"]
    assert 'require("meter").access()' in front["nginx.conf"]
    assert "/meter/peers" in front["nginx.conf"]
    # The meter picks each request's pod from the file its pod's `routes` lister keeps; no Docker
    # replica groups (no rotation writes them on the cluster).
    conf = front["nginx.conf"]
    assert "set $glm_upstream vllm;" in conf and "upstream glm_pods {" in conf, conf
    assert '"pods_file": "/run/glm53-routes/pods"' in conf and "map glm $glm_routes" not in conf


# ---- honoured: the pods' readiness asks the stack's own questions --------------------------------

QUESTIONS = {
    "prompt": "What is 12×12? Answer with the number only.",
    "expectedAnswer": "144",
    "toolPrompt": "What is the weather in Lyon right now?",
}


def readiness(deployment: Deployment) -> list[str]:
    pods = unwrap(deployment.one("kubernetes:apps/v1:Deployment", "-vllm").inputs)["spec"]["template"]
    [gate] = [c for c in pods["spec"]["containers"] if c["name"] == "gate"]
    return list(gate["command"])


def test_the_pods_readiness_asks_the_questions_the_front_gate_asks() -> None:
    """On Docker hosts a replica's gate asks glm:smoke's questions; on the cluster each pod's
    readiness runs that gate, and asked 13x17 whatever the stack said."""
    smoke = {**(stack_config("local").get("glm:smoke") or {}), **QUESTIONS}
    command = readiness(run_program("local", {"glm:target": ON_K8S, "glm:smoke": smoke}))
    tail = command[command.index("--chat-template-kwargs") + 2 :]
    assert tail == [
        "--prompt", QUESTIONS["prompt"],
        "--expected-answer", QUESTIONS["expectedAnswer"],
        "--tool-prompt", QUESTIONS["toolPrompt"],
    ]  # fmt: skip


def test_a_stack_that_keeps_the_gates_questions_keeps_its_pods() -> None:
    command = readiness(run_program("local", {"glm:target": ON_K8S}))
    assert command[-2] == "--chat-template-kwargs"


def test_the_gates_command_line_asks_the_questions_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from components.gate import __main__ as gate

    asked: dict[str, Any] = {}
    monkeypatch.setattr(gate, "run_gate", lambda params, *_: asked.update(params["smoke"]) or {})
    monkeypatch.setenv("GLM_GATE_KEY", "in-pod-no-key")
    argv = ["--endpoint", "http://127.0.0.1:8000/v1", "--api-key-env", "GLM_GATE_KEY"]
    assert gate.main([*argv, "--prompt", QUESTIONS["prompt"], "--expected-answer", "144"]) == 0
    assert (asked["prompt"], asked["expected_answer"]) == (QUESTIONS["prompt"], "144")
    assert "tool_prompt" not in asked  # the gate's own, from glm:smoke's defaults
