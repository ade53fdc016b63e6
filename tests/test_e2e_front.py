"""Front-only changes on the real engine: one reviewable diff, a reload, the same container.

`pulumi up` of the local stack → add a key: `preview --diff` shows only the front's config and the
cost ("drops nothing"), key names and hashes but no secret → `up` → the new key works, the nginx
container is the same → remove it: 401 → a vLLM flag change: the preview warns that the serving
container is replaced, with the profile's time to serve → `destroy`.
"""

from __future__ import annotations

import json
import re
import subprocess

import httpx
import pytest

from components.docker.nginx_reload import EFFECT
from components.profiles import PROFILES
from tests.e2e_weights import WEIGHTS
from tests.engine import PulumiProject, engine_missing

pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))

ALICE = "sk-e2e-alice-7009310eaadd6186"
BOB = "sk-e2e-bob-cd4132411d6b2a3d1"
SCRAPER = "sk-e2e-metrics-de21b37248bdbfc1"


def _container_id(name: str) -> str:
    return subprocess.run(
        ["docker", "inspect", "-f", "{{.Id}}", name], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_front_only_changes_reload_in_place(tmp_path_factory: pytest.TempPathFactory) -> None:
    if not (WEIGHTS / "config.json").exists():
        pytest.skip(f"the local weights fixture is missing: {WEIGHTS} (make test writes it)")
    project = PulumiProject.copy_of_repo(tmp_path_factory.mktemp("e2e-front") / "glm")
    container = project.init_local_stack(
        "glm53-e2e-front", secrets={"glm:apiKeys.alice": ALICE, "glm:metricsKeys.prom": SCRAPER}
    ).container
    try:
        first = project.run("preview", "--diff", "-s", "local")
        assert "the serving container is created or replaced" in first
        assert PROFILES["local"].facts.time_to_serve in first
        project.run("up", "--yes", "--skip-preview", "-s", "local", label="up (cold)")
        outputs = project.outputs("local")
        endpoint, metrics = outputs["endpoint"], outputs["metricsEndpoint"]
        assert (
            httpx.get(metrics, headers={"Authorization": f"Bearer {SCRAPER}"}, timeout=10).status_code == 200
        )
        assert httpx.get(metrics, headers={"Authorization": f"Bearer {ALICE}"}, timeout=10).status_code == 401
        nginx_id = _container_id(f"{container}-nginx")

        # Add a key: one reviewable diff, no secret in it; only the front's config changes (and the gate re-runs).
        project.run("config", "set", "--secret", "--path", "glm:apiKeys.bob", BOB, "-s", "local")
        diff = project.run("preview", "--diff", "-s", "local")
        changed = sorted({s["urn"].rsplit("::", 1)[1] for s in project.preview_steps("local")})
        # The front reloads in place, and the gate re-runs through it (its front_fingerprint changed).
        assert changed == ["local-front-config", "local-smoke-gate"], changed
        # By name (issue 47, 4): `+ bob : 1` (its weight in the meter's share), not renames of a sorted list.
        assert (
            re.search(r"\+ bob +: 1\n", diff)
            and " => " not in diff.split("api_key_names")[1].split("container")[0]
        )
        assert "secrets_digest" in diff and EFFECT[:60] in diff
        assert "the serving container is created or replaced" not in diff
        assert all(secret not in diff for secret in (ALICE, BOB, SCRAPER))
        project.run("up", "--yes", "--skip-preview", "-s", "local", label="up (key added)")
        bob = {"Authorization": f"Bearer {BOB}"}
        assert httpx.get(f"{endpoint}/models", headers=bob, timeout=10).status_code == 200
        assert _container_id(f"{container}-nginx") == nginx_id, "the front container was replaced"
        assert project.outputs("local")["frontFingerprint"] != outputs["frontFingerprint"]
        project.run("preview", "--expect-no-changes", "-s", "local")

        # Remove it: 401 for new requests as soon as `up` returns.
        project.run("config", "rm", "--path", "glm:apiKeys.bob", "-s", "local")
        project.run("up", "--yes", "--skip-preview", "-s", "local", label="up (key removed)")
        assert httpx.get(f"{endpoint}/models", headers=bob, timeout=10).status_code == 401
        assert _container_id(f"{container}-nginx") == nginx_id

        # A vLLM flag: the preview says the serving container is replaced and what that costs.
        project.run("config", "set", "--path", "glm:serving.maxNumSeqs", "4", "-s", "local")
        diff = project.run("preview", "--diff", "-s", "local")
        assert "the serving container is created or replaced" in diff
        assert PROFILES["local"].facts.time_to_serve in diff
        assert "the front container is created or replaced" not in diff
        state = json.loads(project.run("stack", "export", "-s", "local"))
        assert all(secret not in json.dumps(state) for secret in (ALICE, BOB, SCRAPER))
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", "local", check=False)
        subprocess.run(["docker", "volume", "rm", f"{container}-jit-cache"], capture_output=True)
    print("e2e front timings (s):", {k: round(v, 1) for k, v in project.timings.items()})
