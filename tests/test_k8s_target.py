"""The Kubernetes form of ``glm:target`` under mocks: every profile's stack rendered as the objects
the API server receives (components/kubernetes/workload.py, components/kubernetes/deployment.py).

Expected values come from the seeds (cards, /dev/shm) and from the same stack rendered for a
Docker host (argv, env): the two targets must run the same ``ServingSpec``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import ConfigError, build_stack_config
from tests.conftest import Deployment, is_secret, run_program, serving_container, unwrap
from tests.k8s_rendered import (
    DEPLOYMENT,
    FRONT_URL,
    LOCAL_DOCKER,
    SERVICE,
    container,
    flag,
    k8s_target,
    plain_http_accepted,
    pod_spec,
)

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@pytest.fixture(scope="module")
def on_k8s() -> dict[str, Deployment]:
    stacks = ("a800", "ascend", "rtx5090", "local")
    target = k8s_target(frontNodePort=30080, cacheHostPath="/srv/jit")
    return {s: run_program(s, {"glm:target": target, **plain_http_accepted(s)}) for s in stacks}


@pytest.fixture(scope="module")
def on_docker() -> dict[str, Deployment]:
    return {
        s: run_program(s, {"glm:target": {"hosts": [LOCAL_DOCKER]}})
        for s in ("a800", "ascend", "rtx5090", "local")
    }


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090", "local"])
def test_the_pods_run_the_argv_the_docker_host_runs(
    on_k8s: dict[str, Deployment], on_docker: dict[str, Deployment], stack: str
) -> None:
    vllm = container(on_k8s[stack], "vllm")
    docker_inputs = serving_container(on_docker[stack])
    assert vllm["command"] == docker_inputs["entrypoints"] == ["vllm", "serve"]
    # The same argv, on the pod's loopback (its guard publishes the pod's port: tests/test_k8s_guard.py).
    argv = list(docker_inputs["command"])
    if any(a.startswith("--host=") for a in argv):  # the ascend seed's --host=0.0.0.0
        argv = ["--host=127.0.0.1" if a.startswith("--host=") else a for a in argv]
    else:
        argv.insert(next(i for i, a in enumerate(argv) if a.startswith("--port=")), "--host=127.0.0.1")
    assert vllm["args"] == argv
    # Same env, less the card pinning the device plugin replaces.
    docker_env = dict(e.split("=", 1) for e in unwrap(docker_inputs["envs"]))
    pinning = {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "ASCEND_RT_VISIBLE_DEVICES",
    }
    pod_env = {e["name"]: e["value"] for e in vllm["env"]}
    # Plus a HOME it may write and a user name for a UID with no passwd entry (least privilege).
    own = {"HOME": "/home/glm53", "USER": "glm53"}
    assert pod_env == {k: v for k, v in docker_env.items() if k not in pinning} | own
    assert not pinning & set(pod_env)


@pytest.mark.parametrize(
    ("stack", "resource", "cards"),
    # a800 seed: 8xA800, TP 8; ascend seed: --device /dev/davinci0 … davinci7; rtx5090 seed: 8 cards, TP 8.
    [
        ("a800", "nvidia.com/gpu", "8"),
        ("ascend", "huawei.com/Ascend910", "8"),
        ("rtx5090", "nvidia.com/gpu", "8"),
    ],
)
def test_cards_are_device_plugin_resources(
    on_k8s: dict[str, Deployment], stack: str, resource: str, cards: str
) -> None:
    vllm = container(on_k8s[stack], "vllm")
    assert vllm["resources"] == {"limits": {resource: cards}, "requests": {resource: cards}}
    assert flag(vllm["args"], "--tensor-parallel-size") == cards


def test_a_rehearsal_requests_no_card(on_k8s: dict[str, Deployment]) -> None:
    assert "resources" not in container(on_k8s["local"], "vllm")
    rehearsal = run_program("a800", {"glm:target": k8s_target(), "glm:rehearsal": {"enabled": True}})
    assert "resources" not in container(rehearsal, "vllm")


def test_dev_shm_is_a_memory_emptydir_with_the_seeds_size(on_k8s: dict[str, Deployment]) -> None:
    spec = pod_spec(on_k8s["ascend"])
    dshm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    # The ascend seed's `--shm-size=500g`.
    assert dshm == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{500 * 1024}Mi"}}
    mount = next(m for m in container(on_k8s["ascend"], "vllm")["volumeMounts"] if m["name"] == "dshm")
    assert mount["mountPath"] == "/dev/shm"


def test_weights_read_only_and_the_jit_cache_on_a_kept_claim(on_k8s: dict[str, Deployment]) -> None:
    deployment = on_k8s["a800"]
    spec = pod_spec(deployment)
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["weights"]["hostPath"] == {"path": "/data/models", "type": "Directory"}  # Pulumi.a800.yaml
    mounts = {m["name"]: m for m in container(deployment, "vllm")["volumeMounts"]}
    assert mounts["weights"]["readOnly"] is True
    assert volumes["jit-cache"]["persistentVolumeClaim"] == {"claimName": "glm53-jit-cache"}
    assert mounts["jit-cache"]["mountPath"] == "/var/cache/glm53"
    claim = deployment.one("kubernetes:core/v1:PersistentVolumeClaim")
    volume = deployment.one("kubernetes:core/v1:PersistentVolume")
    assert unwrap(volume.inputs)["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert unwrap(volume.inputs)["spec"]["hostPath"]["path"] == "/srv/jit"
    assert unwrap(claim.inputs)["spec"]["volumeName"] == unwrap(volume.inputs)["metadata"]["name"]
    for kept in (claim.name, volume.name, deployment.one("kubernetes:core/v1:Namespace").name):
        assert deployment.options[kept].retain_on_delete is True, kept
    assert deployment.options[deployment.one(DEPLOYMENT, "-vllm").name].retain_on_delete is not True


def test_weights_from_a_claim_are_mounted_read_only() -> None:
    deployment = run_program("a800", {"glm:target": k8s_target(weightsClaim="glm-weights")})
    weights = next(v for v in pod_spec(deployment)["volumes"] if v["name"] == "weights")
    assert weights["persistentVolumeClaim"] == {"claimName": "glm-weights", "readOnly": True}


@pytest.mark.parametrize("stack", ["a800", "ascend", "local"])
def test_a_stop_drains_inside_the_grace_period(on_k8s: dict[str, Deployment], stack: str) -> None:
    spec = pod_spec(on_k8s[stack])
    vllm = container(on_k8s[stack], "vllm")
    shutdown = int(flag(vllm["args"], "--shutdown-timeout"))
    pause = vllm["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pause == 10
    assert spec["terminationGracePeriodSeconds"] > pause + shutdown
    strategy = unwrap(on_k8s[stack].one(DEPLOYMENT, "-vllm").inputs)["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def test_readiness_is_the_gate_against_the_pod_not_health(on_k8s: dict[str, Deployment]) -> None:
    vllm = container(on_k8s["a800"], "vllm")
    assert "readinessProbe" not in vllm
    # /health only restarts a dead engine (asked inside the container: vLLM is on the pod's
    # loopback); the startup probe covers the seeds' long loads.
    port = flag(vllm["args"], "--port")
    assert f"'http://127.0.0.1:{port}/health'" in vllm["livenessProbe"]["exec"]["command"][-1]
    assert vllm["startupProbe"]["periodSeconds"] * vllm["startupProbe"]["failureThreshold"] >= 1800
    # Liveness kills a dead engine, not a slow node: at 10 s x 3 its own Python start timed out on
    # healthy pods at load 24 on 2 cores and the kubelet killed vLLM mid-roll (stop 43's run 11).
    liveness = vllm["livenessProbe"]
    assert (
        liveness["timeoutSeconds"] >= 30 and liveness["periodSeconds"] * liveness["failureThreshold"] >= 120
    )
    gate = container(on_k8s["a800"], "gate")
    command = gate["command"]
    assert command[:3] == ["python3", "-m", "components.gate"]
    args = dict(zip(command[3::2], command[4::2], strict=True))
    # The sidecar checks every period; the kubelet's probe reads the verdict in a shell, no Python.
    probe = gate["readinessProbe"]
    assert float(args["--every"]) == probe["periodSeconds"] == 15  # glm:target.kubernetes's default
    assert probe["exec"]["command"][:2] == ["sh", "-c"] and "python" not in probe["exec"]["command"][-1]
    assert args["--verdict-file"] in probe["exec"]["command"][-1]
    assert args["--checked-file"] in probe["exec"]["command"][-1]
    port = flag(vllm["args"], "--port")
    assert args["--endpoint"] == f"http://127.0.0.1:{port}/v1"
    assert args["--metrics-url"] == f"http://127.0.0.1:{port}/metrics"
    assert args["--served-name"] == flag(vllm["args"], "--served-model-name")
    assert args["--max-model-len"] == flag(vllm["args"], "--max-model-len")
    assert args["--steps"].split(",") == ["models", "arithmetic", "tool_call", "kv_pool"]
    assert flag(vllm["args"], "--host") == "127.0.0.1"  # the gate asks over the pod's loopback


def meter_slots(deployment: Deployment) -> int:
    """The slots per serving pod the front pods' meter shares (its settings in their nginx.conf)."""
    conf = unwrap(deployment.one("kubernetes:core/v1:ConfigMap", "-front-config").inputs)["data"][
        "nginx.conf"
    ]
    found = re.findall(r'"slots": (\d+)', conf)
    assert len(found) == 1, found
    return int(found[0])


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090", "local"])
def test_the_fronts_share_every_sequence_but_the_readiness_checks(
    stack: str, on_k8s: dict[str, Deployment]
) -> None:
    """Each pod's readiness check asks its vLLM past the fronts, one chat at a time: the meter shares
    the rest of ``--max-num-seqs``, so a flood that fills the pods leaves the check a sequence and
    no client request waits inside vLLM behind it (on the one-node cluster, before: B's requests
    and the check itself queued in the engine every readiness period, up to 1.3 s)."""
    max_num_seqs = int(flag(container(on_k8s[stack], "vllm")["args"], "--max-num-seqs"))
    assert meter_slots(on_k8s[stack]) == max_num_seqs - 1


