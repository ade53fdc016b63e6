"""The probe's config rules, its key, its image context and its container, without a Docker engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components.config import ConfigError, SecretInputs, build_stack_config, check_api_keys
from components.docker.semantic_probe import SemanticProbeArgs
from components.render.replica_guard import TLS_NAME
from components.secrets import _GeneratedKeyProvider
from components.serving.spec import render_serving
from components.verification.semantic_probe_image import PROJECT_DIR, build_context, context_files
from components.verification.semantic_probe_spec import KEY_PATH, PARAMS_PATH, ProbeReplica, SemanticProbeSpec
from tests.conftest import (
    GATE_API_TEST_KEY,
    PROBE_TEST_KEY,
    REPLICA_TEST_CERTIFICATE,
    TEST_API_KEYS,
    Deployment,
    is_secret,
    run_program,
    unwrap,
)
from tests.tls_certs import TestCa

KEYS = {"ops": "sk-test-ops-cca224104c7a268a"}


# ---- config: refused before anything is created -----------------------------------------------


@pytest.mark.parametrize(
    ("probe", "message"),
    [
        ({"intervalSeconds": 0}, r"glm:semanticProbe\.intervalSeconds=0 s: the probe would never run"),
        ({"intervalSeconds": -5}, r"glm:semanticProbe\.intervalSeconds=-5"),
        (
            {"failuresBeforeAlert": 0},
            r"glm:semanticProbe\.failuresBeforeAlert=0: an alert needs at least one",
        ),
        (
            {"intervalSeconds": 20, "timeoutSeconds": 15},
            r"intervalSeconds=20 is shorter than 2 x timeoutSeconds=15 = 30 s",
        ),
        ({"clientName": "probe key"}, r"glm:semanticProbe\.clientName='probe key' is not a client name"),
    ],
)
def test_bad_probe_config_is_refused(probe: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_stack_config({"hardware": "local", "semanticProbe": probe})


def test_a_user_key_named_like_the_probe_is_refused_with_the_fix() -> None:
    keys = {**KEYS, "semantic-probe": "sk-test-probe-c9f2e194bfbb0ad00b5b"}
    with pytest.raises(ConfigError) as info:
        build_stack_config({"hardware": "local"}, SecretInputs(api_keys=keys))
    assert "glm:apiKeys.semantic-probe is the semantic probe's client name" in str(info.value)
    assert "`scripts/pulumi.sh config rm --path 'glm:apiKeys.semantic-probe' -s <stack>`" in str(info.value)
    # Another client name for the probe, or no probe, and the same keys pass.
    build_stack_config(
        {"hardware": "local", "semanticProbe": {"clientName": "probe"}}, SecretInputs(api_keys=keys)
    )
    build_stack_config(
        {"hardware": "local", "semanticProbe": {"enabled": False}}, SecretInputs(api_keys=keys)
    )


def test_a_guarded_replica_without_the_replica_key_is_refused_in_the_args() -> None:
    config = build_stack_config({"hardware": "local"})
    key = pulumi.Output.from_input(PROBE_TEST_KEY)
    args = {
        "spec": SemanticProbeSpec.of(config, render_serving(config)),
        "network_name": "net",
        "front_host": "front",
        "upstream": "vllm:8000",
        "api_key": key,
        "replicas": (ProbeReplica("box2", "10.0.0.2:8000", guarded=True),),
    }
    with pytest.raises(
        ValueError, match="a guarded replica needs the stack's replica key and the guards' scrape key"
    ):
        SemanticProbeArgs(**args)
    with pytest.raises(ValueError, match="scrape key"):
        SemanticProbeArgs(**args, replica_key=key)
    assert SemanticProbeArgs(**args, replica_key=key, scrape_key=key).replica_key is key


def test_production_defaults() -> None:
    probe = build_stack_config({"hardware": "local"}).semantic_probe
    assert (probe.enabled, probe.interval_seconds, probe.failures_before_alert) == (True, 60, 3)
    assert (probe.timeout_seconds, probe.max_tokens, probe.client_name) == (15, 256, "semantic-probe")
    assert probe.silent_after_seconds == 150


# ---- the key ----------------------------------------------------------------------------------


def test_the_key_is_generated_once_and_kept() -> None:
    provider = _GeneratedKeyProvider()
    props = {"client_name": "semantic-probe", "prefix": "sk-probe-", "key": None}
    created = provider.create(props)
    key = created.outs["key"]
    assert key.startswith("sk-probe-") and not check_api_keys({"semantic-probe": key})
    assert provider.create(props).outs["key"] != key
    olds = created.outs
    assert not provider.diff(created.id, olds, props).changes
    renamed = {**props, "client_name": "probe"}
    assert provider.diff(created.id, olds, renamed).changes
    assert provider.update(created.id, olds, renamed).outs == {**renamed, "key": key}


# ---- the image context ------------------------------------------------------------------------


def test_the_image_carries_the_gate_itself_and_its_packages() -> None:
    files = context_files()
    for module in ("components/gate/checks.py", "components/gate/metrics.py", "components/gate/settings.py"):
        assert files[f"app/{module}"] == (PROJECT_DIR / module).read_bytes()
    # Only the gate's runtime: neither Pulumi's resources nor the stack configuration.
    for module in (
        "components/verification/smoke_gate.py",
        "components/config/__init__.py",
        "policy/glm_policies/__init__.py",
    ):
        assert f"app/{module}" not in files
    packages = {path.split("/")[1] for path in files if path.startswith("site-packages/")}
    assert {"httpx", "h11", "anyio", "idna", "certifi", "prometheus_client", "pydantic_core"} <= packages
    assert not [p for p in files if "__pycache__" in p or p.endswith(".pyc")]
    context, tag = build_context()
    assert (
        context.startswith(".build/semantic-probe-")
        and tag == f"glm53-semantic-probe:{context.rsplit('-', 1)[1]}"
    )
    assert (PROJECT_DIR / context / "Dockerfile").read_bytes() == files["Dockerfile"]


def test_the_runtime_in_the_image_imports_neither_pulumi_nor_the_stack_configuration(tmp_path: Path) -> None:
    """Issue 28: the image's modules alone, imported as the probe and the in-pod check run them."""
    for name, content in context_files().items():
        if name.startswith("app/"):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_bytes(content)
    code = (
        "import sys\n"
        "sys.path.insert(0, '.')\n"
        "import components.gate.__main__, components.semantic_probe.__main__\n"
        "import components.semantic_probe.ejection\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pulumi', 'policy', 'zxcvbn')"
        " or m.startswith('components.config')))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], cwd=tmp_path / "app", capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ---- the program under mocks ------------------------------------------------------------------


def container(deployment: Deployment, suffix: str) -> dict[str, Any]:
    return deployment.one("docker:index/container:Container", suffix).inputs


def prometheus_files(deployment: Deployment) -> dict[str, str]:
    """Prometheus' files as its release delivers them (components/docker/prometheus_release.py)."""
    release = deployment.one("pulumi-python:dynamic:Resource", "-monitoring-files").inputs
    return dict(unwrap(release)["contents"])


def uploads(inputs: dict[str, Any]) -> dict[str, Any]:
    return {u["file"]: u["content"] for u in unwrap(inputs["uploads"])}


def test_the_local_stack_runs_the_probe_through_the_front(deployed: dict[str, Deployment]) -> None:
    local = deployed["local"]
    probe = container(local, "-semantic-probe-container")
    assert probe["name"] == "glm53-flash-local-semantic-probe"
    assert probe["networksAdvanced"] == [{"name": "glm53-flash-local-net"}]
    assert "ports" not in probe  # reached by Prometheus on the private network only
    files = uploads(probe)
    params = json.loads(files[PARAMS_PATH])
    assert params["endpoint"] == "http://glm53-flash-local-nginx:8080/v1"
    assert params["metrics_url"] == "http://vllm:8000/metrics"
    assert (params["interval_seconds"], params["failures_before_alert"]) == (60, 3)
    assert params["smoke"]["max_tokens"] == 256 and params["smoke"]["request_timeout_seconds"] == 15
    assert params["smoke"]["expected_answer"] == "221"
    assert files[KEY_PATH] == PROBE_TEST_KEY
    assert is_secret(probe["uploads"]) or is_secret(probe["uploads"][1]["content"])  # stored encrypted
    image = local.one("docker:index/image:Image", "-semantic-probe-image").inputs
    assert image["build"]["args"] == {"BASE_IMAGE": "glm53-local/python:bookworm"}
    # The front knows the probe's key under its own name, beside the users' keys.
    front = unwrap(local.one("pulumi-python:dynamic:Resource", "-front-config").inputs)
    assert sorted(front["api_key_names"]) == sorted(["semantic-probe", "smoke-gate", *TEST_API_KEYS])
    key_map = front["secret_files"]["api-keys.map"]
    assert '"semantic-probe";' in key_map and PROBE_TEST_KEY in key_map
    # The gate has its own key too (issue 46: never a user's); Prometheus scrapes the probe.
    gate = local.one("pulumi-python:dynamic:Resource", "-smoke-gate").inputs
    assert unwrap(gate["api_key"]) == GATE_API_TEST_KEY and GATE_API_TEST_KEY in key_map
    prometheus = prometheus_files(local)["prometheus.yml"]
    assert "glm53-flash-local-semantic-probe:9101" in prometheus
    assert local.outputs["semanticProbe"] == "glm53-flash-local-semantic-probe"
    # Its container starts after the gate passed; its image is built while the gates run (only
    # after the preflight, like everything on the host).
    depends = local.options["local-semantic-probe-container"].depends_on
    assert any(getattr(d, "_name", "") == "local-smoke" for d in depends)
    probe = local.options["local-semantic-probe"].depends_on
    assert [getattr(d, "_name", "") for d in probe] == ["local-preflight"]


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090"])
def test_hardware_stacks_run_it_too(deployed: dict[str, Deployment], stack: str) -> None:
    probe = container(deployed[stack], "-semantic-probe-container")
    params = json.loads(uploads(probe)[PARAMS_PATH])
    served = {"a800": "zai-org/GLM-5.3-Flash", "ascend": "glm5.3-flash", "rtx5090": "glm-5.3-flash"}
    assert params["served_name"] == served[stack]
    image = deployed[stack].one("docker:index/image:Image", "-semantic-probe-image").inputs
    assert image["build"]["args"] == {"BASE_IMAGE": "python:3.11-slim"}


def test_disabled_means_no_key_no_container_no_rules() -> None:
    off = run_program("local", overrides={"glm:semanticProbe": {"enabled": False}})
    assert not [r.name for r in off.resources if "semantic-probe" in r.name]
    front = unwrap(off.one("pulumi-python:dynamic:Resource", "-front-config").inputs)
    assert "semantic-probe" not in front["api_key_names"]
    assert "semantic-probe" not in front["secret_files"]["api-keys.map"]
    rules = prometheus_files(off)["rules.yml"]
    assert "GlmModelAnswersWrong" not in rules
    assert "semanticProbe" not in off.outputs


@pytest.fixture(scope="module")
def front_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestCa, str, str]:
    """A test CA (the real openssl CLI) and the front's pair it signed, for a name no client address is."""
    ca = TestCa.create(tmp_path_factory.mktemp("ca"), "GLM stack CA")
    return (ca, *ca.issue(["DNS:glm-front.test", "DNS:*.glm.test"]))


