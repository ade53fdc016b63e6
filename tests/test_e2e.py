"""End to end on the real engine and the local Docker engine (skipped, with the reason, without them).

`pulumi up` of the local stack → gate passes through the front → `preview --expect-no-changes` →
one vLLM flag changed → preview shows only the serving container and the gate → `up` → `destroy`
leaves the weights and the JIT cache volume. Plus `pulumi preview` of every hardware stack with the
Docker host overridden to the local daemon.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from openai import OpenAI

from tests.e2e_weights import WEIGHTS
from tests.engine import PulumiProject, engine_missing

pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))

API_KEY = "sk-e2e-66d14f15d7d607446fcb"


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True, timeout=60).stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> PulumiProject:
    return PulumiProject.copy_of_repo(tmp_path_factory.mktemp("e2e") / "glm")


def test_local_stack_lifecycle(project: PulumiProject) -> None:
    if not (WEIGHTS / "config.json").exists():
        pytest.skip(f"the local weights fixture is missing: {WEIGHTS} (make test writes it)")
    # The usage meter is in the path (the default on Docker hosts): the real engine's lifecycle through it.
    container = project.init_local_stack("glm53-e2e", secrets={"glm:apiKeys.e2e": API_KEY}).container
    cache_volume = f"{container}-jit-cache"
    try:
        out = project.run("up", "--yes", "--skip-preview", "-s", "local", label="up (cold)")
        assert API_KEY not in out, "the API key leaked into pulumi up's output"
        outputs = project.outputs("local")
        assert outputs["smoke"]["served_name"] == "glm-5.3-flash"

        client = OpenAI(base_url=outputs["endpoint"], api_key=API_KEY, timeout=30)
        reply = client.chat.completions.create(
            model="glm-5.3-flash", messages=[{"role": "user", "content": "What is 13×17?"}]
        )
        assert reply.choices[0].message.content.strip() == "221"
        # Through the usage meter in the front's nginx, counted under the key's name, exactly: the gate
        # sends its own key (smoke-gate), counted apart. The stack's Prometheus scrapes the meter.
        read = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9146/metrics/usage').read().decode())"
        meter = docker("exec", f"{container}-nginx", "python3", "-c", read)
        counted = re.search(r'^glm_key_prompt_tokens_total\{client="e2e"\} (\d+)$', meter, re.M)
        assert counted and int(counted[1]) == reply.usage.prompt_tokens, meter
        assert re.search(r'^glm_key_requests_total\{client="smoke-gate",status="200"\} [1-9]', meter, re.M), (
            meter
        )
        up = 'up{job="usage-meter"}'
        deadline = time.monotonic() + 60
        while '"1"' not in (answer := docker("exec", f"{container}-prometheus", "promtool", "query", "instant",
                                             "-o", "json", "http://localhost:9090", up)):  # fmt: skip
            assert time.monotonic() < deadline, f"Prometheus does not scrape the meter: {answer}"
            time.sleep(2)

        project.run("preview", "--expect-no-changes", "-s", "local", label="preview (no changes)")
        project.run("up", "--yes", "--skip-preview", "-s", "local", label="up (no-op)")

        project.run("config", "set", "--path", "glm:serving.maxNumSeqs", "4", "-s", "local")
        steps = project.preview_steps("local")
        changed = sorted({s["urn"].rsplit("::", 1)[1] for s in steps})
        # The probe is told the new --max-num-seqs (it skips a saturated replica): its container too.
        # The usage meter's share table is in the front's config: a reload, the meter keeps running.
        assert changed == [
            "local-front-config", "local-replica-gate", "local-semantic-probe-container",
            "local-serving-vllm", "local-smoke-gate",
        ], steps  # fmt: skip
        project.run("up", "--yes", "--skip-preview", "-s", "local", label="up (one flag)")
        project.run("preview", "--expect-no-changes", "-s", "local")
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", "local", label="destroy", check=False)
    volume = subprocess.run(["docker", "volume", "inspect", cache_volume], capture_output=True)
    assert volume.returncode == 0, "destroy removed the JIT cache volume"
    assert (WEIGHTS / "config.json").exists(), "destroy touched the weights"
    subprocess.run(["docker", "volume", "rm", cache_volume], capture_output=True)
    print("e2e timings (s):", {k: round(v, 1) for k, v in project.timings.items()})


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090"])
def test_hardware_stack_previews_on_the_real_engine(project: PulumiProject, stack: str) -> None:
    """The program beyond mocks: the real engine plans every resource of the hardware stack."""
    project.init_stack(stack, config={}, secrets={"glm:apiKeys.review": API_KEY})
    out = project.run(
        "preview",
        "--diff",
        "-s",
        stack,
        label=f"preview {stack}",
        extra_env={"GLM_DOCKER_HOST": "unix:///var/run/docker.sock"},
    )
    for resource in (f"{stack}-serving-vllm", f"{stack}-front-nginx", f"{stack}-smoke-gate"):
        assert resource in out, f"{resource} missing from the preview"
    assert "--tensor-parallel-size=8" in out
    assert API_KEY not in out