def test_the_front_and_the_gate_go_through_the_front_service(on_k8s: dict[str, Deployment]) -> None:
    deployment = on_k8s["local"]
    front_service = unwrap(deployment.one(SERVICE, "-front-service").inputs)["spec"]
    assert front_service["type"] == "NodePort" and front_service["ports"][0]["nodePort"] == 30080
    vllm_service = unwrap(deployment.one(SERVICE, "-vllm-service").inputs)["spec"]
    assert (
        vllm_service["selector"]
        == unwrap(deployment.one(DEPLOYMENT, "-vllm").inputs)["spec"]["selector"]["matchLabels"]
    )
    conf = unwrap(deployment.one("kubernetes:core/v1:ConfigMap", "-front-config").inputs)["data"][
        "nginx.conf"
    ]
    for directive in ("proxy_buffering off;", "proxy_http_version 1.1;", "include api-keys.map;"):
        assert directive in conf
    assert re.search(r"include /etc/glm53-front/rotation/upstream\.con\[f\];", conf)
    keys = deployment.one("kubernetes:core/v1:Secret", "-front-keys").inputs["stringData"]
    assert is_secret(keys), "the key maps must be stored encrypted"
    # With the replica key the pods' guards ask for (tests/test_k8s_guard.py).
    assert set(unwrap(keys)) == {"api-keys.map", "metrics-keys.map", "replica-guard-auth.conf"}
    gate = next(
        r for r in deployment.of_type("pulumi-python:dynamic:Resource") if r.name.endswith("-smoke-gate")
    )
    assert gate.inputs["endpoint"] == FRONT_URL
    assert deployment.outputs["endpoint"] == FRONT_URL