def test_a_tls_front_is_probed_and_gated_by_its_certificates_name(
    front_pair: tuple[TestCa, str, str],
) -> None:
    ca, cert, key = front_pair
    tls = run_program(
        "local",
        overrides={"glm:front": {"tls": True, "tlsCaCertificate": ca.certificate}},
        secrets={"glm:tlsCertificate": cert, "glm:tlsKey": key},
    )
    params = json.loads(uploads(container(tls, "-semantic-probe-container"))[PARAMS_PATH])
    # The front by its container name, verifying the certificate's first name against the stack's CA.
    assert params["endpoint"] == "https://glm53-flash-local-nginx:8080/v1"
    assert (params["tls"]["server_name"], params["tls"]["ca"]) == ("glm-front.test", ca.certificate)
    assert params["tls"]["trust"] == "glm:front.tlsCaCertificate"
    # One host: its replica is vLLM on the private network, unguarded and in plain HTTP.
    assert params["metrics_url"] == "http://vllm:8000/metrics"
    assert [(r["host"], r["endpoint"], r.get("tls")) for r in params["replicas"]] == [
        ("localhost", "http://vllm:8000/v1", None)
    ]
    gate = unwrap(tls.one("pulumi-python:dynamic:Resource", "-smoke-gate").inputs)
    assert gate["endpoint"] == "https://127.0.0.1:8080/v1"  # the gate's own way in, not the name
    assert gate["tls"] == params["tls"]
    assert tls.outputs["semanticProbe"] == "glm53-flash-local-semantic-probe"
    rules = prometheus_files(tls)["rules.yml"]
    assert "GlmModelAnswersWrong" in rules


