"""Several stand-in GPU hosts in one stack, on the real engine (skipped, with the reason, without it).

The lifecycle, in order: ``up`` with two hosts (a gate per replica, then the front's) → no-op
preview → one vLLM flag rolls over the 2 hosts under load → a third host is one list entry: the
preview plans only its resources (and Prometheus' config) → ``up`` → one flag rolls over the 3
hosts under load → each replica's engine port, probed from another host, answers only the
replica key → removing a host takes it out of the front's rotation before its container goes →
destroy. The failure path: a version that answers wrongly rolls out under load; ``up`` fails
naming the host, no client gets a wrong answer or an error, and ``make rollback`` restores it.

Every load loop checks every answer (13x17 → 221, streamed or not; a stream must also end in
``[DONE]``) with the stack's defaults for the roll (stop grace, shutdown timeout). Figures are printed;
``GLM_MULTIHOST_REPORT=path`` also writes them as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engine import PulumiProject, engine_missing
from tests.multihost import ContainerWatch, LoadLoop, init_stack, set_config, set_hosts, standin_fleet
from tests.multihost_keys import API_KEY
from tests.standin_host import StandinHost, unavailable_reason

pytestmark = pytest.mark.skipif(
    engine_missing() is not None or unavailable_reason() is not None,
    reason=str(engine_missing() or unavailable_reason()),
)
FRONT_PORT = 18480


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[StandinHost]]:
    with standin_fleet(3, tmp_path_factory.mktemp("images"), lifetime_s=5400) as made:
        yield made


def changed(project: PulumiProject, stack: str) -> dict[str, str]:
    return {s["urn"].rsplit("::", 1)[1]: s["op"] for s in project.preview_steps(stack)}


# ---- the lifecycle --------------------------------------------------------------------------------


def roll_under_load(
    project: PulumiProject, stack: str, hosts: list[StandinHost], container: str, label: str
) -> tuple[dict[str, Any], str]:
    """``up`` while the load loop runs (from 3 s before to 3 s after); the figures, the order in
    which the replicas were replaced and when each replacement began."""
    replicas = {h.name: (h, container) for h in hosts}
    with ContainerWatch(replicas) as watch, LoadLoop(project.outputs(stack)["endpoint"], API_KEY) as load:
        time.sleep(3)
        out = project.run(
            "up", "--yes", "--skip-preview", "-s", stack, label=label, timeout=1800, check=False
        )
        time.sleep(3)
    figures = load.figures()
    # The loop ran from 3 s before the up to 3 s after it (not cut short by its request bound).
    assert figures["seconds"] >= project.timings[label] + 5, figures
    figures["replaced_in_order"] = watch.order()
    if watch.changes:
        first = watch.first_change(watch.order()[0])
        figures["replacement_started_s"] = [round(watch.first_change(n) - first, 1) for n in watch.order()]
    figures["up_s"] = round(project.timings[label], 1)
    print(f"{label} under load:", json.dumps(figures))
    return figures, out


def replica_key(project: PulumiProject, stack: str) -> str:
    """The stack's generated replica key, from its state (decrypted for the test only)."""
    state = json.loads(project.run("stack", "export", "--show-secrets", "-s", stack))
    resource = next(r for r in state["deployment"]["resources"] if r["urn"].endswith("::local-replica-key"))
    key = resource["outputs"]["key"]
    # A secret in an exported state: {"<signature>": "<secret sig>", "plaintext": "<JSON of the value>"}.
    return str(json.loads(key["plaintext"]) if isinstance(key, dict) else key)


def engine_port_status(from_host: StandinHost, url: str, key: str | None) -> str:
    """GET ``url`` from inside ``from_host``'s namespace (another machine of the private network)."""
    code = (
        "import sys, urllib.request, urllib.error\n"
        "req = urllib.request.Request(sys.argv[1])\n"
        "if len(sys.argv) > 2: req.add_header('Authorization', 'Bearer ' + sys.argv[2])\n"
        "try:\n    print(urllib.request.urlopen(req, timeout=5).status)\n"
        "except urllib.error.HTTPError as err:\n    print(err.code)\n"
        "except OSError as err:\n    print(type(err).__name__)\n"
    )
    argv = ["nsenter", f"--net=/var/run/netns/{from_host.name}", sys.executable, "-c", code, url]
    done = subprocess.run([*argv, *([key] if key else [])], capture_output=True, text=True, timeout=30)
    return done.stdout.strip() or done.stderr.strip()[-200:]


