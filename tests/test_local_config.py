"""Where the local stack's config lives (scripts/local_config.py, scripts/env.sh): what the user
sets with `scripts/pulumi.sh config set/rm -s local` is kept and deployed; the tracked file stays as
committed; the repository's new defaults still reach the user's copy; `make rollback` writes there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from ops.__main__ import main as ops_main
from tests.engine import PROJECT, core_engine_missing
from tests.local_clone import clone_env


def _sync(root: Path) -> dict[str, object]:
    subprocess.run(
        ["bash", "-c", f"source {root}/scripts/env.sh && sync_local_config"], env=clone_env(root), check=True
    )
    return yaml.safe_load((root.parent / "state" / "Pulumi.local.yaml").read_text())["config"]


def test_the_users_settings_survive_and_new_tracked_defaults_still_arrive(clone: Path) -> None:
    committed = (clone / "Pulumi.local.yaml").read_text()
    mine = clone.parent / "state" / "Pulumi.local.yaml"
    assert _sync(clone) == yaml.safe_load(committed)["config"]
    # What `config set --path glm:serving.extraEnv.F x` and `config rm glm:semanticProbe` write.
    data = yaml.safe_load(mine.read_text())
    data["config"]["glm:serving"] = {"extraEnv": {"F": "x"}}
    del data["config"]["glm:semanticProbe"]
    data["config"]["glm:front"]["port"] = 18480
    mine.write_text(yaml.safe_dump(data))
    kept = _sync(clone)
    assert kept["glm:serving"] == {"extraEnv": {"F": "x"}} and "glm:semanticProbe" not in kept
    assert kept["glm:front"] == {"image": "glm53-local/nginx:bookworm", "port": 18480}
    assert (clone / "Pulumi.local.yaml").read_text() == committed
    # The repository moves on: a changed default and a new key reach the copy; the user's stay.
    tracked = yaml.safe_load(committed)
    tracked["config"]["glm:front"]["image"] = "glm53-local/nginx:trixie"
    tracked["config"]["glm:smoke"] = {"deadlineSeconds": 60}
    (clone / "Pulumi.local.yaml").write_text(yaml.safe_dump(tracked))
    merged = _sync(clone)
    assert merged["glm:front"] == {"image": "glm53-local/nginx:trixie", "port": 18480}
    assert merged["glm:smoke"] == {"deadlineSeconds": 60}
    assert merged["glm:serving"] == {"extraEnv": {"F": "x"}} and "glm:semanticProbe" not in merged


@pytest.mark.skipif(core_engine_missing() is not None, reason=str(core_engine_missing()))
@pytest.mark.parametrize("stack", ["local", "local-k8s"])
def test_config_set_on_the_local_stack_is_what_config_get_answers(clone: Path, stack: str) -> None:
    """The issue's first line, as the user typed it; the same for the ready stack of the one-node
    cluster (make up STACK=local-k8s), whose key must not land in the repository either."""
    pulumi_sh = [str(clone / "scripts" / "pulumi.sh")]
    key = "glm:serving.extraEnv.VLLM_SIM_FAULT"
    run = {"env": clone_env(clone), "capture_output": True, "text": True, "timeout": 120}
    done = subprocess.run([*pulumi_sh, "config", "set", "--path", key, "wrong-answer", "-s", stack], **run)
    assert done.returncode == 0, done.stderr
    got = subprocess.run([*pulumi_sh, "config", "get", "--path", key, "-s", stack], **run)
    assert (got.returncode, got.stdout.strip()) == (0, "wrong-answer"), got.stderr
    tracked = f"Pulumi.{stack}.yaml"
    assert (clone / tracked).read_text() == (PROJECT / tracked).read_text()
    assert "VLLM_SIM_FAULT" in (clone.parent / "state" / tracked).read_text()
    gone = subprocess.run([*pulumi_sh, "config", "rm", "glm:semanticProbe", "-s", stack], **run)
    assert gone.returncode == 0, gone.stderr
    listed = subprocess.run([*pulumi_sh, "config", "--json", "-s", stack], **run)
    # Pulumi.yaml's empty default, which the program reads as "not set".
    assert json.loads(listed.stdout)["glm:semanticProbe"]["objectValue"] == {}


def test_rollback_of_the_local_stack_writes_the_users_config_not_the_tracked_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracked = tmp_path / "Pulumi.local.yaml"
    tracked.write_text((PROJECT / "Pulumi.local.yaml").read_text())
    calls: list[tuple[str, ...]] = []

    def pulumi(*args: str, stack: str) -> str:
        calls.append(args)
        if args[:2] == ("stack", "output"):
            return json.dumps({"config": {"hardware": "local"}})
        if args == ("config", "--json"):
            return json.dumps({"glm:serving": {"objectValue": {"extraEnv": {"F": "x"}}, "secret": False}})
        return ""

    class Done:
        returncode = 0

    monkeypatch.delenv("GLM_PULUMI", raising=False)
    monkeypatch.setattr("ops.__main__.ROOT", tmp_path)
    monkeypatch.setattr("ops.__main__.pulumi", pulumi)
    monkeypatch.setattr("ops.rollback.subprocess.run", lambda *a, **k: Done())
    assert ops_main(["rollback", "-s", "local"]) == 0
    assert ("config", "rm", "glm:serving") in calls
    assert tracked.read_text() == (PROJECT / "Pulumi.local.yaml").read_text()
