"""Rehearsal under Pulumi mocks: the profile as deployed, with only what the hardware forces replaced.

The committed stack files are rendered twice, with and without ``glm:rehearsal``; the rehearsal must
differ only in the serving image (the simulator, built on the host), the accelerator requests
(``gpus``, ``/dev/davinci*`` and control devices, driver mounts), ``VLLM_SIM_VERSION`` and
``VLLM_SIM_PROFILE`` (the simulator's prefill rate and KV pool for the hardware).
"""

from __future__ import annotations

from typing import Any

import pytest

from components.config import ConfigError, build_stack_config
from components.render.prometheus_config import ScrapeSpec
from components.render.prometheus_rules import alert_rules
from tests.conftest import Deployment, run_program, unwrap
from tests.stack_configs import make

CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/image:Image"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
VERSIONS = {"a800": "0.33.0", "ascend": "0.23.0", "rtx5090": "0.28.1rc1.dev580+g385dce36b"}
FRONT_PORTS = {"a800": 8008, "ascend": 8077, "rtx5090": 8000}  # the seeds' published ports
DRIVER_MOUNTS = {"/usr/local/Ascend/driver", "/usr/local/Ascend/firmware", "/usr/local/sbin/npu-smi",
                 "/etc/hccn.conf"}  # fmt: skip


@pytest.fixture(scope="module")
def rehearsed() -> dict[str, Deployment]:
    return {stack: run_program(stack, {"glm:rehearsal": True}) for stack in FRONT_PORTS}


def by_name(deployment: Deployment) -> dict[str, dict[str, Any]]:
    return {r.name: unwrap(r.inputs) for r in deployment.resources}


# ---- config -------------------------------------------------------------------------------------


def test_one_switch_or_the_object_with_an_offline_base_image() -> None:
    assert make("a800", rehearsal=True).rehearsing
    assert make("a800", rehearsal="true").rehearsing
    assert not make("a800").rehearsing
    config = make("ascend", rehearsal={"enabled": True, "baseImage": "glm53-local/python:bookworm"})
    build = config.serving_image.build
    assert build is not None and build.base_image == "glm53-local/python:bookworm"
    assert (build.context, build.repository) == ("images/vllm-sim", "glm53-vllm-sim")
    assert config.serving_image.vllm_version == "0.23.0"
    assert config.image.reference == "quay.io/ascend/vllm-ascend:glm-5.3-flash", "the profile is untouched"


def test_rehearsing_the_local_stack_is_refused() -> None:
    with pytest.raises(ConfigError, match="glm:rehearsal=true on hardware local: the local stack already"):
        build_stack_config({"hardware": "local", "rehearsal": True})


@pytest.mark.parametrize("hardware", list(FRONT_PORTS))
def test_a_rehearsal_says_so_and_what_it_leaves_out(hardware: str) -> None:
    [warning] = [a for a in make(hardware, rehearsal=True).advisories() if "REHEARSAL" in a]
    assert f"REHEARSAL of {hardware}, not a model" in warning
    assert "can never be promoted to a real one" in warning
    if hardware == "ascend":
        assert "/dev/davinci0" in warning and "/usr/local/Ascend/driver" in warning
    else:
        assert "--gpus all" in warning
    assert not [a for a in make(hardware).advisories() if "REHEARSAL" in a]


def test_target_down_for_can_be_shortened() -> None:
    """A fault drill (tests/test_rehearsal.py) waits seconds, not the profile's 8 minutes."""
    [default] = [r for r in alert_rules(ScrapeSpec.of(make("a800"))) if r["alert"] == "VllmTargetDown"]
    [short] = [
        r
        for r in alert_rules(ScrapeSpec.of(make("a800", monitoring={"targetDownFor": "4s"})))
        if r["alert"] == "VllmTargetDown"
    ]
    assert (default["for"], short["for"]) == ("8m", "4s")


# ---- rendered resources -------------------------------------------------------------------------


@pytest.mark.parametrize("stack", list(FRONT_PORTS))
def test_the_engine_is_the_simulator_built_on_the_host(rehearsed: dict[str, Deployment], stack: str) -> None:
    deployment = rehearsed[stack]
    build = deployment.one(IMAGE, "-image-build").inputs
    assert build["imageName"].startswith("glm53-vllm-sim:")
    assert build["build"]["context"] == "images/vllm-sim"
    assert build["build"]["args"] == {"BASE_IMAGE": "python:3.11-slim"}
    assert not [r for r in deployment.of_type(REMOTE_IMAGE) if r.name.endswith("-pull")]
    serving = deployment.one(CONTAINER, "-vllm").inputs
    assert serving["image"] == build["imageName"]
    # Built only after preflight: a host that fails its checks gets nothing.
    assert [d for d in deployment.options[f"{stack}-image"].depends_on or []]


