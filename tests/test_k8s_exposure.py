"""Issue 34 findings 2 and 3 under mocks: what the Kubernetes stack publishes, and how.

A stack that says TLS is served TLS, as on a Docker host: the front's pair, ciphers and protocols,
the guards pinned by the front and Prometheus, the gate and the probe verifying the front's name
(finding 2); a NodePort is a public bind and needs the opt-ins ``bindAddress`` needs (finding 3).
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import pytest
import yaml

from components.config import ConfigError, StackConfig, build_stack_config
from tests.conftest import (
    TEST_API_KEYS,
    Deployment,
    ProgramRefused,
    is_secret,
    run_program,
    stack_config,
    unwrap,
)
from tests.k8s_rendered import DEPLOYMENT, LOCAL_DOCKER, SERVICE, k8s_target
from tests.tls_certs import TestCa

SECRET = "kubernetes:core/v1:Secret"


def local_with(**sections: dict[str, Any]) -> dict[str, Any]:
    """The local stack's glm:<section> values with ``sections``' keys merged in."""
    values = stack_config("local")
    return {f"glm:{name}": {**(values.get(f"glm:{name}") or {}), **keys} for name, keys in sections.items()}


def refused(overrides: dict[str, Any], secrets: dict[str, Any] | None = None) -> str:
    with pytest.raises(ProgramRefused) as info:
        run_program("local", overrides, secrets)
    return str(info.value)


# ---- finding 2: glm:front.tls on Kubernetes is TLS --------------------------------------------

TLS_NAME = "api.glm.test"
TLS_URL = "https://127.0.0.1:30443/v1"


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The local stack with a TLS front on Kubernetes and on a Docker host, a test CA's certificate."""
    ca = TestCa.create(tmp_path_factory.mktemp("ca"), "GLM k8s test CA")
    cert, key = ca.issue([f"DNS:{TLS_NAME}", "IP:127.0.0.1"])
    secrets = {"glm:tlsCertificate": cert, "glm:tlsKey": key}
    front = local_with(front={"tls": True, "tlsCaCertificate": ca.certificate})
    target = k8s_target(frontNodePort=30443, frontUrl=TLS_URL)
    return {
        "ca": ca,
        "pair": (cert, key),
        "k8s": run_program("local", {"glm:target": target, **front}, secrets),
        "docker": run_program("local", front, secrets),
    }


def secret_files(deployment: Deployment, name: str) -> dict[str, str]:
    [found] = [r for r in deployment.of_type(SECRET) if unwrap(r.inputs)["metadata"]["name"] == name]
    assert is_secret(found.inputs["stringData"]), f"{name} must be stored encrypted"
    return dict(unwrap(found.inputs["stringData"]))


def test_the_front_serves_the_docker_fronts_tls(tls_stack: dict[str, Any]) -> None:
    """Before: ``listen 8080;`` and no certificate in the Secret while the stack said TLS. Now the
    same pair, ciphers and protocols as the Docker front of the same config."""
    k8s, docker = tls_stack["k8s"], tls_stack["docker"]
    conf = unwrap(k8s.one("kubernetes:core/v1:ConfigMap", "-front-config").inputs)["data"]["nginx.conf"]
    assert "listen 8080 ssl;" in conf
    reloads = [r for r in docker.of_type("pulumi-python:dynamic:Resource") if "nginx_conf" in r.inputs]
    docker_conf = next(unwrap(r.inputs)["nginx_conf"] for r in reloads if r.name.endswith("-front-config"))
    tls_lines = [line.strip() for line in docker_conf.splitlines() if line.strip().startswith("ssl_")]
    assert len(tls_lines) >= 4 and tls_lines == [
        line.strip() for line in conf.splitlines() if line.strip().startswith("ssl_")
    ]
    files = secret_files(k8s, "glm53-front-keys")
    assert (files["tls.crt"], files["tls.key"]) == tls_stack["pair"]
    service = unwrap(k8s.one(SERVICE, "-front-service").inputs)
    assert service["metadata"]["annotations"] == {"glm53.tls": "on"}  # no plain-HTTP opt-in needed