def test_no_docker_container_on_kubernetes(on_k8s: dict[str, Deployment]) -> None:
    for deployment in on_k8s.values():
        assert deployment.of_type("docker:index/container:Container") == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"namespace": "GLM_53", "frontUrl": FRONT_URL}, r"glm:target\.kubernetes\.namespace='GLM_53'"),
        ({"namespace": "glm", "frontUrl": "127.0.0.1:30080"}, r"glm:target\.kubernetes\.frontUrl"),
        ({"namespace": "glm", "frontUrl": FRONT_URL, "frontNodePort": 80}, r"frontNodePort"),
        ({"namespace": "glm", "frontUrl": FRONT_URL, "preStopSeconds": 1}, r"preStopSeconds"),
    ],
)
def test_bad_kubernetes_targets_are_refused_naming_the_key(value: dict[str, Any], message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        build_stack_config({"hardware": "local", "target": {"hosts": [LOCAL_DOCKER], "kubernetes": value}})


# ---- Prometheus on Kubernetes -----------------------------------------------------------------


def test_prometheus_config_and_rules_pass_promtool(on_k8s: dict[str, Deployment], tmp_path: Path) -> None:
    """The real promtool: the config (which loads the rules, by their in-pod path) and the rules."""
    files = unwrap(on_k8s["a800"].one("kubernetes:core/v1:ConfigMap", "-prometheus-config").inputs)["data"]
    config = yaml.safe_load(files["prometheus.yml"])
    assert config["rule_files"] == ["/etc/prometheus/rules.yml"]
    config["rule_files"] = [str(tmp_path / "rules.yml")]
    # The guards' scrape key, as the pod mounts it beside the config (tests/test_k8s_guard.py).
    job = config["scrape_configs"][0]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": "/etc/prometheus/scrape-key"}
    job["authorization"]["credentials_file"] = str(tmp_path / "scrape-key")
    (tmp_path / "scrape-key").write_text("sk-scrape-test\n")
    (tmp_path / "rules.yml").write_text(files["rules.yml"])
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    for args in (
        ["check", "config", str(tmp_path / "prometheus.yml")],
        ["check", "rules", str(tmp_path / "rules.yml")],
    ):
        result = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
    job = config["scrape_configs"][0]
    assert job["file_sd_configs"][0]["files"] == ["/var/lib/glm53-targets/vllm.json"]
    pod = unwrap(on_k8s["a800"].one(DEPLOYMENT, "-prometheus").inputs)["spec"]["template"]["spec"]
    lister = next(c for c in pod["containers"] if c["name"] == "targets")
    assert lister["command"][2:] == [
        "glm53-test",
        "app.kubernetes.io/name=glm53-vllm,app.kubernetes.io/instance=a800",
        str(int(container(on_k8s["a800"], "guard")["ports"][0]["containerPort"])),  # the pods' guard
        "/var/lib/glm53-targets/vllm.json",
        "5",
        "9147",  # the pods' rotation, for the front-rotation job
    ]
    # The several-hosts rules: each alert names the pod (label host) it fired for.
    rules = yaml.safe_load(files["rules.yml"])["groups"][0]["rules"]
    assert any("host" in r["expr"] for r in rules)


def test_the_listers_may_only_list_the_namespace_pods(on_k8s: dict[str, Deployment]) -> None:
    roles = [
        unwrap(r.inputs) for r in on_k8s["local"].of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")
    ]
    # components/host/k8s_targets.py lists them, once per period: no get, no watch (issue 49); the
    # Prometheus pod's listers, and a metered front pod's `routes`.
    assert sorted(r["metadata"]["name"] for r in roles) == ["glm53-front", "glm53-prometheus"]
    for role in roles:
        assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
        assert role["metadata"]["namespace"] == "glm53-test"


def test_the_operator_gets_the_same_rules_as_a_prometheus_rule() -> None:
    deployment = run_program("a800", {"glm:target": k8s_target(prometheusOperator=True)})
    plain = run_program("a800", {"glm:target": k8s_target()})
    rule = next(r for r in deployment.resources if r.name.endswith("-alert-rules"))
    assert rule.inputs["kind"] == "PrometheusRule"
    rules_file = unwrap(plain.one("kubernetes:core/v1:ConfigMap", "-prometheus-config").inputs)["data"][
        "rules.yml"
    ]
    assert unwrap(rule.inputs)["spec"] == yaml.safe_load(rules_file)
    monitor = next(r for r in deployment.resources if r.name.endswith("-pod-monitor"))
    assert unwrap(monitor.inputs)["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "glm53-vllm"
    assert not [r for r in deployment.of_type(DEPLOYMENT) if r.name.endswith("-prometheus")]


def test_the_pods_rotation_reads_as_a_docker_fronts() -> None:
    """The targets lister's rotation (the front-rotation job on the cluster): in while Ready, a
    gate_passed when a pod becomes Ready, gate_failed when it stops, drained when it is deleted;
    the series and labels the page's panels ask for (templates/rotation.sh's)."""
    from components.host.k8s_targets import Rotation

    def pod(name: str, is_ready: bool, deleting: bool = False) -> dict:
        meta: dict = {"name": name, **({"deletionTimestamp": "2026-12-06T00:00:00Z"} if deleting else {})}
        return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": str(is_ready)}]}}

    rotation = Rotation()
    rotation.look([pod("a", False), pod("b", True)], 100.0)
    rotation.look([pod("a", True), pod("b", True)], 105.0)
    rotation.look([pod("a", True), pod("b", False)], 110.0)
    rotation.look([pod("a", True, deleting=True), pod("b", True)], 115.0)
    text = rotation.text()
    for line in (
        'glm_rotation_in{host="a"} 0',
        'glm_rotation_in{host="b"} 1',
        'glm_rotation_events_total{host="a",event="gate_passed"} 1',
        'glm_rotation_events_total{host="a",event="drained"} 1',
        'glm_rotation_events_total{host="b",event="gate_passed"} 2',
        'glm_rotation_events_total{host="b",event="gate_failed"} 1',
        'glm_rotation_last_event_timestamp_seconds{host="b",event="gate_failed"} 110.000',
    ):
        assert line in text.splitlines(), text


def test_the_target_file_lists_running_pods_by_name() -> None:
    from components.host.k8s_targets import targets

    pods = [
        {"metadata": {"name": "glm53-vllm-b"}, "status": {"phase": "Running", "podIP": "198.18.0.7"}},
        {"metadata": {"name": "glm53-vllm-a"}, "status": {"phase": "Running", "podIP": "198.18.0.6"}},
        {"metadata": {"name": "glm53-vllm-c"}, "status": {"phase": "Pending"}},
    ]
    assert targets(pods, 8000) == [
        {"targets": ["198.18.0.6:8000"], "labels": {"host": "glm53-vllm-a"}},
        {"targets": ["198.18.0.7:8000"], "labels": {"host": "glm53-vllm-b"}},
    ]


def test_the_semantic_probe_asks_through_the_front_with_its_own_key(on_k8s: dict[str, Deployment]) -> None:
    deployment = on_k8s["local"]  # the local stack runs the probe (Pulumi.local.yaml's profile)
    probe = unwrap(deployment.one(DEPLOYMENT, "-semantic-probe").inputs)["spec"]["template"]["spec"]
    assert probe["containers"][0]["args"] == [
        "--params", "/etc/semantic-probe/params.json", "--api-key-file", "/etc/semantic-probe/api-key",
    ]  # fmt: skip
    key = deployment.one("kubernetes:core/v1:Secret", "-semantic-probe-key").inputs["stringData"]
    assert is_secret(key) or is_secret(key["api-key"])
    keys_map = unwrap(deployment.one("kubernetes:core/v1:Secret", "-front-keys").inputs["stringData"])[
        "api-keys.map"
    ]
    assert "semantic-probe" in keys_map  # the front admits the probe's key under its client name
    files = unwrap(deployment.one("kubernetes:core/v1:ConfigMap", "-prometheus-config").inputs)["data"]
    jobs = [j["job_name"] for j in yaml.safe_load(files["prometheus.yml"])["scrape_configs"]]
    assert jobs == [
        "vllm",
        "semantic-probe",
        "front-rotation",
        "usage-meter",
    ]  # the meter runs on the cluster too (issue 49)
    assert "semantic-probe" in files["rules.yml"]
    # The probe starts after the gate passed.
    gate = next(r.name for r in deployment.of_type("glm:smoke:SmokeTest"))
    options = deployment.options[
        next(r.name for r in deployment.of_type(DEPLOYMENT) if r.name.endswith("-semantic-probe"))
    ]
    assert gate in {d._name for d in options.depends_on}  # type: ignore[union-attr]


def test_the_front_release_with_the_service_upstream_passes_nginx_t(tmp_path: Path) -> None:
    """The real nginx: the release as mounted in the front's pod (nginx.conf, key maps, and the
    upstream file naming the serving Service), paths moved under tmp_path."""
    from components.kubernetes.front import upstream_conf
    from components.render.nginx_conf import render_front_files

    config = build_stack_config({"hardware": "local", "target": k8s_target()})
    files = render_front_files(
        config.front,
        {"ci": "sk-test-ci-0a6e93030124c2b3"},
        rotation_dir=str(tmp_path / "rotation"),
        runtime_dir=str(tmp_path),
    )
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "rotation").mkdir()
    upstream = upstream_conf("198.19.0.34", 8000)
    (tmp_path / "rotation" / "upstream.conf").write_text(upstream)
    assert upstream.count("server 198.19.0.34:8000 max_fails=0;") == 3
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    result = subprocess.run(
        [nginx, "-t", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path), "-e", "stderr"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # The check can fail: a directive nginx does not know in the upstream file is refused.
    (tmp_path / "rotation" / "upstream.conf").write_text(upstream.replace("keepalive_time", "keepalive_tme"))
    result = subprocess.run(
        [nginx, "-t", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path), "-e", "stderr"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode != 0 and "keepalive_tme" in result.stderr


def test_kubernetes_with_several_hosts_is_refused_naming_the_fix() -> None:
    hosts = [
        LOCAL_DOCKER,
        {"name": "other", "dockerHost": "unix:///run/other.sock", "privateAddress": "10.0.0.2"},
    ]
    target = {"hosts": hosts, "kubernetes": {"namespace": "glm", "frontUrl": FRONT_URL}}
    with pytest.raises(
        (ConfigError, ValueError), match=r"glm:target\.hosts lists 2 hosts with glm:target\.kubernetes"
    ):
        build_stack_config({"hardware": "local", "target": target})


@pytest.mark.parametrize("spelled", ["{{image}}", "{image}"])
def test_the_image_load_command_gets_each_image_quoted(spelled: str) -> None:
    """``{{image}}``, and ``{image}`` as the key was first spelled, fill in the same command."""
    deployment = run_program(
        "local", {"glm:target": k8s_target(imageLoadCommand=f"scripts/k8s/cluster.sh import {spelled}")}
    )
    loads = {r.name: r.inputs for r in deployment.of_type("command:local:Command") if "-load-" in r.name}
    assert sorted(loads) == [
        "local-load-front",
        "local-load-gate",
        "local-load-prometheus",
        "local-load-serving",
    ]
    assert loads["local-load-front"]["create"] == "scripts/k8s/cluster.sh import glm53-local/nginx:bookworm"
    assert loads["local-load-serving"]["create"].startswith("scripts/k8s/cluster.sh import glm53-vllm-sim:")


def test_the_old_image_placeholder_is_read_with_an_advisory_naming_the_new_spelling() -> None:
    old = build_stack_config(
        {"hardware": "local", "target": k8s_target(imageLoadCommand="docker push {image}")}
    )
    assert old.advisories() == [
        "glm:target.kubernetes.imageLoadCommand='docker push {image}': {image} is the old spelling of its "
        "placeholder (still read as the image). Fix: {{image}}, the placeholder style of every template "
        "of the stack: glm:target.kubernetes.imageLoadCommand: 'docker push {{image}}'."
    ]
    new = build_stack_config(
        {"hardware": "local", "target": k8s_target(imageLoadCommand="docker push {{image}}")}
    )
    assert new.advisories() == []


def test_an_image_load_command_naming_another_placeholder_is_refused() -> None:
    with pytest.raises(
        ConfigError,
        match=r"imageLoadCommand='docker push \{\{ref\}\}' names \{\{ref\}\}: the stack fills only \{\{image\}\}",
    ):
        build_stack_config(
            {"hardware": "local", "target": k8s_target(imageLoadCommand="docker push {{ref}}")}
        )
