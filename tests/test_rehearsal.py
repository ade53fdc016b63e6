"""Rehearsal end to end: each hardware stack deployed for real to the stand-in GPU host over SSH.

For a800, ascend and rtx5090 with ``glm:rehearsal`` on: `pulumi up` (preflight over SSH against the
fake accelerators, the simulator built on the host, the front on the profile's port, Prometheus,
the gate across the network) → `preview --expect-no-changes` → one vLLM flag changed, and preview
plans only the serving container and the gate → `destroy`, which leaves the weights and the JIT
cache volume on the host. Skipped, with the reason, without the engine or network namespaces.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.engine import PROJECT, PulumiProject, engine_missing, stack_file_without_secrets
from tests.rehearsal_stack import API_KEY, LOCAL_IMAGES, SITE_DIR, rehearsal_config
from tests.standin_host import StandinHost, unavailable_reason

pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))

# (stack, the front's port from the seed, served name, container name, the flag changed in step 3)
PROFILES = {
    "a800": (8008, "zai-org/GLM-5.3-Flash", "glm53-flash-a800-8008", ("maxNumSeqs", "64")),
    "ascend": (8077, "glm5.3-flash", "vllm-ascend-glm5.3", ("maxNumSeqs", "32")),
    "rtx5090": (8000, "glm-5.3-flash", "glm53-flash", ("maxNumSeqs", "8")),
}
WEIGHTS_DIR = {"a800": "GLM-5.3-Flash", "ascend": "GLM-5.3-Flash-w8a8", "rtx5090": "GLM-5.3-Flash-NVFP4"}


@pytest.fixture(scope="module")
def host() -> Iterator[StandinHost]:
    """One stand-in host for the module, with the local images loaded onto its engine."""
    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    for image in LOCAL_IMAGES.values():
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
            pytest.skip(f"local image {image} is missing (offline/images.sh makes it)")
    with StandinHost.create() as standin:
        for image in LOCAL_IMAGES.values():
            standin.load_image(image)
        (standin.root / SITE_DIR).mkdir(mode=0o755)
        yield standin


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> PulumiProject:
    return PulumiProject.copy_of_repo(tmp_path_factory.mktemp("rehearsal") / "glm")


def inspect(host: StandinHost, name: str) -> dict[str, Any]:
    result = host.docker("inspect", name)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]  # type: ignore[no-any-return]


def assert_rehearsal_container(host: StandinHost, name: str, stack: str, outputs: dict[str, Any]) -> None:
    """The profile's argv on the simulator image, with no accelerator request of any kind."""
    container = inspect(host, name)
    config, hostconfig = container["Config"], container["HostConfig"]
    assert config["Image"].startswith("glm53-vllm-sim:")
    assert config["Entrypoint"] == ["vllm", "serve"]
    # The profile's own argv, as production renders it (the vllmCommandLine output).
    assert ["vllm", "serve", *config["Cmd"]] == shlex.split(outputs["vllmCommandLine"])
    assert not hostconfig.get("DeviceRequests"), "a rehearsal must not request GPUs"
    assert not hostconfig.get("Devices"), "a rehearsal must not map accelerator devices"
    sources = [m["Source"] for m in container["Mounts"] if m["Type"] == "bind"]
    assert not [s for s in sources if s.startswith(("/usr/local/Ascend", "/usr/local/sbin", "/etc/hccn"))]
    assert str(host.models_dir) in sources
    if stack == "rtx5090":
        assert str(host.root / SITE_DIR) in sources


def assert_semantic_probe_passes_on_the_host(host: StandinHost, container: str, within: float = 60) -> None:
    """The semantic probe runs there too, over SSH like the rest, and the host's Prometheus has a
    successful run of it (its metrics scraped on the private network)."""
    query = "glm_semantic_probe_last_success_timestamp_seconds > 0"
    url = f"http://{host.address}:9090/api/v1/query"
    deadline = time.monotonic() + within
    found: list[Any] = []
    while time.monotonic() < deadline and not found:
        try:
            found = httpx.get(url, params={"query": query}, timeout=5).json()["data"]["result"]
        except (httpx.HTTPError, KeyError, ValueError):
            found = []
        if not found:
            time.sleep(1)
    assert found, f"no successful semantic probe run reached Prometheus on {host.address} in {within} s"
    state = inspect(host, f"{container}-semantic-probe")["State"]
    assert state["Running"], state


