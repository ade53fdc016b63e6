"""The smoke gate on the REAL Pulumi engine: the dynamic-provider path, no Docker or command plugin.

The gate alone, without Docker or the command provider: it needs only the engine, the Python
language host and ``pulumi-resource-pulumi-python``. ``tests/engine_gate_program`` is a tiny project that reads the
``glm:*`` config like the main program and creates only ``SmokeTest``, pointed at a front that runs
already: here the vLLM-protocol simulator behind a real nginx with the rendered front config, both on
free loopback ports. On a throwaway copy with its own file backend:

``up`` (the gate passes) → ``preview --expect-no-changes`` → the key is ciphertext everywhere in the
state → one vLLM flag changed: ``preview --diff`` shows exactly that flag → ``up`` re-runs the
gate → simulator stopped and a flag changed: ``up`` fails with the gate's step message and the state
keeps the last passing gate → ``destroy`` (delete is a no-op).

The provider is pickled by reference (``components.verification.smoke_gate.SmokeTestProvider``), so the provider
process must import ``components``; this program lives outside the repository, so ``PYTHONPATH`` is
the repo root. (The main program needs no such thing: the repository is its working directory.) The
language host honours ``runtime.options.virtualenv``: the test checks the program's ``sys.prefix``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import build_stack_config
from components.gate.settings import ALL_SMOKE_STEPS
from tests.conftest import PROJECT
from tests.engine import PulumiProject
from tests.gate.support import NGINX, Sim, start_front, start_sim, stop

PROGRAM = Path(__file__).resolve().parent / "engine_gate_program"
VENV = PROJECT / ".venv"
STACK = "gate"
SECRET_SIG = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"}
GATE_URN_SUFFIX = "pulumi-python:dynamic:Resource::gate-gate"
DEADLINE_SECONDS = 3


def gate_engine_missing() -> str | None:
    """Why the gate cannot run on the real engine here, or None."""
    if shutil.which("pulumi") is None:
        return "the pulumi CLI is not on PATH (scripts/engine.sh builds it; make test puts it there)"
    for plugin in ("pulumi-language-python", "pulumi-resource-pulumi-python"):
        if shutil.which(plugin) is None:
            return f"{plugin} is not on PATH (scripts/engine.sh builds it)"
    if not (VENV / "bin" / "python").exists():
        return "no .venv (make test creates it)"
    if not Path(NGINX).exists():
        return "nginx is not installed"
    return None


pytestmark = pytest.mark.skipif(gate_engine_missing() is not None, reason=str(gate_engine_missing()))


@dataclass
class GateProject(PulumiProject):
    """The gate program in a temp dir (see the module docstring for its environment)."""

    @classmethod
    def copy_of_program(cls, into: Path) -> GateProject:
        into.mkdir(parents=True)
        shutil.copy2(PROGRAM / "__main__.py", into / "__main__.py")
        project = yaml.safe_load((PROGRAM / "Pulumi.yaml").read_text())
        project["runtime"]["options"]["virtualenv"] = str(VENV)
        (into / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
        (into / "state").mkdir()
        return cls(into)

    @property
    def env(self) -> dict[str, str]:
        return {
            **super().env,
            "PYTHONPATH": str(PROJECT),
            "GLM_REPO_ROOT": str(PROJECT),
        }

    def attempt(self, *args: str, label: str | None = None, stdin: str | None = None) -> tuple[int, str]:
        """``pulumi <args>``: exit status and stdout + stderr, without raising."""
        start = time.monotonic()
        result = subprocess.run(
            ["pulumi", *args, "--non-interactive", "--color=never"],
            cwd=self.root,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if label:
            self.timings[label] = time.monotonic() - start
        return result.returncode, result.stdout + result.stderr

    def export(self) -> dict[str, Any]:
        return json.loads(self.run("stack", "export", "-s", STACK))


@dataclass
class Setup:
    project: GateProject
    sim: Sim
    front_url: str
    api_key: str


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    api_key = "sk-engine-gate-" + secrets.token_hex(16)
    sim = start_sim(build_stack_config({"hardware": "local"}))
    procs: list[subprocess.Popen[Any]] = [sim.proc]
    try:
        sim.wait_ready()
        front, port = start_front(sim.port, {"ci": api_key}, tmp_path / "nginx")
        procs.append(front)
        front_url = f"http://127.0.0.1:{port}/v1"
        yield Setup(GateProject.copy_of_program(tmp_path / "program"), sim, front_url, api_key)
    finally:
        for proc in procs:
            stop(proc)


def changed_lines(text: str) -> list[str]:
    """The lines of a ``pulumi preview --diff`` that mark a change, whitespace collapsed."""
    marked = [" ".join(line.split()) for line in text.splitlines()]
    return [line for line in marked if line[:2] in ("~ ", "+ ", "- ", "+-", "-+")]


def gate_state(state: dict[str, Any]) -> dict[str, Any]:
    [gate] = [r for r in state["deployment"]["resources"] if r["urn"].endswith(GATE_URN_SUFFIX)]
    return gate


def test_gate_lifecycle_on_the_real_engine(setup: Setup) -> None:
    project, key = setup.project, setup.api_key
    transcripts: dict[str, str] = {}
    keep = os.environ.get("GLM_ENGINE_GATE_TRANSCRIPTS")  # a folder: docs/preview-diff.md came from there

    def record(label: str, out: str) -> None:
        transcripts[label] = out
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / (re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") + ".txt")).write_text(out)

    def run(label: str, *args: str) -> str:
        status, out = project.attempt(*args, "-s", STACK, label=label)
        record(label, out)
        assert status == 0, f"pulumi {' '.join(args)} failed ({status}):\n{out[-6000:]}"
        return out

    # ---- a stack configured like the main program's: plain glm:* objects, the key as a secret ----
    project.run("stack", "init", STACK)
    config = {
        "glm:frontUrl": setup.front_url,
        "glm:serving": {"maxNumSeqs": 8},
        "glm:smoke": {
            "chatTemplateKwargs": {"reasoning_effort": "low"},
            "deadlineSeconds": DEADLINE_SECONDS,
            "metricsUrl": f"{setup.sim.url}/metrics",
            "pollSeconds": 0.2,
        },
    }
    as_cli = {
        k: {"value": v if isinstance(v, str) else json.dumps(v), "secret": False}
        | ({} if isinstance(v, str) else {"objectValue": v})
        for k, v in config.items()
    }
    project.run("config", "set-all", "--json", json.dumps(as_cli), "-s", STACK)
    # From stdin: the key is on no command line.
    status, out = project.attempt(
        "config", "set", "--secret", "--path", "glm:apiKeys.ci", "-s", STACK, stdin=key
    )
    assert status == 0, out
    assert key not in (project.root / f"Pulumi.{STACK}.yaml").read_text()

    # ---- up: the gate passes through the front ----
    run("up (create)", "up", "--yes", "--skip-preview")
    outputs = project.outputs(STACK)
    smoke = outputs["smoke"]
    assert smoke["served_name"] == "glm-5.3-flash"
    assert smoke["steps_run"] == ALL_SMOKE_STEPS
    assert set(smoke["latency_ms"]) == {"readiness", *ALL_SMOKE_STEPS}
    assert all(isinstance(v, (int, float)) and v >= 0 for v in smoke["latency_ms"].values())
    assert smoke["kv_pool_tokens"] == 4 * 32768
    assert smoke["vllm_version"] == "0.33.0"
    assert Path(outputs["programPython"]).resolve() == VENV.resolve(), "the program ran outside .venv"

    # ---- no diff right after up: deterministic inputs, floats coerced back in the stored outputs ----
    run("preview (no changes)", "preview", "--expect-no-changes")

    # ---- the key is a secret input: ciphertext only, in the state and in the outputs ----
    state = project.export()
    gate = gate_state(state)
    for where in ("inputs", "outputs"):
        for name in ("api_key", "__provider"):  # the key, its fingerprint; the pickled provider
            stored = gate[where][name]
            assert set(stored) == {*SECRET_SIG, "ciphertext"}, f"{where}.{name} is not ciphertext"
            assert {k: stored[k] for k in SECRET_SIG} == SECRET_SIG
    assert isinstance(gate["outputs"]["results"], dict), "the results are plain (readable) outputs"
    encoded = base64.b64encode(key.encode()).decode()
    for path in [*project.root.rglob("*")]:
        if path.is_file():
            data = path.read_bytes()
            assert key.encode() not in data and encoded.encode() not in data, f"the key is in {path}"
    assert key not in json.dumps(state)
    assert key not in json.dumps(project.outputs(STACK))  # --show-secrets: nothing secret to show

    # ---- one vLLM flag changed: the gate updates, and only that flag differs ----
    project.run("config", "set", "--path", "glm:serving.maxNumSeqs", "4", "-s", STACK)
    diff = run("preview --diff (one flag)", "preview", "--diff")
    # The gate's inputs are hidden (they restate the container's argv); one line says which changed.
    assert changed_lines(diff) == [
        "~ pulumi-python:dynamic:Resource: (update)",
        '~ ["*"] (hidden)',
        "~ 1 to update",
    ], diff
    assert "[smoke-gate] the gate through the front re-runs: flags changed" in diff, diff
    assert f"[urn=urn:pulumi:{STACK}::glm::glm:smoke:SmokeTest${GATE_URN_SUFFIX}]" in diff
    assert "2 unchanged" in diff
    steps = project.preview_steps(STACK)
    assert [(s["op"], s["urn"].rsplit("::", 1)[1]) for s in steps] == [("update", "gate-gate")]

    up = run("up (one flag)", "up", "--yes", "--skip-preview")
    assert "[diff: ~flags]" in up
    assert "[smoke-gate] passed in" in up, "the gate did not re-run"
    assert project.outputs(STACK)["smoke"]["served_name"] == "glm-5.3-flash"
    assert gate_state(project.export())["outputs"]["flags"]["--max-num-seqs"] == "4"
    run("preview (no changes after update)", "preview", "--expect-no-changes")
    passing = project.outputs(STACK)["smoke"]

    # ---- the model goes away and a flag changes: up fails at the gate's step, with its message ----
    stop(setup.sim.proc)
    project.run("config", "set", "--path", "glm:serving.maxNumSeqs", "2", "-s", STACK)
    status, failed = project.attempt("up", "--yes", "--skip-preview", "-s", STACK, label="up (gate fails)")
    record("up (gate fails)", failed)
    assert status != 0, failed
    assert "smoke gate failed at step 'readiness'" in failed, failed
    assert f"not ready after {DEADLINE_SECONDS} s (glm:smoke.deadlineSeconds={DEADLINE_SECONDS})" in failed
    assert "HTTP 503" in failed  # the front answers; its upstream is gone
    # The state keeps the last passing gate: its inputs, its results, and the change still pending.
    assert project.outputs(STACK)["smoke"] == passing
    assert gate_state(project.export())["inputs"]["flags"]["--max-num-seqs"] == "4"
    status, pending = project.attempt("preview", "--diff", "--expect-no-changes", "-s", STACK)
    assert status != 0 and "the gate through the front re-runs: flags changed" in pending, pending

    # ---- destroy: delete is a no-op (the simulator is still down) ----
    run("destroy", "destroy", "--yes")
    assert project.export()["deployment"].get("resources") in (None, [])

    for label, text in transcripts.items():
        assert key not in text, f"the key is in the output of {label}"
    print("engine gate timings (s):", {k: round(v, 1) for k, v in project.timings.items()})
