"""The local stack's status page works from `make up` (issue 47, item 9): scripts/status_page.sh
makes the local stack's metrics key once, as scripts/env.sh makes its API key, and prints the page's
address with it. Run on a copy of the scripts with its own file backend and passphrase, by the real
``pulumi`` CLI (no stack is deployed: the endpoint output is imported as `pulumi up` would leave it)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from components.config import check_api_keys, check_metrics_keys
from tests.engine import core_engine_missing
from tests.local_clone import clone_env

pytestmark = pytest.mark.skipif(core_engine_missing() is not None, reason=str(core_engine_missing()))

ENDPOINT = "http://127.0.0.1:18080/v1"
"""The local stack's ``endpoint`` output (the front's port is ``glm:front.port``)."""


def _bash(root: Path, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"source {root}/scripts/env.sh && ensure_engine >/dev/null && ensure_passphrase && {script}"],
        env=clone_env(root), cwd=root, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _config_get(root: Path, key: str) -> str:
    got = _bash(root, f"pulumi config get --path '{key}' -s local --config-file \"$GLM_LOCAL_CONFIG\"")
    assert got.returncode == 0, got.stderr
    return got.stdout.strip()


def test_make_up_makes_a_metrics_key_once_and_prints_the_pages_address(clone: Path) -> None:
    made = [_bash(clone, f"ensure_stack local && ensure_local_key && {clone}/scripts/status_page.sh key")]
    made.append(_bash(clone, f"{clone}/scripts/status_page.sh key"))  # the next `make up`
    assert [m.returncode for m in made] == [0, 0], [m.stderr for m in made]
    assert "generating the local stack's metrics key" in made[0].stderr
    assert "generating" not in made[1].stderr  # made once: the page's link stays valid

    # In the user's copy of the config, encrypted; the tracked file stays as committed.
    stored = yaml.safe_load((clone.parent / "state" / "Pulumi.local.yaml").read_text())["config"]
    assert set(stored["glm:metricsKeys"]) == {"local"} and "secure" in stored["glm:metricsKeys"]["local"]
    assert "metricsKeys" not in (clone / "Pulumi.local.yaml").read_text()
    metrics_key = _config_get(clone, "glm:metricsKeys.local")
    api_key = _config_get(clone, "glm:apiKeys.local")
    # What the program refuses at `pulumi up` it must not make: random enough, apart from the API key.
    assert check_api_keys({"local": api_key}) == []
    assert check_metrics_keys({"local": metrics_key}, {"local": api_key}) == []

    # After `make up`: the endpoint output, as the stack's state holds it.
    exported = _bash(clone, "pulumi stack export -s local")
    assert exported.returncode == 0, exported.stderr
    state = json.loads(exported.stdout)
    state["deployment"]["resources"] = [
        {
            "urn": "urn:pulumi:local::glm::pulumi:pulumi:Stack::glm-local",
            "custom": False,
            "type": "pulumi:pulumi:Stack",
            "outputs": {"endpoint": ENDPOINT},
        }
    ]
    (clone.parent / "state.json").write_text(json.dumps(state))
    imported = _bash(clone, f"pulumi stack import -s local --file {clone.parent / 'state.json'}")
    assert imported.returncode == 0, imported.stderr
    url = subprocess.run(
        [str(clone / "scripts" / "status_page.sh"), "url"],
        env=clone_env(clone), cwd=clone, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert url.returncode == 0, url.stderr
    assert url.stdout == f"http://127.0.0.1:18080/status/#key={metrics_key}\n"