@pytest.mark.parametrize("stack", list(PROFILES))
def test_rehearsal_lifecycle_on_the_standin_host(
    project: PulumiProject, host: StandinHost, stack: str
) -> None:
    front_port, served_name, container, (flag, value) = PROFILES[stack]
    host.present(stack)  # the preflight checks the profile's own card
    project.init_stack(stack, config=rehearsal_config(host, stack), secrets={"glm:apiKeys.e2e": API_KEY})
    try:
        out = project.run("up", "--yes", "--skip-preview", "-s", stack, label=f"{stack} up")
        assert f"REHEARSAL of {stack}" in out, "the rehearsal warning is missing from pulumi up"
        assert API_KEY not in out
        outputs = project.outputs(stack)
        assert outputs["endpoint"] == f"http://{host.address}:{front_port}/v1"
        assert outputs["rehearsal"]["hardware"] == stack
        smoke = outputs["smoke"]
        assert smoke["served_name"] == served_name
        assert smoke["steps_skipped"] == {}, smoke["steps_skipped"]
        assert smoke["kv_pool_tokens"] >= smoke["max_model_len"]
        assert_rehearsal_container(host, container, stack, outputs)

        # A client on this machine, across the veth "network", through the front on the seed's port.
        client = OpenAI(base_url=outputs["endpoint"], api_key=API_KEY, timeout=30)
        reply = client.chat.completions.create(
            model=served_name, messages=[{"role": "user", "content": "What is 13×17?"}]
        )
        assert reply.choices[0].message.content.strip() == "221"
        assert_semantic_probe_passes_on_the_host(host, container)

        project.run("preview", "--expect-no-changes", "-s", stack, label=f"{stack} preview (no changes)")

        project.run("config", "set", "--path", f"glm:serving.{flag}", value, "-s", stack)
        steps = project.preview_steps(stack)
        changed = sorted({s["urn"].rsplit("::", 1)[1] for s in steps})
        # The flag is --max-num-seqs: the probe, which skips a saturated replica, is told it too, and
        # the front's config reloads for the usage meter's share table (the engine's slots).
        assert changed == [
            f"{stack}-front-config", f"{stack}-replica-gate", f"{stack}-semantic-probe-container",
            f"{stack}-serving-vllm", f"{stack}-smoke-gate",
        ], steps  # fmt: skip
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", stack, label=f"{stack} destroy", check=False)
    volume = host.docker("volume", "inspect", f"{container}-jit-cache")
    assert volume.returncode == 0, "destroy removed the JIT cache volume"
    left = host.docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert not [n for n in left if n.startswith(container)], left
    weights = host.models_dir / WEIGHTS_DIR[stack]
    assert (weights / "config.json").exists(), "destroy touched the weights"
    print(f"rehearsal {stack} timings (s):", {k: round(v, 1) for k, v in project.timings.items()})


def init_rehearsal(
    project: PulumiProject,
    host: StandinHost,
    name: str,
    stack: str = "a800",
    config: dict[str, str] | None = None,
    strings: dict[str, str] | None = None,
) -> None:
    """Stack ``name`` from ``Pulumi.<stack>.yaml``, rehearsed on ``host``, plus ``config`` (typed as
    the CLI guesses: numbers, booleans) and ``strings`` (kept strings, e.g. env values)."""
    host.present(stack)  # the preflight checks the profile's own card (an earlier test showed another)
    if name != stack:  # the committed stack file, not the copy an earlier test changed
        (project.root / f"Pulumi.{name}.yaml").write_text(
            stack_file_without_secrets(PROJECT / f"Pulumi.{stack}.yaml")
        )
    project.init_stack(
        name, config={**rehearsal_config(host, stack), **(config or {})}, secrets={"glm:apiKeys.e2e": API_KEY}
    )
    for key, value in (strings or {}).items():
        project.run("config", "set", "--path", "--type", "string", key, value, "-s", name)


def up(project: PulumiProject, stack: str, *args: str, check: bool = True) -> str:
    return project.run("up", "--yes", "--skip-preview", *args, "-s", stack, check=check)


def ask_221(endpoint: str, served_name: str = "zai-org/GLM-5.3-Flash") -> None:
    client = OpenAI(base_url=endpoint, api_key=API_KEY, timeout=30)
    reply = client.chat.completions.create(
        model=served_name, messages=[{"role": "user", "content": "What is 13×17?"}]
    )
    assert reply.choices[0].message.content.strip() == "221"


def created_resources(project: PulumiProject, stack: str) -> list[str]:
    """Names of the custom resources in the stack's state (components and the stack left out)."""
    state = json.loads(project.run("stack", "export", "-s", stack))
    return [
        r["urn"].rsplit("::", 1)[1]
        for r in state["deployment"].get("resources") or []
        if r.get("custom") and not r["type"].startswith("pulumi:")
    ]