def test_a_tls_stacks_replicas_are_probed_through_their_guards(front_pair: tuple[TestCa, str, str]) -> None:
    from tests.multihost_stacks import THREE, target

    _ca, cert, key = front_pair
    several = run_program(
        "a800",
        overrides={"glm:target": target(*THREE), "glm:front": {"tls": True, "tlsName": "api.glm.test"}},
        secrets={"glm:tlsCertificate": cert, "glm:tlsKey": key},
    )
    params = json.loads(uploads(container(several, "-semantic-probe-container"))[PARAMS_PATH])
    assert params["tls"]["server_name"] == "api.glm.test" and params["tls"]["ca"] is None  # the system's CAs
    replicas = {r["host"]: r for r in params["replicas"]}
    assert list(replicas) == ["gpu01", "gpu02", "gpu03"]
    # With TLS the front's own replica is guarded too: every replica over TLS, with the replica key.
    for host, address in [("gpu02", "10.0.0.12:8000"), ("gpu03", "10.0.0.13:8000")]:
        assert replicas[host]["endpoint"] == f"https://{address}/v1"
        assert replicas[host]["metrics_url"] == f"https://{address}/metrics"
    assert all(r["replica_key"] and r["endpoint"].startswith("https://") for r in replicas.values())
    assert all(r["tls"]["server_name"] == TLS_NAME for r in replicas.values())
    assert all(r["tls"]["ca"] == REPLICA_TEST_CERTIFICATE for r in replicas.values())
    assert params["replica_key_file"] == "/etc/semantic-probe/replica-key"
    assert params["scrape_key_file"] == "/etc/semantic-probe/scrape-key"


