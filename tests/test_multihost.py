"""Several hosts in one stack: the rules checked before anything is created, what each host gets,
the front's upstream (nginx -t) and the per-host alerts (promtool), under Pulumi mocks.

Expected values come from the A100 seed §6.2 (``max_fails=2 fail_timeout=30s``, ``keepalive 32``)
and issue 15, not from the code.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import ConfigError, build_stack_config
from components.render.nginx_conf import render_nginx_conf
from components.render.prometheus_config import DEFAULT_JOB, ScrapeSpec, render_prometheus_config
from components.render.prometheus_rules import render_alert_rules
from tests.conftest import REPLICA_SCRAPE_TEST_KEY, REPLICA_TEST_KEY, Deployment, run_program, unwrap
from tests.front_rig import NGINX
from tests.multihost_stacks import GATE, THREE, host, target
from tests.promtool_rules import PROMTOOL

CONTAINER = "docker:index/container:Container"
PLAIN_HTTP = {"front": {"allowPlainHttp": True}}


def refused(hosts: dict[str, Any], **extra: Any) -> str:
    with pytest.raises(ConfigError) as err:
        build_stack_config({"hardware": "a800", "target": hosts, **PLAIN_HTTP, **extra})
    return str(err.value)


# ---- bad input, refused before anything is created -------------------------------------------


def test_duplicate_host_names_are_refused() -> None:
    message = refused(target(host("gpu01", "10.0.0.11"), host("gpu01", "10.0.0.12")))
    assert "glm:target.hosts lists the name 'gpu01' 2 times" in message


def test_two_hosts_at_one_address_are_refused() -> None:
    message = refused(target(host("gpu01", "10.0.0.11"), host("gpu02", "10.0.0.11")))
    assert "glm:target.hosts[gpu02] and glm:target.hosts[gpu01] are both at" in message
    # The same box behind two SSH ports, or two names for one private address.
    assert "both at 10.0.0.11" in refused(target(host("gpu01", "10.0.0.11"), host("gpu02", "10.0.0.11:2222")))
    assert "both at 10.0.0.11" in refused(
        target(host("gpu01", "10.0.0.11"), host("gpu02", "gpu02.lan", privateAddress="10.0.0.11"))
    )


def test_a_front_host_that_is_not_listed_is_refused() -> None:
    message = refused(target(*THREE, front="gpu09"))
    assert "glm:target.frontHost='gpu09' is not in glm:target.hosts (gpu01, gpu02, gpu03)" in message


def test_replicas_whose_profiles_differ_are_refused() -> None:
    hosts = [THREE[0], {**THREE[1], "hardware": "rtx5090"}]
    message = refused(target(*hosts))
    assert "glm:target.hosts[gpu02].hardware=rtx5090 but glm:hardware=a800" in message
    # Declaring the same profile is fine.
    build_stack_config(
        {"hardware": "a800", "target": target(THREE[0], {**THREE[1], "hardware": "a800"}), **PLAIN_HTTP}
    )


def test_vllm_is_never_published_on_all_interfaces_or_loopback() -> None:
    for address in ("0.0.0.0", "::", "127.0.0.1"):
        message = refused(target(THREE[0], {**THREE[1], "privateAddress": address}))
        assert f"glm:target.hosts[gpu02].privateAddress={address!r}" in message


def test_host_network_mode_is_refused_with_several_hosts() -> None:
    message = refused(target(*THREE[:2]), container={"networkMode": "host", "accelerators": list(range(8))})
    assert "glm:container.networkMode=host with 2 hosts" in message


def test_every_host_problem_is_reported_at_once() -> None:
    message = refused(target(host("a", "10.0.0.1"), host("a", "10.0.0.1"), front="z"))
    assert "the name 'a' 2 times" in message and "frontHost='z'" in message


def test_front_host_defaults_to_the_first_and_can_be_named() -> None:
    config = build_stack_config({"hardware": "a800", "target": target(*THREE), **PLAIN_HTTP})
    assert config.target.host.name == "gpu01"
    assert [h.name for h in config.target.replica_hosts] == ["gpu02", "gpu03"]
    config = build_stack_config({"hardware": "a800", "target": target(*THREE, front="gpu02"), **PLAIN_HTTP})
    assert config.target.host.name == "gpu02"


# ---- what a three-host stack renders ------------------------------------------------------------


@pytest.fixture(scope="module")
def three() -> Deployment:
    return run_program("a800", overrides={"glm:target": target(*THREE)})


def names(deployment: Deployment, type_: str) -> list[str]:
    return sorted(r.name for r in deployment.of_type(type_))


def test_each_host_gets_its_own_provider_preflight_volume_and_container(three: Deployment) -> None:
    providers = {r.name: unwrap(r.inputs) for r in three.of_type("pulumi:providers:docker")}
    assert {n: p["host"] for n, p in providers.items()} == {
        "gpu01-docker": "ssh://deploy@10.0.0.11",
        "gpu02-docker": "ssh://deploy@10.0.0.12",
        "gpu03-docker": "ssh://deploy@10.0.0.13",
    }
    # The front's host keeps the one-host names (a stack that grows replaces nothing there); the
    # usage meter runs in the front's nginx only, sharing every replica's slots.
    assert names(three, CONTAINER) == [
        "a800-front-nginx", "a800-gpu02-guard-nginx", "a800-gpu02-serving-vllm", "a800-gpu03-guard-nginx",
        "a800-gpu03-serving-vllm", "a800-monitoring-prometheus", "a800-semantic-probe-container",
        "a800-serving-vllm",
    ]  # fmt: skip
    assert names(three, "docker:index/volume:Volume") == [
        "a800-front-rotation-requests", "a800-front-usage", "a800-gpu02-model-jit-cache", "a800-gpu03-model-jit-cache", "a800-model-jit-cache",
    ]  # fmt: skip
    checks = {r.name: unwrap(r.inputs) for r in three.of_type("command:remote:Command")}
    assert sorted(checks) == [
        "a800-gpu02-preflight-check",
        "a800-gpu03-preflight-check",
        "a800-preflight-check",
    ]
    assert checks["a800-gpu03-preflight-check"]["connection"]["host"] == "10.0.0.13"
    assert checks["a800-preflight-check"]["connection"]["host"] == "10.0.0.11"


def test_a_replica_is_published_only_through_its_guard_on_its_private_address(three: Deployment) -> None:
    containers = {r.name: unwrap(r.inputs) for r in three.of_type(CONTAINER)}
    assert containers["a800-gpu02-guard-nginx"]["ports"] == [
        {"internal": 8080, "external": 8000, "ip": "10.0.0.12"}
    ]
    assert containers["a800-gpu03-guard-nginx"]["ports"] == [
        {"internal": 8080, "external": 8000, "ip": "10.0.0.13"}
    ]
    # vLLM itself publishes nothing, on any host; without TLS the front's own replica needs no guard.
    assert all("ports" not in c for name, c in containers.items() if name.endswith("serving-vllm"))
    assert "a800-guard-nginx" not in containers
    # Docker stops each with a grace, so requests in flight can finish (SPEC §6: default 0 kills).
    assert {containers[n]["destroyGraceSeconds"] for n in containers if n.endswith("serving-vllm")} == {30}


def test_the_front_balances_across_the_replicas_its_rotation_admitted(three: Deployment) -> None:
    conf = unwrap(three.one(GATE, "front-config").inputs)["nginx_conf"]
    # No replica in the front's own config: each gate admits its replica by a fixed address, so the
    # front loads without any engine up (no DNS name to resolve).
    assert (
        "    upstream vllm {\n"
        "        server 127.0.0.1:9 down;\n"
        "        include /etc/nginx/glm/rotation/upstream.con[f];\n"
        "        keepalive 32;\n"
    ) in conf
    assert "proxy_next_upstream error timeout non_idempotent;" in conf
    gates = {r.name: unwrap(r.inputs) for r in three.of_type(GATE) if r.name.endswith("replica-gate")}
    vllm = build_stack_config(
        {"hardware": "a800", "target": target(*THREE), **PLAIN_HTTP}
    ).container.vllm_address
    assert {g["host"]: g["address"] for g in gates.values()} == {
        "gpu01": f"{vllm}:8000",
        "gpu02": "10.0.0.12:8000",
        "gpu03": "10.0.0.13:8000",
    }
    assert {g["front"]["container"] for g in gates.values()} == {"glm53-flash-a800-8008-nginx"}
    assert {g["grace_seconds"] for g in gates.values()} == {30}


def test_prometheus_scrapes_every_replica_with_a_host_label(three: Deployment) -> None:
    release = unwrap(three.one(GATE, "monitoring-files").inputs)
    uploads = release["contents"]
    scrape = yaml.safe_load(uploads["prometheus.yml"])["scrape_configs"][0]["static_configs"]
    assert scrape == [
        {"targets": ["vllm:8000"], "labels": {"host": "gpu01"}},
        {"targets": ["10.0.0.12:8000"], "labels": {"host": "gpu02"}},
        {"targets": ["10.0.0.13:8000"], "labels": {"host": "gpu03"}},
    ]
    # The replicas answer only their guards' keys, Prometheus the scrape key; vLLM on the front's
    # host ignores it. Relative: beside prometheus.yml in its release.
    job = yaml.safe_load(uploads["prometheus.yml"])["scrape_configs"][0]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": "scrape-key"}
    assert "scheme" not in job  # plain HTTP on the private network without glm:front.tls
    assert sorted(uploads) == [
        "prometheus.yml", "rules.yml", "status-page/status.css", "status-page/status.html", "status-page/status.js",
    ]  # fmt: skip
    assert sorted(release["secret_files"]) == ["scrape-key"]  # on stdin, as a secret: never in the diff
    rules = yaml.safe_load(uploads["rules.yml"])["groups"][0]["rules"]
    vllm_rules = [r for r in rules if r["alert"].startswith("Vllm")]  # the probe's are per stack
    assert vllm_rules and all(
        r["annotations"]["description"].startswith("On host {{ $labels.host }}: ") for r in vllm_rules
    )


def test_prometheus_holds_the_scrape_key_and_only_the_front_and_probe_the_replica_key(
    three: Deployment,
) -> None:
    """Issue 33 finding 3: Prometheus' file (world-readable in its container) opens no inference
    route; the inference key is the front's, and the probe's in a file of its own."""
    prometheus = unwrap(three.one(GATE, "monitoring-files").inputs)
    assert prometheus["secret_files"]["scrape-key"] == REPLICA_SCRAPE_TEST_KEY
    assert REPLICA_TEST_KEY not in str(prometheus)
    front = unwrap(three.one(GATE, "front-config").inputs)["secret_files"]["replica-guard-auth.conf"]
    assert f'proxy_set_header Authorization "Bearer {REPLICA_TEST_KEY}";' in front
    assert REPLICA_SCRAPE_TEST_KEY not in front
    probe = unwrap(three.one(CONTAINER, "semantic-probe-container").inputs)
    probe_files = {u["file"]: u["content"] for u in probe["uploads"]}
    assert probe_files["/etc/semantic-probe/replica-key"] == REPLICA_TEST_KEY
    assert probe_files["/etc/semantic-probe/scrape-key"] == REPLICA_SCRAPE_TEST_KEY
    # Who holds the replica key at all: the front's and the guards' releases, and the probe.
    holders = sorted(r.name for r in three.resources if REPLICA_TEST_KEY in str(unwrap(r.inputs)))
    assert holders == [
        "a800-front-config", "a800-gpu02-guard-config", "a800-gpu03-guard-config", "a800-semantic-probe-container",
    ]  # fmt: skip
    guard = unwrap(three.one(GATE, "gpu02-guard-config").inputs)["secret_files"]
    assert REPLICA_TEST_KEY in guard["replica-key.map"] and REPLICA_TEST_KEY not in guard["scrape-key.map"]
    assert REPLICA_SCRAPE_TEST_KEY in guard["scrape-key.map"]


def test_a_gate_per_replica_then_one_through_the_front(three: Deployment) -> None:
    gates = {r.name: unwrap(r.inputs) for r in three.of_type(GATE) if r.name.endswith("-gate")}
    assert sorted(gates) == [
        "a800-gpu02-replica-gate",
        "a800-gpu03-replica-gate",
        "a800-replica-gate",
        "a800-smoke-gate",
    ]
    replica = gates["a800-gpu03-replica-gate"]
    assert replica["host"] == "gpu03"
    assert "front_auth" not in replica["smoke"]["steps"] and "kv_pool" in replica["smoke"]["steps"]
    # Reached through ssh -L to vLLM's fixed address on that host's private network.
    assert replica["tunnel"]["destination"] == "10.0.0.13"
    assert replica["tunnel"]["target"] == replica["endpoint"].removeprefix("http://").removesuffix("/v1")
    assert "StrictHostKeyChecking=yes" in replica["tunnel"]["ssh"]
    assert "front_auth" in gates["a800-smoke-gate"]["smoke"]["steps"]


def dependencies(deployment: Deployment, name: str) -> list[str]:
    opts = deployment.options[name]
    return sorted(d._name for d in (opts.depends_on or []))  # type: ignore[union-attr]


def test_replicas_roll_one_host_after_the_other_and_the_front_waits_for_no_engine(three: Deployment) -> None:
    assert "a800-replica" in dependencies(three, "a800-gpu02-serving")
    assert "a800-gpu02-replica" in dependencies(three, "a800-gpu03-serving")
    assert not any("replica" in d for d in dependencies(three, "a800-serving"))
    # A key can be revoked while every engine is down: the front waits for none of them.
    assert not any("serving" in d or "replica" in d for d in dependencies(three, "a800-front"))
    # The gate through the front runs once every replica is back in rotation.
    assert {"a800-replica", "a800-gpu02-replica", "a800-gpu03-replica"} <= set(
        dependencies(three, "a800-smoke")
    )


def test_every_serving_container_is_drained_from_the_front_before_it_goes(three: Deployment) -> None:
    containers = {
        r.name: unwrap(r.inputs) for r in three.of_type(CONTAINER) if r.name.endswith("serving-vllm")
    }
    assert {
        name: next(item["value"] for item in c["labels"] if item["label"] == "glm53.replica")
        for name, c in containers.items()
    } == {
        "a800-serving-vllm": "gpu01",
        "a800-gpu02-serving-vllm": "gpu02",
        "a800-gpu03-serving-vllm": "gpu03",
    }
    for name in containers:
        hooks = three.options[name].hooks
        assert hooks is not None and [h.name for h in hooks.before_delete or []] == ["glm53-drain-replica"]


def test_one_host_stacks_gate_their_replica_before_the_front(deployed: dict[str, Deployment]) -> None:
    for deployment in deployed.values():
        gates = sorted(r.name for r in deployment.of_type(GATE) if r.name.endswith("-gate"))
        smoke = deployment.one(GATE, "-smoke-gate").name
        assert gates == sorted([smoke, smoke.replace("-smoke-gate", "-replica-gate")])


# ---- the real tools ------------------------------------------------------------------------------

KEYS = {"ci": "sk-test-ci-0a6e93030124c2b3"}


def test_nginx_accepts_a_front_with_three_replicas(tmp_path: Path) -> None:
    config = build_stack_config({"hardware": "a800", "target": target(*THREE), **PLAIN_HTTP})
    conf = render_nginx_conf(
        config.front, ["127.0.0.1:8000", "10.0.0.12:8000", "[fd00::13]:8000"], KEYS, runtime_dir=str(tmp_path)
    )
    (tmp_path / "nginx.conf").write_text(conf)
    result = subprocess.run(
        [NGINX, "-t", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path), "-e", "stderr"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_promtool_alerts_name_the_host(tmp_path: Path) -> None:
    config = build_stack_config({"hardware": "local"})
    targets = {"gpu01": "vllm:8000", "gpu02": "10.0.0.12:8000"}
    (tmp_path / "rules.yml").write_text(render_alert_rules(ScrapeSpec.of(config), by_host=True))
    (tmp_path / "prometheus.yml").write_text(
        render_prometheus_config(
            config.monitoring, targets, DEFAULT_JOB, rules_path=str(tmp_path / "rules.yml")
        )
    )
    checked = subprocess.run(
        [PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # gpu02 is down, gpu01 is up: VllmTargetDown fires for gpu02 only and its text says so.
    down_for = int(next(r for r in yaml.safe_load((tmp_path / "rules.yml").read_text())["groups"][0]["rules"]
                        if r["alert"] == "VllmTargetDown")["for"].rstrip("m"))  # fmt: skip
    labels = {"job": DEFAULT_JOB, "instance": "10.0.0.12:8000", "host": "gpu02"}
    test = {
        "interval": "1m",
        "input_series": [
            {"series": 'up{job="vllm",instance="vllm:8000",host="gpu01"}', "values": f"1x{down_for + 2}"},
            {
                "series": 'up{job="vllm",instance="10.0.0.12:8000",host="gpu02"}',
                "values": f"0x{down_for + 2}",
            },
        ],
        "alert_rule_test": [
            {
                "eval_time": f"{down_for + 1}m",
                "alertname": "VllmTargetDown",
                "exp_alerts": [
                    {
                        "exp_labels": {**labels, "severity": "critical"},
                        "exp_annotations": annotations(config, labels),
                    }
                ],
            }
        ],
    }
    document = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [test]}
    (tmp_path / "rules_test.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "rules_test.yml"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr


def annotations(config: Any, labels: dict[str, str]) -> dict[str, str]:
    """VllmTargetDown's annotations with the templates filled in for ``labels``."""
    rules = yaml.safe_load(render_alert_rules(ScrapeSpec.of(config), by_host=True))["groups"][0]["rules"]
    rule = next(r for r in rules if r["alert"] == "VllmTargetDown")
    filled = {}
    for key, text in rule["annotations"].items():
        for name, value in labels.items():
            text = text.replace(f"{{{{ $labels.{name} }}}}", value)
        filled[key] = text
    assert filled["summary"].startswith("On host gpu02: ")
    return filled