# ---- promotion (Deliver 5) ----------------------------------------------------------------------


def test_promotion_between_two_rehearsal_stacks(project: PulumiProject, host: StandinHost) -> None:
    """a800-staging → a800 on one host, two port sets: passes when nothing differs, refused at
    preview when one flag differs, and a real (non-rehearsal) stack can never take the source."""
    source = "organization/glm/a800-staging"
    # Per-environment keys only: the staging box's container name and ports on the same host.
    init_rehearsal(
        project, host, "a800-staging", "a800-staging",
        config={"glm:container.name": "glm53-staging", "glm:front.port": "18008",
                "glm:monitoring.port": "19090"},
    )  # fmt: skip
    init_rehearsal(project, host, "a800-promoted", "a800", config={"glm:promoteFrom": source})
    try:
        up(project, "a800-staging")
        staging = project.outputs("a800-staging")
        assert staging["verified"]["servedModel"]["rehearsal"] is True

        up(project, "a800-promoted")
        promoted = project.outputs("a800-promoted")
        assert promoted["promotedFrom"] == {"stack": source, "imageRef": staging["verified"]["imageRef"]}
        assert promoted["fingerprint"] == staging["fingerprint"]
        ask_221(promoted["endpoint"])

        project.run("config", "set", "--path", "glm:serving.maxNumSeqs", "16", "-s", "a800-promoted")
        refused = project.run("preview", "-s", "a800-promoted", check=False)
        assert "would serve a different model" in refused and "argv has --max-num-seqs=16" in refused
        project.run("config", "set", "--path", "glm:serving.maxNumSeqs", "32", "-s", "a800-promoted")

        project.run("config", "set", "--path", "glm:rehearsal.enabled", "false", "-s", "a800-promoted")
        refused = project.run("preview", "-s", "a800-promoted", check=False)
        assert "the source is a rehearsal (glm:rehearsal)" in refused, refused[-3000:]
    finally:
        project.run("config", "set", "--path", "glm:rehearsal.enabled", "true", "-s", "a800-promoted")
        project.run("destroy", "--yes", "--run-program", "-s", "a800-promoted", check=False)
        project.run("destroy", "--yes", "--run-program", "-s", "a800-staging", check=False)


# ---- faults (Deliver 6) -------------------------------------------------------------------------


def test_weights_missing_preflight_refuses_before_anything_is_created(
    project: PulumiProject, host: StandinHost
) -> None:
    empty = host.root / "no-weights"
    name = "glm53-noweights"
    init_rehearsal(
        project, host, "a800-noweights", config={"glm:model.hostDir": str(empty), "glm:container.name": name}
    )
    out = up(project, "a800-noweights", check=False)
    assert f"weights check: {empty}/GLM-5.3-Flash/config.json is missing" in out, out[-3000:]
    assert created_resources(project, "a800-noweights") == []
    containers = host.docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert not [n for n in containers if n.startswith(name)], containers
    volumes = host.docker("volume", "ls", "--format", "{{.Name}}").stdout.split()
    assert f"{name}-jit-cache" not in volumes
    networks = host.docker("network", "ls", "--format", "{{.Name}}").stdout.split()
    assert f"{name}-net" not in networks
    project.run("destroy", "--yes", "--run-program", "-s", "a800-noweights", check=False)