def location(conf: str, path: str) -> str:
    """The body of nginx.conf's ``location = path`` (empty where the conf has none)."""
    start = conf.find(f"location = {path} {{")
    return "" if start < 0 else conf[start : conf.find("}", start)]


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_the_front_is_ready_while_it_listens_whatever_the_pods_behind_it_do(
    tls: bool, tls_stack: dict[str, Any]
) -> None:
    """CI, 2026-12-04: the front's readiness was its ``/healthz``, which nginx passes to the serving
    pods. On a loaded node, and during a wrong-answer roll, the kubelet took the front (one pod, the
    stack's only door) out of its Service, and clients met reset connections (144 of 276) instead of
    the front's 503 with Retry-After. An nginx pod (the front, each guard) is Ready while it
    accepts connections; its probe never goes through to vLLM."""
    k8s = tls_stack["k8s"] if tls else run_program("local", {"glm:target": k8s_target()})
    conf = unwrap(k8s.one("kubernetes:core/v1:ConfigMap", "-front-config").inputs)["data"]["nginx.conf"]
    assert "proxy_pass" in location(conf, "/healthz")  # what the probe was: through to the pods
    front = unwrap(k8s.one(DEPLOYMENT, "-front").inputs)["spec"]["template"]["spec"]["containers"][0]
    serving = unwrap(k8s.one(DEPLOYMENT, "-vllm").inputs)["spec"]["template"]["spec"]["containers"]
    [guard] = [c for c in serving if c["name"] == "guard"]
    for nginx in (front, guard):
        probe = nginx["readinessProbe"]
        ports = {p["name"] for p in nginx["ports"]}
        assert probe.get("tcpSocket", {}).get("port") in ports or (
            "httpGet" in probe and "proxy_pass" not in location(conf, probe["httpGet"]["path"])
        ), (nginx["name"], probe)
        # A starved kubelet's connect is slow, not a pod that stopped listening (liveness argues the same).
        assert probe.get("timeoutSeconds", 1) >= 5, (nginx["name"], probe)


def test_the_front_speaks_tls_to_the_guards_pinning_their_certificate(tls_stack: dict[str, Any]) -> None:
    k8s = tls_stack["k8s"]
    conf = unwrap(k8s.one("kubernetes:core/v1:ConfigMap", "-front-config").inputs)["data"]["nginx.conf"]
    # The meter names the request's upstream (a pod through glm_pods, else the Service): TLS either way.
    assert "proxy_pass https://$glm_upstream/v1/chat/completions;" in conf
    front, guard = secret_files(k8s, "glm53-front-keys"), secret_files(k8s, "glm53-vllm-guard")
    snippet = front["replica-guard-auth.conf"]
    for line in ("proxy_ssl_verify on;", "proxy_ssl_name glm-replica-guard.invalid;",
                 "proxy_ssl_trusted_certificate replica-guard-ca.crt;"):  # fmt: skip
        assert line in snippet
    assert front["replica-guard-ca.crt"] == guard["tls.crt"]
    assert "listen 8080 ssl;" in guard["nginx.conf"]
    # Prometheus pins the same certificate by the same name.
    files = unwrap(k8s.one("kubernetes:core/v1:ConfigMap", "-prometheus-config").inputs)["data"]
    job = yaml.safe_load(files["prometheus.yml"])["scrape_configs"][0]
    assert job["scheme"] == "https"
    assert job["tls_config"] == {
        "ca_file": "/etc/prometheus/replica-ca.crt",
        "server_name": "glm-replica-guard.invalid",
    }
    assert secret_files(k8s, "glm53-scrape-key")["replica-ca.crt"] == guard["tls.crt"]


def test_the_gate_and_the_probe_verify_the_fronts_name(tls_stack: dict[str, Any]) -> None:
    k8s, ca = tls_stack["k8s"], tls_stack["ca"]
    [gate] = [r for r in k8s.of_type("pulumi-python:dynamic:Resource") if r.name.endswith("-smoke-gate")]
    assert gate.inputs["endpoint"] == TLS_URL
    assert unwrap(gate.inputs["tls"])["server_name"] == TLS_NAME
    assert unwrap(gate.inputs["tls"])["ca"] == ca.certificate
    params = json.loads(
        unwrap(k8s.one("kubernetes:core/v1:ConfigMap", "-semantic-probe-params").inputs)["data"][
            "params.json"
        ]
    )
    assert params["endpoint"].startswith("https://") and params["metrics_url"].startswith("https://")
    assert (params["tls"]["server_name"], params["tls"]["ca"]) == (TLS_NAME, ca.certificate)


def test_a_tls_front_asked_over_plain_http_is_refused(tls_stack: dict[str, Any]) -> None:
    cert, key = tls_stack["pair"]
    message = refused(
        {"glm:target": k8s_target(), **local_with(front={"tls": True})},
        {"glm:tlsCertificate": cert, "glm:tlsKey": key},
    )
    assert "glm:target.kubernetes.frontUrl='http://127.0.0.1:30080/v1' with glm:front.tls=true" in message
    assert "Fix: https://" in message and "BEGIN" not in message