def test_hosts_join_roll_and_leave(hosts: list[StandinHost], tmp_path: Path) -> None:
    project = PulumiProject.copy_of_repo(tmp_path / "glm")
    stack = "local"
    figures: dict[str, Any] = {}
    init_stack(project, stack, hosts[:2], API_KEY, FRONT_PORT)
    container = f"glm53-multi-{stack}"
    try:
        project.run("up", "--yes", "--skip-preview", "-s", stack, label="up (2 hosts, cold)", timeout=1800)
        outputs = project.outputs(stack)
        assert sorted(outputs["replicas"]) == sorted(h.name for h in hosts[:2])
        for name, results in outputs["replicas"].items():
            assert results["host"] == name and results["kv_pool_tokens"] >= 32768, results
            assert "front_auth" not in results["steps_run"] and "streaming" in results["steps_run"]
        assert "front_auth" in outputs["smoke"]["steps_run"]
        project.run("preview", "--expect-no-changes", "-s", stack, label="preview (2 hosts, no-op)")

        # One vLLM flag over 2 hosts, under load, with the roll's default settings.
        project.run("config", "set", "--path", "glm:serving.maxNumSeqs", "6", "-s", stack)
        diff = project.run("preview", "--diff", "-s", stack)
        assert f"step 2 of the roll {hosts[0].name} -> {hosts[1].name}" in diff
        assert "Expected requests dropped: 0" in diff
        figures["roll_2_hosts"], out = roll_under_load(
            project, stack, hosts[:2], container, "up (rolling, 2 hosts)"
        )
        assert "error:" not in out, out[-3000:]

        # Adding a host is one list entry: only its resources, Prometheus' files (a release: it
        # reloads in place) and the front's gate; the front's config reloads only
        # for the usage meter's count of replicas (the new replica joins its rotation once its gate
        # passed).
        set_hosts(project, stack, hosts)
        plan = changed(project, stack)
        new = hosts[2].name
        others = {k: v for k, v in plan.items() if new not in k and k != f"{new}-docker"}
        # The probe asks every replica directly (issue 23): it learns of the new one too.
        assert others == {
            "local-front-config": "update",
            "local-monitoring-files": "update",
            "local-semantic-probe-container": "replace",
            "local-smoke-gate": "update",
        }, plan
        assert all(op == "create" for k, op in plan.items() if k not in others), plan
        project.run("up", "--yes", "--skip-preview", "-s", stack, label="up (add 3rd host)", timeout=1800)
        project.run("preview", "--expect-no-changes", "-s", stack, label="preview (3 hosts, no-op)")

        # One vLLM flag for every replica: they roll one host at a time under load.
        project.run("config", "set", "--path", "glm:serving.maxNumSeqs", "5", "-s", stack)
        plan = changed(project, stack)
        assert {k for k, op in plan.items() if op == "replace"} == {
            "local-serving-vllm",
            f"local-{hosts[1].name}-serving-vllm",
            f"local-{new}-serving-vllm",
            "local-semantic-probe-container",  # told the new --max-num-seqs (saturation skips)
        }, plan
        figures["roll_3_hosts"], out = roll_under_load(
            project, stack, hosts, container, "up (rolling, 3 hosts)"
        )
        assert "error:" not in out, out[-3000:]
        project.run("preview", "--expect-no-changes", "-s", stack)

        # Each replica's engine port, from another host of the private network: the guard answers
        # only the stack's replica key.
        key = replica_key(project, stack)
        ports = {}
        for target in hosts[1:]:
            url = f"http://{target.address}:8000/v1/models"
            ports[target.name] = {
                "no key": engine_port_status(hosts[0], url, None),
                "an API key": engine_port_status(hosts[0], url, API_KEY),
                "the replica key": engine_port_status(hosts[0], url, key),
                "/tokenize with it": engine_port_status(
                    hosts[0], f"http://{target.address}:8000/tokenize", key
                ),
            }
        figures["engine_ports"] = ports
        print("engine ports from another host:", json.dumps(ports))
        assert all(
            p == {"no key": "401", "an API key": "401", "the replica key": "200", "/tokenize with it": "404"}
            for p in ports.values()
        ), ports

        # Removing a host: it leaves the front's rotation first (drained; the front's container and
        # config stay), then the host's container goes.
        set_hosts(project, stack, hosts[:2])
        front_id = (
            hosts[0].docker("ps", "-q", "--no-trunc", "--filter", f"name=^{container}-nginx$").stdout.strip()
        )

        def front_lists_the_leaving_host() -> str:
            rotation = hosts[0].docker(
                "exec", f"{container}-nginx", "cat", "/etc/nginx/glm/rotation/upstream.conf"
            )
            return "listed" if f"server {hosts[2].address}:" in rotation.stdout else "unlisted"

        leaving = {"front": front_lists_the_leaving_host, "leaving": (hosts[2], container)}
        with ContainerWatch(leaving) as watch:
            project.run("up", "--yes", "--skip-preview", "-s", stack, label="up (remove host)")
            time.sleep(2)
        changes = [(label, ident) for _, label, ident in watch.changes]
        assert changes == [("front", "unlisted"), ("leaving", "gone")], changes
        assert (
            hosts[0].docker("ps", "-q", "--no-trunc", "--filter", f"name=^{container}-nginx$").stdout.strip()
            == front_id
        )
        project.run("preview", "--expect-no-changes", "-s", stack)
        for roll in ("roll_2_hosts", "roll_3_hosts"):
            got = figures[roll]
            assert got["replaced_in_order"] == [
                h.name for h in hosts[: 2 if roll == "roll_2_hosts" else 3]
            ], got
            assert (got["failed"], got["cut_streams"], got["wrong_answers"]) == (0, 0, 0), got
    finally:
        project.run(
            "destroy", "--yes", "--run-program", "-s", stack, label="destroy", check=False, timeout=1800
        )
        figures["timings_s"] = {k: round(v, 1) for k, v in project.timings.items()}
        print("multihost figures:", json.dumps(figures))
        if os.environ.get("GLM_MULTIHOST_REPORT"):
            Path(os.environ["GLM_MULTIHOST_REPORT"]).write_text(json.dumps(figures, indent=2))