def test_sshd_stopped_mid_up_fails_naming_the_host_and_a_rerun_completes(
    project: PulumiProject, host: StandinHost
) -> None:
    """The host vanishes while preflight runs on it (listener and open sessions cut); `up` fails
    naming the host; once sshd is back the same `up` completes and the weights are untouched."""
    name = "glm53-sshfault"
    init_rehearsal(project, host, "a800-sshfault", config={"glm:container.name": name})
    fake = host.root / "bin" / "nvidia-smi"
    original = fake.read_text()
    started = host.root / "home" / "glm" / "preflight-started"
    # A preflight that takes a while and says when it has begun.
    fake.write_text(original.replace("case", f": > {started}; sleep 20\ncase", 1))
    run = subprocess.Popen(
        ["pulumi", "up", "--yes", "--skip-preview", "--non-interactive", "-s", "a800-sshfault"],
        cwd=project.root, env=project.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        assert started.exists(), "preflight never started"
        host.stop_sshd(sessions=True)
        out, _ = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
        fake.write_text(original)
        if "sshd" not in host.processes:
            host.start_sshd()
    assert run.returncode != 0
    assert host.address in out, out[-3000:]
    assert not [r for r in created_resources(project, "a800-sshfault") if r.endswith(("-vllm", "-gate"))]
    try:
        up(project, "a800-sshfault")
        outputs = project.outputs("a800-sshfault")
        assert outputs["smoke"]["served_name"] == "zai-org/GLM-5.3-Flash"
        assert (host.models_dir / "GLM-5.3-Flash" / "config.json").exists()
        project.run("preview", "--expect-no-changes", "-s", "a800-sshfault")
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", "a800-sshfault", check=False)


def test_docker_engine_restarted_containers_come_back_and_refresh_changes_nothing(
    project: PulumiProject, host: StandinHost
) -> None:
    """dockerd stops (its containers with it) and starts: the restart policy brings vLLM, the front
    and Prometheus back as the same containers; `up --refresh` then finds them as deployed: no
    resource is replaced and the gate does not re-run (its container ID input is unchanged)."""
    name = "glm53-restart"
    init_rehearsal(
        project, host, "a800-restart", config={"glm:container.name": name, "glm:front.port": "28008"}
    )
    try:
        up(project, "a800-restart")
        before = {n: inspect(host, n)["Id"] for n in (name, f"{name}-nginx", f"{name}-prometheus")}
        host.stop_engine()
        host.start_engine()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = {n: inspect(host, n)["State"]["Running"] for n in before}
            if all(states.values()):
                break
            time.sleep(1)
        assert all(states.values()), states
        assert {n: inspect(host, n)["Id"] for n in before} == before
        out = up(project, "a800-restart", "--refresh")
        assert len(summary(out)) == 1 and summary(out)[0].endswith(" unchanged"), out[-3000:]
        project.run("preview", "--expect-no-changes", "-s", "a800-restart")
        ask_221(project.outputs("a800-restart")["endpoint"])
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", "a800-restart", check=False)


def test_vllm_killed_docker_restarts_it_front_answers_503_and_target_down_fires(
    project: PulumiProject, host: StandinHost
) -> None:
    """SIGKILL to the engine process: Docker restarts the container; while the (simulated) weights
    load, the front answers JSON 503 and Prometheus's VllmTargetDown fires (alert timing shortened
    through the stack config: scrape every 2 s, fire after 4 s down)."""
    name = "glm53-killed"
    init_rehearsal(
        project, host, "a800-killed",
        config={"glm:container.name": name, "glm:front.port": "38008", "glm:monitoring.port": "39090"},
        strings={"glm:monitoring.targetDownFor": "4s",
                 "glm:serving.extraEnv.VLLM_SIM_LOADING_SECONDS": "40"},
    )  # fmt: skip
    try:
        up(project, "a800-killed")
        endpoint = project.outputs("a800-killed")["endpoint"]
        container = inspect(host, name)
        os.kill(container["State"]["Pid"], signal.SIGKILL)

        status, body = 0, {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and status != 503:
            status, body = front_get(endpoint)
            time.sleep(0.5)
        assert status == 503, (status, body)
        assert body["error"]["code"] == "upstream_unavailable", body

        fired = None
        deadline = time.monotonic() + 35
        while time.monotonic() < deadline and fired is None:
            alerts = prometheus_alerts(host, 39090)
            fired = next((a for a in alerts if a["labels"]["alertname"] == "VllmTargetDown"
                          and a["state"] == "firing"), None)  # fmt: skip
            time.sleep(1)
        assert fired is not None, alerts
        restarted = inspect(host, name)
        assert restarted["RestartCount"] >= 1 and restarted["Id"] == container["Id"]

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and front_get(endpoint)[0] != 200:
            time.sleep(1)
        ask_221(endpoint)
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", "a800-killed", check=False)


def summary(out: str) -> list[str]:
    """The "Resources:" lines of a `pulumi up` (``["19 unchanged"]``)."""
    block = out.rsplit("Resources:", 1)[1].split("Duration:", 1)[0]
    return [line.strip() for line in block.strip().splitlines()]


def front_get(endpoint: str) -> tuple[int, Any]:
    """GET /v1/models through the front with the key: (status, JSON body)."""
    request = urllib.request.Request(f"{endpoint}/models", headers={"Authorization": f"Bearer {API_KEY}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")
    except OSError:
        return 0, {}


def prometheus_alerts(host: StandinHost, port: int) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://{host.address}:{port}/api/v1/alerts", timeout=10) as response:
            return json.loads(response.read())["data"]["alerts"]  # type: ignore[no-any-return]
    except OSError:
        return []