def test_the_context_is_not_in_git() -> None:
    assert "/.build/" in (Path(PROJECT_DIR) / ".gitignore").read_text().split()


def test_the_app_files_are_all_the_probe_imports(tmp_path: Path) -> None:
    """What the image's build step checks, without Docker: the probe's modules import from the
    context's own files and packages only (a module missing from APP_FILES fails here first)."""
    for rel, content in context_files().items():
        if rel.startswith("app/"):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_bytes(content)
    site = [p for p in sys.path if p.endswith("site-packages")]
    check = subprocess.run(
        [sys.executable, "-I", "-c",
         f"import sys; sys.path[:0] = [{str(tmp_path / 'app')!r}, *{site!r}]; import components.semantic_probe.service"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_the_probe_mounts_nothing_of_the_front_but_the_requests_volume(
    deployed: dict[str, Deployment],
) -> None:
    """Issue 23: no Docker socket, no host path, none of the front's config: one named volume,
    which the front mounts at its requests directory and runs the request loop over."""
    local = deployed["local"]
    probe = container(local, "-semantic-probe-container")
    front = container(local, "-front-nginx")
    volume = "glm53-flash-local-rotation-requests"
    assert unwrap(probe["volumes"]) == [
        {"volumeName": volume, "containerPath": "/run/glm53/rotation-requests"}
    ]
    assert not any(k in probe for k in ("mounts", "privileged", "capabilities", "devices"))
    assert "docker.sock" not in json.dumps(unwrap(probe), default=str)
    assert unwrap(front["volumes"]) == [
        {"volumeName": volume, "containerPath": "/etc/nginx/glm/rotation-requests"},
        # The usage meter's counters, which outlive the front container: nothing the probe reaches.
        {"volumeName": "glm53-flash-local-nginx-usage", "containerPath": "/var/lib/glm53-usage"},
    ]
    command = unwrap(front["command"])[0]
    assert "rotation-requests.sh &" in command
    assert command.endswith("exec nginx -c /etc/nginx/glm/current/nginx.conf -e stderr -g 'daemon off;'")
    params = json.loads(uploads(probe)[PARAMS_PATH])
    assert params["requests_dir"] == "/run/glm53/rotation-requests"
    assert [(r["host"], r["replica_key"]) for r in params["replicas"]] == [
        ("localhost", False)
    ]  # the local stack's one host (glm:target)
    assert params["replica_key_file"] is None and params["scrape_key_file"] is None


def test_eject_replicas_false_means_alerts_only_and_no_mount() -> None:
    alerts_only = run_program("local", overrides={"glm:semanticProbe": {"ejectReplicas": False}})
    probe = container(alerts_only, "-semantic-probe-container")
    assert "volumes" not in probe
    assert json.loads(uploads(probe)[PARAMS_PATH])["requests_dir"] is None
