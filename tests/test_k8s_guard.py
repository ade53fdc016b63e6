"""Issue 34 finding 1 under mocks: no pod of the cluster uses vLLM without the stack's credential.

vLLM listens on its pod's loopback; the pod's one port is its guard's (components/kubernetes/guard.py),
whose release (rendered by the program, read off the Secret the mocks recorded) runs here in the
real ``nginx`` before a recording upstream: no key, another key or the scrape key on an inference
route gets the 401; the replica key the front's release sends gets through. On a cluster that
enforces it, a NetworkPolicy admits only the stack's front, Prometheus and probe.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.conftest import (
    PROBE_TEST_KEY,
    REPLICA_SCRAPE_TEST_KEY,
    REPLICA_TEST_KEY,
    TEST_API_KEYS,
    Deployment,
    run_program,
    unwrap,
)
from tests.front_rig import RecordingUpstream, recording_upstream
from tests.guard_rig import nginx, request
from tests.k8s_guarded import front_and_guard, named_secret
from tests.k8s_rendered import DEPLOYMENT, SERVICE, container, flag, k8s_target, pod_spec


@pytest.fixture(scope="module")
def stacks() -> dict[str, Deployment]:
    return {s: run_program(s, {"glm:target": k8s_target()}) for s in ("a800", "ascend", "local")}


@pytest.mark.parametrize("stack", ["a800", "ascend", "local"])
def test_vllm_listens_on_the_pod_loopback_and_only_the_guard_is_published(
    stacks: dict[str, Deployment], stack: str
) -> None:
    deployment = stacks[stack]
    vllm = container(deployment, "vllm")
    # The ascend seed sets --host=0.0.0.0 (Docker's private network): replaced, not doubled.
    assert [a for a in vllm["args"] if a.startswith("--host")] == ["--host=127.0.0.1"]
    published = [(c["name"], p) for c in pod_spec(deployment)["containers"] for p in c.get("ports", [])]
    assert [(name, p["name"]) for name, p in published] == [("guard", "guard")]
    service = unwrap(deployment.one(SERVICE, "-vllm-service").inputs)["spec"]
    assert service.get("type", "ClusterIP") == "ClusterIP"
    assert [p["targetPort"] for p in service["ports"]] == ["guard"]
    # The kubelet's checks run inside the container: its HTTP probes would meet no listener.
    for probe in ("startupProbe", "livenessProbe"):
        assert "httpGet" not in vllm[probe] and "exec" in vllm[probe], probe


def test_the_guard_release_asks_for_the_stacks_credential(stacks: dict[str, Deployment]) -> None:
    """The real nginx with the release the pods mount, the Service's traffic as a recording upstream."""
    deployment = stacks["local"]
    files = named_secret(deployment, "glm53-vllm-guard")
    conf = files["nginx.conf"]
    port = flag(container(deployment, "vllm")["args"], "--port")
    assert f"server 127.0.0.1:{port};" in conf and "listen 8080;" in conf
    mount = next(m for m in container(deployment, "guard")["volumeMounts"] if m["name"] == "guard")
    assert f"{mount['mountPath']}/nginx.conf" in container(deployment, "guard")["command"]
    front_sends = named_secret(deployment, "glm53-front-keys")["replica-guard-auth.conf"]
    assert f'proxy_set_header Authorization "Bearer {REPLICA_TEST_KEY}";' in front_sends
    with recording_upstream() as upstream:
        local = {
            name: text.replace("listen 8080;", "listen 127.0.0.1:{port};")
            .replace(f"server 127.0.0.1:{port};", f"server 127.0.0.1:{upstream};")
            .replace("/tmp", "{dir}")
            for name, text in files.items()
        }
        with nginx(local) as (guard, _):
            for headers in ({}, {"Authorization": f"Bearer {PROBE_TEST_KEY}"}):
                for method, path in (("POST", "/v1/chat/completions"), ("GET", "/metrics")):
                    assert request(guard, method, path, headers)[0] == 401, (headers, path)
            scrape = {"Authorization": f"Bearer {REPLICA_SCRAPE_TEST_KEY}"}
            assert request(guard, "POST", "/v1/chat/completions", scrape)[0] == 401
            assert request(guard, "GET", "/metrics", scrape)[0] == 200
            assert (
                request(
                    guard, "POST", "/v1/chat/completions", {"Authorization": f"Bearer {REPLICA_TEST_KEY}"}
                )[0]
                == 200
            )
    assert [(m, p) for m, p, _ in RecordingUpstream.seen] == [
        ("GET", "/metrics"),
        ("POST", "/v1/chat/completions"),
    ]


