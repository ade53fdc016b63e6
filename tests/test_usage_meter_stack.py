"""The usage meter as each Docker stack renders it under mocks (components/render/nginx_meter.py):
inside the front's nginx by default, its settings in the release's nginx.conf, its counters' volume
and Prometheus' job; and a stack that turns it off. (The meter's own runtime:
tests/test_usage_meter.py; the cluster, which runs none: tests/test_k8s_keys.py.)"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from tests.conftest import CONTAINER, Deployment, profile_stacks, run_program, stack_config, unwrap

GATE = "pulumi-python:dynamic:Resource"
STATUS_PORT = "9146"  # the front's status port, never published
STATE_DIR = "/var/lib/glm53-usage"


def with_meter(stack: str, **meter: Any) -> dict[str, Any]:
    """``glm:front`` of the stack file with ``meter`` added to its ``usageMeter``."""
    front = stack_config(stack).get("glm:front") or {}
    return {"glm:front": {**front, "usageMeter": {**(front.get("usageMeter") or {}), **meter}}}


def release_conf(deployment: Deployment) -> str:
    return str(unwrap(deployment.one(GATE, "-front-config").inputs)["nginx_conf"])


def meter_settings(conf: str) -> dict[str, Any]:
    """What nginx.conf hands the meter's configure() (a JSON literal in a Lua long string)."""
    found = re.search(
        r'require\("meter"\)\.configure\(require\("cjson\.safe"\)\.decode\(\[==\[(.*?)\]==\]\)\)',
        conf,
        re.DOTALL,
    )
    assert found, "nginx.conf does not configure the meter"
    return json.loads(found[1])


def scrape_jobs(deployment: Deployment) -> dict[str, dict[str, Any]]:
    scraped = yaml.safe_load(
        unwrap(deployment.one(GATE, "-monitoring-files").inputs)["contents"]["prometheus.yml"]
    )
    return {job["job_name"]: job for job in scraped["scrape_configs"]}


@pytest.mark.parametrize("stack", profile_stacks())
def test_every_docker_stack_has_the_meter_in_its_front_path_by_default(
    deployed: dict[str, Deployment], stack: str
) -> None:
    meter_file = (stack_config(stack).get("glm:front") or {}).get("usageMeter") or {}
    assert "enabled" not in meter_file  # the default, not the stack file, puts it there
    deployment = deployed[stack]
    # No meter container, no return listener: the meter is nginx's own phases.
    assert [r.name for r in deployment.resources if "usage-meter" in r.name] == []
    conf = release_conf(deployment)
    assert "lua_shared_dict glm_meter" in conf and "listen 8081" not in conf
    for route in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
        location = conf[conf.index(f"location = {route} {{") :]
        location = location[: location.index("proxy_pass")]
        assert 'access_by_lua_block { require("meter").access() }' in location
        assert 'body_filter_by_lua_block { require("meter").body_filter() }' in location
    settings = meter_settings(conf)
    max_num_seqs = deployment.one(CONTAINER, "-vllm").inputs["command"]
    assert f"--max-num-seqs={settings['slots']}" in max_num_seqs
    assert settings["state_file"] == f"{STATE_DIR}/counters.json"
    # Its counters outlive the front container, on a volume of their own.
    front = deployment.one(CONTAINER, "-front-nginx").inputs
    assert {"volumeName": f"{front['name']}-usage", "containerPath": STATE_DIR} in unwrap(front["volumes"])
    # And the stack's Prometheus scrapes them on the front's status port.
    job = scrape_jobs(deployment)["usage-meter"]
    assert job["metrics_path"] == "/metrics/usage"
    assert job["static_configs"] == [{"targets": [f"{front['name']}:{STATUS_PORT}"]}]


@pytest.mark.parametrize(("written", "expected"), [(2.5, 2.5), (0, 0), (30, 30)])
def test_the_stacks_queue_seconds_and_weights_reach_the_meter(written: float, expected: float) -> None:
    overrides = with_meter("local", queueSeconds=written, weights={"ops": 3})
    settings = meter_settings(release_conf(run_program("local", overrides=overrides)))
    assert settings["queue_seconds"] == expected
    assert settings["weights"] == {"ops": 3}


def test_a_queue_nginx_would_not_wait_out_is_refused_naming_both_keys() -> None:
    overrides = with_meter("local", queueSeconds=600)
    with pytest.raises(Exception, match=r"glm:front\.usageMeter\.queueSeconds=600 is not shorter than "
                       r"glm:front\.readTimeoutSeconds=600.*Fix: queueSeconds below 600"):  # fmt: skip
        run_program("local", overrides=overrides)


def test_a_docker_stack_that_turns_the_meter_off_sends_nginx_straight_to_the_replicas() -> None:
    deployment = run_program("local", overrides=with_meter("local", enabled=False))
    conf = release_conf(deployment)
    assert "lua" not in conf and "/metrics/usage" not in conf
    assert "usage-meter" not in scrape_jobs(deployment)
    volumes = unwrap(deployment.one(CONTAINER, "-front-nginx").inputs["volumes"])
    assert not [v for v in volumes if v["containerPath"] == STATE_DIR]