@pytest.mark.parametrize("stack", list(FRONT_PORTS))
def test_only_what_the_hardware_forces_is_replaced(
    deployed: dict[str, Deployment], rehearsed: dict[str, Deployment], stack: str
) -> None:
    real, rehearsal = by_name(deployed[stack]), by_name(rehearsed[stack])
    assert real.keys() - rehearsal.keys() == (set() if stack == "a800" else {f"{stack}-image-pull"})
    changed = sorted(n for n in real.keys() & rehearsal.keys() if real[n] != rehearsal[n])
    # The serving container; the gates (their image_ref); the image build (a800: the simulator's context).
    gates = {f"{stack}-smoke-gate", f"{stack}-replica-gate"}
    assert set(changed) <= {f"{stack}-serving-vllm", *gates, f"{stack}-image-build"}, changed
    before, after = real[f"{stack}-serving-vllm"], rehearsal[f"{stack}-serving-vllm"]
    assert after["command"] == before["command"], "the profile's own argv"
    assert after["entrypoints"] == ["vllm", "serve"]
    sim_env = [f"VLLM_SIM_VERSION={VERSIONS[stack]}", f"VLLM_SIM_PROFILE={stack}"]
    assert sorted(after["envs"]) == sorted([*before["envs"], *sim_env])
    assert after.get("gpus") is None and not after.get("devices")
    kept = [m for m in before["mounts"] if m.get("source") not in DRIVER_MOUNTS]
    assert after["mounts"] == kept
    same = {k for k in before if k not in ("image", "envs", "gpus", "devices", "mounts")}
    assert {k: after.get(k) for k in same} == {k: before[k] for k in same}


@pytest.mark.parametrize("stack", list(FRONT_PORTS))
def test_the_rest_is_production(rehearsed: dict[str, Deployment], stack: str) -> None:
    deployment = rehearsed[stack]
    assert deployment.one("command:remote:Command", "-preflight-check")
    [front] = [r.inputs for r in deployment.of_type(CONTAINER) if r.name.endswith("-nginx")]
    assert front["ports"][0]["external"] == FRONT_PORTS[stack]
    assert deployment.one(CONTAINER, "-prometheus")
    assert deployment.one("docker:index/volume:Volume", "-jit-cache")
    outputs = deployment.outputs
    assert outputs["rehearsal"]["hardware"] == stack
    assert outputs["rehearsal"]["replaced"]["image"]["rehearsal"] == "glm53-vllm-sim (built)"
    assert outputs["verified"]["servedModel"]["rehearsal"] is True


def test_rtx5090_keeps_its_site_mount_and_ascend_loses_its_driver(rehearsed: dict[str, Deployment]) -> None:
    rtx = rehearsed["rtx5090"].one(CONTAINER, "-vllm").inputs
    assert "/site" in [m["target"] for m in rtx["mounts"]]
    ascend = rehearsed["ascend"].one(CONTAINER, "-vllm").inputs
    assert not {m.get("source") for m in ascend["mounts"]} & DRIVER_MOUNTS


def test_the_private_network_spells_out_its_gateway(rehearsed: dict[str, Deployment]) -> None:
    """Docker 20.10 fills the gateway in after a daemon restart; unset, `up --refresh` replaced it."""
    [ipam] = rehearsed["a800"].one("docker:index/network:Network").inputs["ipamConfigs"]
    assert ipam["gateway"] == ipam["subnet"].replace(".0/24", ".1")


# ---- promotion ----------------------------------------------------------------------------------

SOURCE = "organization/glm/a800-staging"


def test_a_rehearsal_is_never_promoted_to_a_real_stack(rehearsed: dict[str, Deployment]) -> None:
    staging = run_program("a800-staging", {"glm:rehearsal": True})
    with pytest.raises(Exception, match=r"the source is a rehearsal \(glm:rehearsal\).*not by the model"):
        run_program(
            "a800",
            overrides={"glm:promoteFrom": SOURCE},
            stack_outputs={SOURCE: {"verified": staging.outputs["verified"]}},
        )


def test_a_rehearsal_promotes_to_a_rehearsal() -> None:
    staging = run_program("a800-staging", {"glm:rehearsal": True})
    promoted = run_program(
        "a800",
        overrides={"glm:promoteFrom": SOURCE, "glm:rehearsal": True},
        stack_outputs={SOURCE: {"verified": staging.outputs["verified"]}},
    )
    assert promoted.outputs["fingerprint"] == staging.outputs["fingerprint"]
    assert promoted.outputs["promotedFrom"]["imageRef"].startswith("glm53-vllm-sim:")