def test_the_front_still_answers_through_the_guard(stacks: dict[str, Deployment]) -> None:
    """A client's key gets its answer through the guard (the front sends the replica key, the guard
    strips it); without a key the front answers 401 and nothing reaches vLLM."""
    with front_and_guard(stacks["local"]) as front:
        assert request(front, "GET", "/v1/models", {})[0] == 401
        key = {"Authorization": f"Bearer {TEST_API_KEYS['ci']}"}
        status, body, _ = request(front, "POST", "/v1/chat/completions", key)
        assert status == 200, body
    assert [(m, p) for m, p, _ in RecordingUpstream.seen] == [("POST", "/v1/chat/completions")]
    assert all("authorization" not in headers for _, _, headers in RecordingUpstream.seen)


@pytest.mark.parametrize("operator", [False, True])
def test_the_network_policy_admits_only_the_stacks_clients(operator: bool) -> None:
    deployment = run_program("a800", {"glm:target": k8s_target(prometheusOperator=operator)})
    policy = unwrap(deployment.one("kubernetes:networking.k8s.io/v1:NetworkPolicy").inputs)["spec"]
    pods = unwrap(deployment.one(DEPLOYMENT, "-vllm").inputs)["spec"]["selector"]["matchLabels"]
    assert policy["podSelector"]["matchLabels"] == pods and policy["policyTypes"] == ["Ingress"]
    [rule] = policy["ingress"]
    assert [int(p["port"]) for p in rule["ports"]] == [8080]  # the guard's, not vLLM's
    sources = [p["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for p in rule["from"]]
    assert sources == ["glm53-front", "glm53-prometheus", "glm53-semantic-probe"] + (
        ["prometheus"] if operator else []
    )
    assert all("namespaceSelector" not in p for p in rule["from"][:3])  # this namespace only


def test_prometheus_and_the_probe_hold_the_scrape_key_never_the_replica_key(
    stacks: dict[str, Deployment],
) -> None:
    deployment = stacks["local"]
    assert named_secret(deployment, "glm53-scrape-key") == {"scrape-key": REPLICA_SCRAPE_TEST_KEY}
    files = unwrap(deployment.one("kubernetes:core/v1:ConfigMap", "-prometheus-config").inputs)["data"]
    job = yaml.safe_load(files["prometheus.yml"])["scrape_configs"][0]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": "/etc/prometheus/scrape-key"}
    prometheus = unwrap(deployment.one(DEPLOYMENT, "-prometheus").inputs)["spec"]["template"]["spec"]
    assert _secrets_in(prometheus) == ["glm53-scrape-key"]
    params = json.loads(
        unwrap(deployment.one("kubernetes:core/v1:ConfigMap", "-semantic-probe-params").inputs)["data"][
            "params.json"
        ]
    )
    assert (params["guarded_metrics"], params["scrape_key_file"]) == (True, "/etc/semantic-probe/scrape-key")
    # Its /metrics reads go through the front (one origin, one certificate with TLS), which admits
    # the scrape key as a metrics key, never for inference.
    assert params["metrics_url"] == params["endpoint"].removesuffix("/v1") + "/metrics"
    front_keys = named_secret(deployment, "glm53-front-keys")
    assert f"~^Bearer {REPLICA_SCRAPE_TEST_KEY}$" in front_keys["metrics-keys.map"]
    assert REPLICA_SCRAPE_TEST_KEY not in front_keys["api-keys.map"]
    assert params["replica_key_file"] is None
    probe = unwrap(deployment.one(DEPLOYMENT, "-semantic-probe").inputs)["spec"]["template"]["spec"]
    assert _secrets_in(probe) == ["glm53-semantic-probe-key", "glm53-scrape-key"]
    # The Operator's scrape asks with the same key, from the same Secret.
    operator = run_program("a800", {"glm:target": k8s_target(prometheusOperator=True)})
    monitor = next(r for r in operator.resources if r.name.endswith("-pod-monitor"))
    [endpoint] = unwrap(monitor.inputs)["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "guard"
    assert endpoint["authorization"]["credentials"] == {"name": "glm53-scrape-key", "key": "scrape-key"}


def _secrets_in(pod: dict[str, Any]) -> list[str]:
    found = []
    for volume in pod["volumes"]:
        sources = volume.get("projected", {}).get("sources", [])
        found += [s["secret"]["name"] for s in sources if "secret" in s]
        if "secret" in volume:
            found.append(volume["secret"]["secretName"])
    return found


def test_the_probe_reads_guarded_metrics_with_the_scrape_key() -> None:
    from components.semantic_probe.settings import ProbeSettings

    settings = ProbeSettings(
        "http://front:8080/v1", "http://vllm:8000/metrics", "glm", 1024, {}, 60, 3, guarded_metrics=True
    )
    assert settings.targets[0].scrape_key and not settings.targets[0].replica_key
