"""Watching the serving container while the gate waits: its start-up milestones, and its exit.

The gate reaches the container's host the way the Docker provider does (``docker -H ssh://…``
with the provider's ssh options, or the local socket) and follows ``docker logs -f`` of the
current run. Every milestone (``components/gate/startup.py``) is printed once, with the elapsed
time beside the profile's known time; :meth:`ContainerWatch.status` gives the line the gate prints
every 10 s. The log stream ends when the container stops: the watch then reads ``docker inspect``
(exit code, restart count) and the log's error lines, and :meth:`ContainerWatch.failure` names the
cause and the config key. A stream cut by the network (the container still running the same run)
is followed again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from components.gate.startup import (
    ENGINE_INIT,
    READY,
    SERVER,
    WEIGHTS,
    Diagnosis,
    Milestone,
    diagnose,
    milestone,
)
from components.template import render_file

DOCKER_TIMEOUT_SECONDS = 30.0
# vLLM's "INFO 12-01 10:24:25 [core.py:93] " (the time is beside each progress line already).
_LOG_PREFIX = re.compile(
    r"^(\(\w+ pid=\d+\) )?((INFO|WARNING|DEBUG)( \d\d-\d\d [\d:.]+)? (\[[\w.:]+\] )?|INFO:\s+)"
)
TAIL_LINES = 200
FOLLOW_ATTEMPTS = 5
"""How often a cut log stream of a running container is followed again before the watch gives up."""


def clock(seconds: float | None) -> str:
    """``m:ss`` (``h:mm:ss`` past an hour)."""
    if seconds is None:
        return "?"
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


@contextlib.contextmanager
def docker_cli(spec: Mapping[str, Any]) -> Iterator[tuple[list[str], dict[str, str]]]:
    """The docker CLI aimed at ``spec["docker_host"]`` and its environment. Over ``ssh://`` the CLI
    runs ``ssh`` from PATH: a wrapper in a private folder adds the provider's options (pinned host
    key, user, key file), so nothing is written to known_hosts."""
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_CONTEXT"}
    argv = ["docker", "-H", str(spec["docker_host"])]
    ssh_opts = [str(o) for o in spec.get("ssh") or []]
    if not ssh_opts:
        yield argv, env
        return
    with tempfile.TemporaryDirectory(prefix="glm53-docker-ssh-") as folder:
        # One SSH connection for the watch's docker commands (logs, inspect, events): each would
        # otherwise pay a handshake, seconds on a loaded host. The master ends 5 s after the last.
        shared = ["-o", "ControlMaster=auto", "-o", f"ControlPath={folder}/cm-%C", "-o", "ControlPersist=5"]
        ssh_wrapper(Path(folder), [*ssh_opts, *shared])
        yield argv, {**env, "PATH": f"{folder}:{env.get('PATH', '')}"}


def ssh_wrapper(folder: Path, options: Sequence[str]) -> None:
    """Writes ``folder/ssh`` (``templates/ssh-wrapper.sh``): the real ssh with ``options`` first,
    for a docker CLI that finds ``folder`` first on PATH (the gate's watch, ``ops``)."""
    real_ssh = next(p for p in ("/usr/bin/ssh", "/bin/ssh") if Path(p).exists())
    wrapper = folder / "ssh"
    wrapper.write_text(render_file("ssh-wrapper.sh", {"SSH": real_ssh, "OPTIONS": shlex.join(options)}))
    wrapper.chmod(0o700)


def _timestamp(text: str) -> float | None:
    """Docker's RFC 3339 nano timestamps as epoch seconds (``0001-01-01…`` → None)."""
    try:
        moment = datetime.fromisoformat(text[:26].rstrip("Z") + "+00:00")
    except ValueError:
        return None
    return moment.timestamp() if moment.year > 1 else None


@dataclass(frozen=True)
class ContainerStop:
    """How the serving container stopped while the gate waited."""

    status: str
    exit_code: int | None
    restart_count: int
    error: str
    diagnosis: Diagnosis
    seen_at: float
    """monotonic time the watch noticed it."""

    def message(self, name: str) -> str:
        status = "exited, restarted by its restart policy" if self.status == "running" else self.status
        state = f"{status}, exit code {self.exit_code}, restart count {self.restart_count}"
        extra = f", Docker says: {self.error}" if self.error else ""
        return (
            f"the serving container {name} stopped while the gate waited ({state}{extra}); "
            f"{self.diagnosis.describe()}\nThe restart policy keeps restarting it: fix the key and "
            "run `pulumi up` again (`make logs` shows the whole log)."
        )


class ContainerWatch:
    """Follows one container's log on a thread; read :meth:`status` and :attr:`stopped`."""

    def __init__(
        self, spec: Mapping[str, Any], progress: Callable[[str], None], rendered_flags: set[str]
    ) -> None:
        self.name = str(spec["name"])
        self.spec = dict(spec)
        self.progress = progress
        self.rendered_flags = rendered_flags
        self.known = {
            WEIGHTS: spec.get("known_weights_seconds"),
            "start": spec.get("known_start_seconds"),
        }
        self.stage = WEIGHTS
        self.stage_since: float | None = None  # container clock, epoch seconds
        self.detail = ""
        self._last_at: float | None = None
        self._last_mark: str | None = None
        self.started_at: float | None = None
        self.offset: float | None = None  # local clock - container clock, smallest seen
        self.stopped: ContainerStop | None = None
        self.problem: str | None = None
        self._done = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._events: subprocess.Popen[str] | None = None
        self._died = threading.Event()
        # Held while a docker process is started and while close() stops them: a close() that
        # came before the thread started `docker logs -f` would otherwise leave it following (and
        # close() waiting out its join).
        self._spawning = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)

    # -- control --

    def start(self) -> ContainerWatch:
        self._thread.start()
        return self

    def close(self) -> None:
        with self._spawning:
            self._done.set()
            procs = (self._proc, self._events)
        for proc in procs:
            if proc is not None and proc.poll() is None:
                proc.kill()
        self._thread.join(timeout=5)

    # -- what the gate reads --

    def now(self) -> float:
        """The container host's clock, estimated from the log's timestamps."""
        return time.time() - (self.offset or 0.0)

    def status(self) -> str | None:
        """``engine init 2:10 of ~5:35 (start-up 2:46 of ~6:12); last: …`` or None if not known yet."""
        if self.started_at is None:
            return f"container {self.name}: {self.problem}" if self.problem else None
        total = self.now() - self.started_at
        in_stage = self.now() - (self.stage_since or self.started_at)
        known = self._known_stage()
        stage = f"{self.stage} {clock(in_stage)}" + (f" of ~{clock(known)}" if known else "")
        start = f"start-up {clock(total)}" + (
            f" of ~{clock(self.known['start'])}" if self.known["start"] else ""
        )
        return f"{stage} ({start}){'; ' + self.detail if self.detail else ''}"

    def _known_stage(self) -> float | None:
        weights, start = self.known[WEIGHTS], self.known["start"]
        if self.stage == WEIGHTS:
            return float(weights) if weights else None
        if self.stage == ENGINE_INIT and weights and start:
            return float(start) - float(weights)
        return None

    # -- the thread --

    def _docker(self, argv: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        """One docker command; its stderr follows its stdout (``docker logs`` splits the two)."""
        return subprocess.run(
            [*argv, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace", timeout=DOCKER_TIMEOUT_SECONDS,
        )  # fmt: skip

    def _spawn(self, argv: list[str], env: dict[str, str], stdout: int) -> subprocess.Popen[str] | None:
        """A long-running docker command (``logs -f``, ``events``), or None once the watch is closed."""
        with self._spawning:
            if self._done.is_set():
                return None
            return subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=stdout, text=True, errors="replace"
            )

    def _inspect(self, argv: list[str], env: dict[str, str]) -> dict[str, Any] | None:
        # Only the state and the restart count: the whole inspect would carry the container's env.
        fmt = '{"Id":"{{.Id}}","State":{{json .State}},"RestartCount":{{.RestartCount}}}'
        done = self._docker(argv, env, "inspect", "--format", fmt, self.name)
        if done.returncode != 0:
            self.problem = f"docker inspect failed: {done.stdout.strip()[:300]}"
            return None
        found = json.loads(done.stdout)
        state: dict[str, Any] = {**found["State"], "RestartCount": found["RestartCount"], "Id": found["Id"]}
        return state

    def _run(self) -> None:
        try:
            with docker_cli(self.spec) as (argv, env):
                self._follow(argv, env)
        except (OSError, subprocess.SubprocessError, ValueError) as err:  # the watch is best effort
            self.problem = f"cannot watch the container ({type(err).__name__}: {err})"

    def _follow(self, argv: list[str], env: dict[str, str]) -> None:
        first = self._inspect(argv, env)
        if first is None:
            return
        started = str(first.get("StartedAt", ""))
        self.started_at = _timestamp(started)
        since = started
        # `docker logs -f` may follow the restarted run (it did on Docker 20.10 when the restart
        # came at once): Docker's own `die` event ends the stream the moment the engine exits.
        self._events = self._spawn(
            [*argv, "events", "--since", started, "--filter", f"container={first['Id']}", "--filter", "event=die",
             "--format", "{{.Actor.Attributes.exitCode}}"],
            env, subprocess.DEVNULL,
        )  # fmt: skip
        if self._events is None:
            return
        threading.Thread(target=self._on_die, name=f"die-{self.name}", daemon=True).start()
        for _attempt in range(FOLLOW_ATTEMPTS):
            state = first if first.get("Restarting") or not first.get("Running") else None
            if state is None:
                cmd = [*argv, "logs", "-f", "--timestamps", "--since", since, self.name]
                self._proc = self._spawn(cmd, env, subprocess.STDOUT)
                if self._proc is None:
                    return
                assert self._proc.stdout is not None
                said = ""
                for line in self._proc.stdout:
                    stamp = self.read_line(line)
                    since, said = (stamp, said) if stamp else (since, line.strip())
                self._proc.wait()
                if self._done.is_set():
                    return
                state = self._inspect(argv, env)
                if state is None:
                    return
                same_run = state.get("StartedAt") == started and not self._died.is_set()
                if state.get("Running") and not state.get("Restarting") and same_run:
                    # The stream was cut (the network, a log driver that cannot be read), the run
                    # goes on: follow it again, a few times.
                    self.problem = f"the log stream ended: {said[:200] or 'no reason given'}"
                    first = state
                    self._done.wait(1.0)
                    continue
            self._record_stop(argv, env, state)
            return

    def _on_die(self) -> None:
        """The first `die` of the watched container ends the log stream (and so the wait)."""
        assert self._events is not None and self._events.stdout is not None
        if self._events.stdout.readline():
            self._died.set()
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()

    def read_line(self, raw: str) -> str | None:
        """One ``docker logs --timestamps`` line: a milestone is printed through ``progress`` and
        moves the stage; returns the line's timestamp (None when it has none)."""
        stamp, _, line = raw.rstrip("\n").partition(" ")
        at = _timestamp(stamp)
        if at is None:
            # Docker stamps each \n line; read in text mode, a tqdm bar's \r redraws come unstamped
            # (vLLM 0.25.0: "(EngineCore pid=2005) \rCapturing CUDA graphs (PIECEWISE): 0%…").
            if self._last_at is not None and (mark := milestone(raw)) is not None:
                self._mark(mark, raw.rstrip("\n"), self._last_at)
            return None
        self._last_at = at
        self.offset = min(self.offset, time.time() - at) if self.offset is not None else time.time() - at
        mark = milestone(line)
        if mark is None:
            return stamp
        self._mark(mark, line, at)
        return stamp

    def _mark(self, mark: Milestone, line: str, at: float) -> None:
        shard = mark.pattern.search(line)
        if mark.name == "weights shard" and shard:
            self.detail = f"shard {shard.group(1)}/{shard.group(2)}"
            return
        if mark.name == self._last_mark:  # a bar redrawn, or the next bar of the same stage
            return
        self._last_mark = mark.name
        elapsed = at - self.started_at if self.started_at else None
        self.detail = f"last: {mark.name}"
        # The stage that just ended, beside the profile's known time for it.
        known = self.known[WEIGHTS] if mark.stage == ENGINE_INIT and self.stage == WEIGHTS else None
        known = self.known["start"] if mark.stage in (SERVER, READY) else known
        beside = f" of ~{clock(float(known))}" if known else ""
        said = _LOG_PREFIX.sub("", line.strip())[:160]
        self.progress(f"start-up: {mark.name} at {clock(elapsed)}{beside}: {said}")
        if mark.stage != self.stage:
            self.stage, self.stage_since = mark.stage, at

    def _record_stop(self, argv: list[str], env: dict[str, str], state: dict[str, Any]) -> None:
        # The stopped run's log (the newest run's if it restarted since): the lines with the error.
        logs = self._docker(argv, env, "logs", "--tail", str(TAIL_LINES), self.name)
        lines = logs.stdout.splitlines()
        exit_code = state.get("ExitCode")
        if state.get("Running") and self.started_at is not None:
            # Restarted already: the state's exit code is the new run's (0); the last `die` says it.
            died = self._docker(
                argv, env, "events", "--since", f"{self.started_at:.3f}", "--until", f"{self.now() + 1:.3f}",
                "--filter", f"container={self.name}", "--filter", "event=die",
                "--format", "{{.Actor.Attributes.exitCode}}",
            ).stdout.split()  # fmt: skip
            exit_code = int(died[-1]) if died and died[-1].isdigit() else None
        self.stopped = ContainerStop(
            status=str(state.get("Status", "?")),
            exit_code=exit_code,
            restart_count=int(state.get("RestartCount") or 0),
            error=str(state.get("Error") or ""),
            diagnosis=diagnose(lines, self.rendered_flags),
            seen_at=time.monotonic(),
        )


def start_watch(
    spec: Mapping[str, Any] | None, progress: Callable[[str], None], rendered_flags: set[str]
) -> ContainerWatch | None:
    """A started :class:`ContainerWatch` for ``spec`` (the gate's ``container_watch`` parameter:
    ``name``, ``docker_host``, ``ssh`` options and the profile's known times), or None without one."""
    if not spec or not spec.get("name") or not spec.get("docker_host"):
        return None
    return ContainerWatch(spec, progress, rendered_flags).start()


def watch_params(name: str, docker_host: str, ssh_opts: list[str], facts: Any | None) -> dict[str, Any]:
    """The gate's ``container_watch`` parameter: deterministic (no timestamps), plain values."""
    return {
        "name": name,
        "docker_host": docker_host,
        "ssh": list(ssh_opts) if docker_host.startswith("ssh://") else [],
        "known_weights_seconds": getattr(facts, "known_weights_load_seconds", None),
        "known_start_seconds": getattr(facts, "known_engine_start_seconds", None),
    }