# ---- finding 3: a NodePort is a public bind --------------------------------------------------

LOOPBACK_PLAIN = {
    "front": {"bindAddress": "127.0.0.1", "tls": False},
    "monitoring": {"bindAddress": "127.0.0.1"},
}


def test_node_ports_without_the_opt_ins_are_refused_both_at_once() -> None:
    """The issue's config: both NodePorts, both bind addresses 127.0.0.1, no TLS, no opt-in. It was
    accepted: a plain-HTTP API and an unauthenticated Prometheus on every node."""
    target = k8s_target(frontNodePort=30080, prometheusNodePort=30090)
    message = refused({"glm:target": target, **local_with(**LOOPBACK_PLAIN)})
    assert (
        "glm:target.kubernetes.frontNodePort=30080 serves the API over plain HTTP on every node's addresses"
        in message
    )
    assert "glm:front.allowPlainHttp: true" in message
    assert (
        "glm:target.kubernetes.prometheusNodePort=30090 publishes Prometheus on every node's addresses"
        in message
    )
    assert "kubectl port-forward -n glm53-test svc/glm53-prometheus 9090" in message
    assert "glm:monitoring.allowPublicBind: true" in message


@pytest.mark.parametrize(
    ("node_port", "opt_in", "key"),
    [
        ("frontNodePort", {"front": {"allowPlainHttp": True}}, "prometheusNodePort"),
        ("prometheusNodePort", {"monitoring": {"allowPublicBind": True}}, "frontNodePort"),
    ],
)
def test_each_opt_in_opens_only_its_own_node_port(node_port: str, opt_in: dict[str, Any], key: str) -> None:
    sections = {name: {**LOOPBACK_PLAIN[name], **opt_in.get(name, {})} for name in LOOPBACK_PLAIN}
    run_program("local", {"glm:target": k8s_target(**{node_port: 30080}), **local_with(**sections)})
    message = refused({"glm:target": k8s_target(**{node_port: 30080, key: 30090}), **local_with(**sections)})
    assert f"glm:target.kubernetes.{key}=30090" in message and node_port not in message


def test_opted_in_node_ports_warn_and_mark_their_services() -> None:
    """The opt-ins reach the objects (annotations, for the policy pack) and every preview warns."""
    from components.config import build_stack_config

    sections = {
        "front": {**LOOPBACK_PLAIN["front"], "allowPlainHttp": True},
        "monitoring": {**LOOPBACK_PLAIN["monitoring"], "allowPublicBind": True},
    }
    target = k8s_target(frontNodePort=30080, prometheusNodePort=30090)
    config = build_stack_config({"hardware": "local", "target": target, **sections})
    warnings = "\n".join(config.advisories())
    assert (
        "the API on every node's port 30080 (glm:target.kubernetes.frontNodePort) is plain HTTP" in warnings
    )
    assert "Prometheus on every node's port 30090 (glm:target.kubernetes.prometheusNodePort)" in warnings
    deployment = run_program("local", {"glm:target": target, **local_with(**sections)})
    services = {r.name: unwrap(r.inputs) for r in deployment.of_type(SERVICE)}
    assert services["local-front-service"]["metadata"]["annotations"] == {"glm53.plain-http": "accepted"}
    assert services["local-prometheus-service"]["metadata"]["annotations"] == {
        "glm53.public-bind": "accepted"
    }


# ---- on the cluster no bindAddress is read: the plain-HTTP and public-bind rules name the NodePorts


def built(raw: dict[str, Any], stack: str = "local") -> StackConfig:
    return build_stack_config(raw, stack=stack)


def refused_config(raw: dict[str, Any], stack: str = "local") -> str:
    with pytest.raises(ConfigError) as info:
        build_stack_config(raw, stack=stack)
    return str(info.value)


def a800_on(target: dict[str, Any], **front: Any) -> dict[str, Any]:
    """The a800 stack file on ``target``, its front's plain-HTTP opt-in replaced by ``front``: its
    profile binds the front to every address of a Docker host."""
    raw = {key.removeprefix("glm:"): value for key, value in stack_config("a800").items()}
    kept = {key: value for key, value in raw["front"].items() if key != "allowPlainHttp"}
    return {**raw, "target": target, "front": {**kept, **front}}