def test_a_version_that_answers_wrongly_never_serves_and_rollback_restores(
    hosts: list[StandinHost], tmp_path: Path
) -> None:
    project = PulumiProject.copy_of_repo(tmp_path / "glm")
    stack = "local"
    init_stack(project, stack, hosts[:2], API_KEY, FRONT_PORT)
    container = f"glm53-multi-{stack}"
    figures: dict[str, Any] = {}
    try:
        project.run("up", "--yes", "--skip-preview", "-s", stack, label="up (2 hosts, cold)", timeout=1800)
        # The simulator's wrong-answer fault: 13x17 comes back 222 from the new version.
        set_config(project, stack, "glm:serving", {"extraEnv": {"VLLM_SIM_FAULT": "wrong-answer"}})
        figures["bad_roll"], out = roll_under_load(project, stack, hosts[:2], container, "up (wrong answers)")
        # Named: the host, the step, what came back, what to do; and no Python traceback.
        assert f"the replica on host '{hosts[0].name}' failed its gate at step 'arithmetic'" in out, out[
            -3000:
        ]
        assert "got '222'" in out and "make rollback" in out and "Traceback" not in out, out[-3000:]
        got = figures["bad_roll"]
        # The roll stopped at the first host; the second was never touched.
        assert got["replaced_in_order"] == [hosts[0].name], got
        assert (got["wrong_answers"], got["failed"], got["cut_streams"]) == (0, 0, 0), got

        # The way back, in one command, timed.
        started = time.monotonic()
        back = subprocess.run(
            [sys.executable, "-m", "ops", "rollback", "-s", stack],
            cwd=project.root, env={**project.env, "GLM_PULUMI": "pulumi --non-interactive"},
            capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        figures["rollback_s"] = round(time.monotonic() - started, 1)
        assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
        assert "glm:serving back to the last version that passed its gate: removed" in back.stdout
        with LoadLoop(project.outputs(stack)["endpoint"], API_KEY) as load:
            time.sleep(5)
        figures["after_rollback"] = load.figures()
        assert figures["after_rollback"]["answered_right"] > 0, figures
        assert (figures["after_rollback"]["wrong_answers"], figures["after_rollback"]["failed"]) == (0, 0)
        project.run("preview", "--expect-no-changes", "-s", stack)
    finally:
        project.run("destroy", "--yes", "--run-program", "-s", stack, check=False, timeout=1800)
        print("wrong-answer roll figures:", json.dumps(figures))
