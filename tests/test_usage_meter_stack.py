"""The usage meter as each Docker stack renders it under mocks (components/docker/usage_meter.py): in
the front's path by default, its command line, nginx's route through it and Prometheus' job; and a
stack that turns it off. (The meter's own runtime: tests/test_usage_meter.py; the cluster, which
runs none: tests/test_k8s_keys.py.)"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.conftest import CONTAINER, Deployment, profile_stacks, run_program, stack_config, unwrap

IMAGE = "docker:index/image:Image"
GATE = "pulumi-python:dynamic:Resource"
METER_PORT = "9147"  # glm:front.usageMeter.port's default
RETURN_PORT = "8081"  # the front's return listener, where the meter sends requests back
QUEUE_SECONDS = "10"  # glm:front.usageMeter.queueSeconds's default, as the key is written


def with_meter(stack: str, **meter: Any) -> dict[str, Any]:
    """``glm:front`` of the stack file with ``meter`` added to its ``usageMeter``."""
    front = stack_config(stack).get("glm:front") or {}
    return {"glm:front": {**front, "usageMeter": {**(front.get("usageMeter") or {}), **meter}}}


def meter_command(deployment: Deployment) -> list[str]:
    return list(deployment.one(CONTAINER, "-usage-meter-container").inputs["command"])


def scrape_jobs(deployment: Deployment) -> dict[str, list[str]]:
    uploads = {u["file"]: u["content"] for u in deployment.one(CONTAINER, "-prometheus").inputs["uploads"]}
    scraped = yaml.safe_load(uploads["/etc/prometheus/prometheus.yml"])
    return {
        job["job_name"]: [t for c in job["static_configs"] for t in c["targets"]]
        for job in scraped["scrape_configs"]
    }


@pytest.mark.parametrize("stack", profile_stacks())
def test_every_docker_stack_has_the_meter_in_its_front_path_by_default(
    deployed: dict[str, Deployment], stack: str
) -> None:
    meter_file = (stack_config(stack).get("glm:front") or {}).get("usageMeter") or {}
    assert "enabled" not in meter_file  # the default, not the stack file, puts it there
    deployment = deployed[stack]
    meter = deployment.one(CONTAINER, "-usage-meter-container").inputs
    front = deployment.one(CONTAINER, "-front-nginx").inputs["name"]
    assert meter["name"] == f"{front.removesuffix('-nginx')}-usage-meter"
    assert meter["command"] == [
        "--port", METER_PORT, "--upstream", f"{front}:{RETURN_PORT}", "--queue-seconds", QUEUE_SECONDS,
    ]  # fmt: skip
    assert {"label": "glm53.role", "value": "usage-meter"} in meter["labels"]
    # Its image is built from the stack's base image (the local stack's is a local one).
    build = deployment.one(IMAGE, "-usage-meter-image").inputs["build"]
    assert build["args"] == {"BASE_IMAGE": meter_file.get("baseImage", "python:3.11-slim")}
    # nginx sends the inference routes to the meter, with the share table.
    release = unwrap(deployment.one(GATE, "-front-config").inputs)
    assert f'set $usage_meter "{meter["name"]}:{METER_PORT}";' in release["nginx_conf"]
    assert "usage-shares.conf" in release["secret_files"]
    # And the stack's Prometheus scrapes it.
    assert scrape_jobs(deployment)["usage-meter"] == [f"{meter['name']}:{METER_PORT}"]


@pytest.mark.parametrize(("written", "argv"), [(2.5, "2.5"), (0, "0"), (30, "30")])
def test_the_stacks_queue_seconds_reach_the_meters_command_line(written: float, argv: str) -> None:
    deployment = run_program("local", overrides=with_meter("local", queueSeconds=written))
    assert meter_command(deployment)[-2:] == ["--queue-seconds", argv]


def test_a_queue_nginx_would_not_wait_out_is_refused_naming_both_keys() -> None:
    overrides = with_meter("local", queueSeconds=600)
    with pytest.raises(Exception, match=r"glm:front\.usageMeter\.queueSeconds=600 is not shorter than "
                       r"glm:front\.readTimeoutSeconds=600.*Fix: queueSeconds below 600"):  # fmt: skip
        run_program("local", overrides=overrides)


def test_a_docker_stack_that_turns_the_meter_off_sends_nginx_straight_to_the_replicas() -> None:
    deployment = run_program("local", overrides=with_meter("local", enabled=False))
    assert [r.name for r in deployment.resources if "usage-meter" in r.name] == []
    release = unwrap(deployment.one(GATE, "-front-config").inputs)
    assert "usage_meter" not in release["nginx_conf"] and "usage-shares.conf" not in release["secret_files"]
    assert "usage-meter" not in scrape_jobs(deployment)