def test_on_the_cluster_plain_http_is_the_front_node_ports_never_the_bind_address() -> None:
    """Before: a ClusterIP front of the a800 file was refused naming glm:front.bindAddress=0.0.0.0
    and "bind to 127.0.0.1", a key the cluster does not read (its warning says so), while the local
    file (loopback) was accepted; an opted-in NodePort warned of "the API on 0.0.0.0:8008" too."""
    on_docker = refused_config(a800_on({"hosts": [LOCAL_DOCKER]}), "a800")
    bind = built(a800_on({"hosts": [LOCAL_DOCKER]}, allowPlainHttp=True), "a800").front
    assert f"glm:front.bindAddress={bind.bind_address} serves the API over plain HTTP" in on_docker

    built(a800_on(k8s_target()), "a800")  # a ClusterIP: no public bind, no opt-in to ask for
    message = refused_config(a800_on(k8s_target(frontNodePort=30080)), "a800")
    assert "glm:target.kubernetes.frontNodePort=30080 serves the API over plain HTTP" in message
    assert "glm:front.allowPlainHttp: true" in message
    assert f"glm:front.bindAddress={bind.bind_address}" not in message and "bind to" not in message
    opted = built(a800_on(k8s_target(frontNodePort=30080), allowPlainHttp=True), "a800")
    warnings = "\n".join(opted.advisories())
    assert "the API on every node's port 30080 (glm:target.kubernetes.frontNodePort)" in warnings
    assert f"{bind.bind_address}:{bind.port}" not in warnings


def test_on_the_cluster_a_public_prometheus_is_its_node_port_never_its_bind_address() -> None:
    """glm:monitoring.bindAddress is warned about as not read on the cluster (docs/scaling.md), never
    refused with a Docker host's fix (`ssh -L`)."""
    public = {"hardware": "local", "monitoring": {"bindAddress": "10.0.0.5"}}
    on_docker = refused_config({**public, "target": {"hosts": [LOCAL_DOCKER]}})
    assert "glm:monitoring.bindAddress='10.0.0.5' publishes Prometheus beyond loopback" in on_docker

    cluster_ip = built({**public, "target": k8s_target()})
    [warning] = [a for a in cluster_ip.advisories() if "glm:monitoring.bindAddress" in a]
    assert "is not read on Kubernetes" in warning
    message = refused_config({**public, "target": k8s_target(prometheusNodePort=30090)})
    assert "glm:target.kubernetes.prometheusNodePort=30090 publishes Prometheus" in message
    assert "beyond loopback" not in message and "ssh -L" not in message
    opted_in = {**public, "monitoring": {**public["monitoring"], "allowPublicBind": True}}
    warnings = "\n".join(built({**opted_in, "target": k8s_target(prometheusNodePort=30090)}).advisories())
    assert "Prometheus on every node's port 30090" in warnings and "10.0.0.5:" not in warnings


def test_a_client_gets_its_answer_over_tls_through_the_tls_guard(tls_stack: dict[str, Any]) -> None:
    """Both releases as the mocks recorded them in two real nginx: the client verifies the front's
    name against the test CA, the front verifies the guard's pinned certificate (a real pair from
    components/serving/replica_credentials.self_signed in place of the mocks' placeholder); plain HTTP to the
    front's port reaches nothing."""
    import httpx

    from components.serving.replica_credentials import self_signed
    from tests.front_rig import RecordingUpstream
    from tests.k8s_guarded import front_and_guard

    ca = tls_stack["ca"]
    with front_and_guard(tls_stack["k8s"], guard_pair=self_signed([])) as front:
        verify = ssl.create_default_context(cadata=ca.certificate)
        with httpx.Client(verify=verify, trust_env=False) as client:
            url = f"https://127.0.0.1:{front}/v1/chat/completions"
            headers = {"Authorization": f"Bearer {TEST_API_KEYS['ci']}"}
            resp = client.post(url, json={}, headers=headers, extensions={"sni_hostname": TLS_NAME})
            assert resp.status_code == 200, resp.text
            # Plain HTTP on the TLS port: nginx's refusal, never the API.
            plain = httpx.post(f"http://127.0.0.1:{front}/v1/chat/completions", headers=headers, timeout=5)
            assert plain.status_code == 400
    assert [(m, p) for m, p, _ in RecordingUpstream.seen] == [("POST", "/v1/chat/completions")]


def test_the_tls_stack_passes_the_policy_pack(tls_stack: dict[str, Any]) -> None:
    """The front's NodePort needs no plain-HTTP opt-in: its Service says TLS (rule 10)."""
    from tests.policy_pack import gp

    resources = [gp.Resource(r.type, r.name, gp.normalize(r.inputs)) for r in tls_stack["k8s"].resources]
    rules = [r for r in gp.RULES if r.name != "volumes-retained"]
    assert [(rule.name, m) for res in resources for rule in rules for m in rule.check(res, {})] == []
    front = next(r for r in resources if r.name.endswith("-front-service"))
    assert front.props["spec"]["type"] == "NodePort"
