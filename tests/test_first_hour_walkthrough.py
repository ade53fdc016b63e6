"""Issue 32's first hour, walked as a user on the local stack: `scripts/pulumi.sh` and `make` in a
copy of the project (its own backend, its own `GLM_STATE_DIR`, free ports and names), one stack
shared by the steps, in the issue's order. Each step asserts on what the user sees: exit codes, the
lines printed, what `config get` answers, what clients got (the 503 windows are printed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.engine import PROJECT, PulumiProject, _diagnostics, engine_missing, free_port

pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))
KEY = "sk-walk-3f9a1c7e5b2d8046a1c9e7f3"
FAULT = "glm:serving.extraEnv.VLLM_SIM_FAULT"


@dataclass
class User:
    """The user's shell in the project copy: scripts/pulumi.sh, make, curl-like requests."""

    root: Path
    env: dict[str, str]
    name: str
    seen: list[str] = field(default_factory=list)

    def sh(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        self.seen.append(
            f"$ {' '.join(argv)} -> {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
        )
        return done

    def pulumi(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return self.sh("scripts/pulumi.sh", *args, "-s", "local", timeout=timeout)

    def make(self, verb: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return self.sh("make", "--no-print-directory", verb, "STACK=local", timeout=timeout)

    def ask(self) -> int:
        """One chat request through the front, as a client: its HTTP status (0: no answer)."""
        outputs = json.loads(self.pulumi("stack", "output", "--json").stdout)
        return ask(outputs["endpoint"], outputs["servedModelName"])


def ask(endpoint: str, model: str) -> int:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "13*17?"}], "max_tokens": 8})
    request = urllib.request.Request(
        f"{endpoint}/chat/completions", body.encode(),
        {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


class Clients(threading.Thread):
    """A client asking every 0.5 s while an operation runs; the statuses, stamped."""

    def __init__(self, endpoint: str, model: str) -> None:
        super().__init__(daemon=True)
        self.endpoint, self.model = endpoint, model
        self.got: list[tuple[float, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self.done.is_set():
            self.got.append((time.monotonic() - start, ask(self.endpoint, self.model)))
            self.done.wait(0.5)

    def stop(self) -> str:
        self.done.set()
        self.join(15)
        bad = [t for t, code in self.got if code != 200]
        window = f"{bad[-1] - bad[0] + 0.5:.1f} s" if bad else "0 s"
        return f"{len(bad)} of {len(self.got)} requests not 200 over a {window} window: {sorted({c for _, c in self.got})}"


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> Iterator[User]:
    root = tmp_path_factory.mktemp("walk") / "glm"
    project = PulumiProject.copy_of_repo(root)
    shutil.copytree(PROJECT / "scripts", root / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Makefile", "requirements-dev.txt"):
        shutil.copy2(PROJECT / name, root / name)
    (root / "Pulumi.local.yaml").write_text((PROJECT / "Pulumi.local.yaml").read_text())
    port = free_port()
    env = {**project.env, "GLM_STATE_DIR": str(root.parent / "user")}
    env.pop("GLM_PULUMI", None)
    walker = User(root, env, f"glm53-walk-{port}")
    for key, value in {"glm:front.port": str(port), "glm:monitoring.port": str(free_port()),
                       "glm:container.name": walker.name}.items():  # fmt: skip
        assert walker.pulumi("config", "set", "--path", key, value).returncode == 0
    assert walker.pulumi("config", "set", "--secret", "--path", "glm:apiKeys.walk", KEY).returncode == 0
    try:
        yield walker
    finally:
        print("\n".join(walker.seen))
        walker.pulumi("destroy", "--yes")  # after a failed test: the step that destroys did not run
        subprocess.run(["docker", "volume", "rm", f"{walker.name}-jit-cache"], capture_output=True)


def test_1_up_then_config_set_is_kept_and_the_tracked_file_stays(user: User) -> None:
    up = user.pulumi("up", "--yes", "--skip-preview")
    assert up.returncode == 0, up.stdout[-3000:]
    assert user.ask() == 200
    assert user.pulumi("config", "set", "--path", FAULT, "wrong-answer").returncode == 0
    got = user.pulumi("config", "get", "--path", FAULT)
    assert (got.returncode, got.stdout.strip()) == (0, "wrong-answer"), got.stderr
    assert (user.root / "Pulumi.local.yaml").read_text() == (PROJECT / "Pulumi.local.yaml").read_text()


def test_2_a_misspelt_top_level_key_is_refused_at_preview_with_the_nearest_one(user: User) -> None:
    assert user.pulumi("config", "set", "--path", "glm:servng.maxNumSeqs", "4").returncode == 0
    preview = user.pulumi("preview")
    assert (
        preview.returncode != 0
        and "glm:servng is not a known key; did you mean glm:serving?" in preview.stdout
    )
    no_traceback(preview)
    assert user.pulumi("config", "rm", "glm:servng").returncode == 0


def test_3_the_failed_gate_says_503_and_status_does_not_contradict_itself(user: User) -> None:
    up = user.pulumi("up", "--yes", "--skip-preview")
    assert up.returncode != 0
    said = up.stdout + up.stderr
    assert "the API answers 503" in said and "make rollback STACK=local" in said
    assert "served by the replicas that passed" not in said and "<stack>" not in said
    assert user.ask() == 503
    status = user.make("status")
    no_traceback(status)
    assert "failed at" in status.stdout and "(not with the last update, which failed)" in status.stdout


def test_4_rollback_writes_the_users_config_and_serves_again(user: User) -> None:
    outputs = json.loads(user.pulumi("stack", "output", "--json").stdout)
    clients = Clients(outputs["endpoint"], outputs["servedModelName"])
    clients.start()
    started = time.monotonic()
    rollback = user.make("rollback")
    took = time.monotonic() - started
    print(f"rollback: {took:.1f} s; {clients.stop()}")
    assert rollback.returncode == 0, rollback.stdout[-3000:] + rollback.stderr[-3000:]
    assert user.pulumi("config", "get", "--path", FAULT).returncode != 0  # the user's copy, rolled back
    assert (user.root / "Pulumi.local.yaml").read_text() == (PROJECT / "Pulumi.local.yaml").read_text()
    assert user.ask() == 200


def test_5_restart_on_one_box(user: User) -> None:
    outputs = json.loads(user.pulumi("stack", "output", "--json").stdout)
    clients = Clients(outputs["endpoint"], outputs["servedModelName"])
    clients.start()
    started = time.monotonic()
    restart = user.make("restart")
    print(f"restart: {time.monotonic() - started:.1f} s; {clients.stop()}")
    assert restart.returncode == 0, restart.stdout[-3000:] + restart.stderr[-3000:]
    assert user.ask() == 200


def test_6_ctrl_c_on_logs_is_one_line(user: User) -> None:
    proc = subprocess.Popen(
        ["scripts/ops.sh", "logs", "-s", "local"], cwd=user.root, env=user.env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the log is flowing: ops is following it
    assert first, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in err and err.strip().endswith("ops: interrupted"), err


def test_7_day_2_verbs_with_a_refused_file_a_stopped_engine_a_stopped_front(user: User) -> None:
    assert user.pulumi("config", "set", "--path", "glm:serving.maxModelLen", "0").returncode == 0
    for verb in ("status", "smoke", "debug"):
        done = user.make(verb)
        no_traceback(done)
        assert "glm:serving.maxModelLen" in done.stderr and done.returncode == 0, (verb, done.stderr)
    logs = user.sh("scripts/ops.sh", "logs", "--no-follow", "-s", "local")
    no_traceback(logs)
    assert logs.returncode == 0 and "glm:serving.maxModelLen" in logs.stderr
    restart = user.make("restart")
    no_traceback(restart)
    refused = [line for line in restart.stderr.splitlines() if line.startswith("ops:")]
    assert restart.returncode != 0 and len(refused) == 1 and "Fix:" in refused[0], restart.stderr
    for stopped in (user.name, f"{user.name}-nginx"):
        subprocess.run(["docker", "stop", stopped], capture_output=True, check=True)
        for verb in ("status", "smoke"):
            done = user.make(verb)
            no_traceback(done)
            assert done.returncode != 0, (stopped, verb, done.stdout)
        subprocess.run(["docker", "start", stopped], capture_output=True, check=True)


def test_8_destroy_removes_the_stack_whatever_its_file_says(user: User) -> None:
    destroy = user.make("destroy")
    assert destroy.returncode == 0, _diagnostics(destroy.stdout) + destroy.stderr[-3000:]
    assert "destroying from the state" in destroy.stdout + destroy.stderr
    left = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"name={user.name}", "--format", "{{.Names}}"],
        capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    assert left == [], f"destroy left containers running: {left}"
    volume = subprocess.run(["docker", "volume", "inspect", f"{user.name}-jit-cache"], capture_output=True)
    assert volume.returncode == 0, "the JIT cache volume went with the stack"