def test_a_failing_replica_names_its_host() -> None:
    from components.docker.replica_gate import run_replica_gate
    from components.provider_errors import OperatorError
    from tests.engine import free_port

    closed = f"http://127.0.0.1:{free_port()}"
    props = {
        "endpoint": f"{closed}/v1",
        "metrics_url": f"{closed}/metrics",
        "served_name": "glm-5.3-flash",
        "max_model_len": 32768,
        "smoke": {"deadline_seconds": 1, "poll_seconds": 0.2, "steps": ["models"]},
        "host": "gpu02",
        "api_key": KEYS["ci"],
    }
    props["front"] = {"docker_host": "unix:///nonexistent.sock", "ssh": None, "container": "glm53-no-front"}
    with pytest.raises(OperatorError) as failed:
        run_replica_gate(props)
    message = str(failed.value)
    assert message.startswith("the replica on host 'gpu02' failed its gate at step 'readiness': not ready"), (
        message
    )
    assert "The roll stopped here; no other host was touched" in message and "make rollback" in message


# ---- the policy pack ------------------------------------------------------------------------------


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_a_multi_host_stack_passes_the_policy_pack(tls: bool) -> None:
    """Issue 22: every replica off the front's host published vLLM's port, so the pack's
    no-public-serving-port refused every multi-host stack. Now only guards publish, on one address."""
    import policy.glm_policies as gp
    from policy.glm_policies import Resource
    from tests.front_rig import self_signed

    secrets: dict[str, Any] = {}
    front: dict[str, Any] = {"allowPlainHttp": True}
    if tls:
        cert, key = self_signed()
        secrets = {"glm:tlsCertificate": cert.decode(), "glm:tlsKey": key.decode()}
        front = {"tls": True}
    deployment = run_program(
        "a800", overrides={"glm:target": target(*THREE), "glm:front": front}, secrets=secrets
    )
    resources = [
        Resource(r.type, r.name, gp.normalize(r.inputs), urn=f"urn:pulumi:a800::glm::{r.type}::{r.name}")
        for r in deployment.resources
    ]
    rules = [r for r in gp.RULES if r.name != "volumes-retained"]
    assert [(rule.name, m) for res in resources for rule in rules for m in rule.check(res, {})] == []
    guards = sorted(r.name for r in deployment.of_type(CONTAINER) if r.name.endswith("guard-nginx"))
    # With TLS the front's own replica is guarded too (one upstream, one scheme), publishing nothing.
    assert guards == (
        ["a800-gpu02-guard-nginx", "a800-gpu03-guard-nginx"] + (["a800-guard-nginx"] if tls else [])
    )
    conf = unwrap(deployment.one(GATE, "front-config").inputs)["nginx_conf"]
    assert "include replica-guard-auth.conf;" in conf
    # The generation routes go to the replica prefix affinity names (docs/scaling.md), the others to vllm.
    assert ("proxy_pass https://$glm_upstream/v1/chat/completions;" in conf) is tls
    assert ("proxy_pass https://vllm/v1/models;" in conf) is tls


def test_several_hosts_without_tls_need_the_plain_http_opt_in() -> None:
    """Between hosts the front carries prompts and the replica key: in clear only when accepted."""
    message = refused(target(*THREE), front={"bindAddress": "127.0.0.1"})
    assert "3 hosts without glm:front.tls" in message and "glm:front.allowPlainHttp: true" in message
