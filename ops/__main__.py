"""Day-2 operations on a deployed stack: the A800 seed's §6 (日常运维) as commands.

    scripts/ops.sh logs    -s a800   # follow the serving container's log, start-up milestones marked
    scripts/ops.sh status  -s a800   # container state and health, the last gate, endpoint, image
    scripts/ops.sh smoke   -s a800   # re-run the gate now, changing nothing (exit 1 on failure)
    scripts/ops.sh restart -s a800   # re-create the serving container (JIT cache kept, gate re-run)
    scripts/ops.sh debug   -s a800   # the serving container as a foreground `docker run --rm`
    scripts/ops.sh rollback -s a800  # back to the last config whose gate passed (ops/rollback.py)

Every command reads the stack's own config through the models and reaches its Docker host the way
the program does (over SSH with the same user, key and pinned host key). Run through
``scripts/ops.sh`` (or ``make logs STACK=a800`` …), which sets up the project's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from components.change_cost import one_box_outage_notice
from components.config import ConfigError, SecretInputs, StackConfig
from components.docker.model_volume import weights_and_cache
from components.docker.nginx_front import front_container_name
from components.front_tls import front_tls
from components.gate.container import ssh_wrapper
from components.gate.startup import is_error, milestone
from components.gate.tls import EndpointTls
from components.render.usage_queries import WINDOW
from components.serving.spec import render_argv, render_serving
from ops.api_state import Verdict, ask, container_down, state_line, verdict
from ops.rollback import rollback
from ops.stack_file import build, glm_values, problems, rollback_mends, running_candidates
from ops.usage import promtool_query, usage_rows, usage_table

ROOT = Path(__file__).resolve().parent.parent
# The pulumi CLI with the project's environment; GLM_PULUMI points elsewhere (tests use a throwaway backend).
PULUMI = shlex.split(os.environ.get("GLM_PULUMI", "")) or [str(ROOT / "scripts" / "pulumi.sh")]
DEBUG_PORT = 8007  # the seed's run_debug.sh port
INTERRUPTED = 130  # the exit code of a command stopped by Ctrl-C (128 + SIGINT)


def pulumi(*args: str, stack: str) -> str:
    result = subprocess.run([*PULUMI, *args, "-s", stack], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"ops: pulumi {' '.join(args)} -s {stack} failed:\n{result.stderr.strip()}")
    return result.stdout


def stack_output(name: str, stack: str) -> Any:
    """One stack output, None when the stack has none of that name."""
    result = subprocess.run(
        [*PULUMI, "stack", "output", name, "--json", "-s", stack], capture_output=True, text=True
    )
    return json.loads(result.stdout or "null") if result.returncode == 0 else None


def stack_config(stack: str, command: str) -> StackConfig:
    """The stack's config as the program validates it (secrets left out: not needed here).

    A stack file the program would refuse does not stop a look at the running stack: it reads the
    version that runs (``ops/stack_file.py``: the last update that succeeded, its replica keys from
    the last version that passed its gate), and says so in one line with the problem's own fix,
    and ``make rollback`` only where it mends the file; ``restart`` (a ``pulumi up``) refuses."""
    raw = glm_values(json.loads(pulumi("config", "--json", stack=stack)))
    try:
        return build(raw, stack)
    except ConfigError as err:
        found = problems(err)
    verified = verified_config(stack)
    more = f" (and {len(found) - 1} more: make preview STACK={stack})" if len(found) > 1 else ""
    rollback = (
        f" Or put the replica that last passed its gate back: `make rollback STACK={stack}`."
        if rollback_mends(raw, verified, stack)
        else ""
    )
    problem = f"stack {stack}'s config is refused: {found[0].rstrip('.')}.{more}{rollback}"
    if command == "restart":
        sys.exit(f"ops: {problem} restart runs `pulumi up`, which refuses it.")
    history = json.loads(pulumi("stack", "history", "--json", stack=stack) or "[]")
    for how, values in running_candidates(raw, verified, history):
        try:
            config = build(values, stack)
        except ConfigError:
            continue
        print(f"ops: {problem} {command} reads the version that runs ({how}).", file=sys.stderr)
        return config
    sys.exit(f"ops: {problem} No version of it ever ran (no update succeeded): fix the file first.")


def verified_config(stack: str) -> dict[str, Any] | None:
    """The replica keys of the last version that passed its gate (the ``verified`` output), or None."""
    verified = stack_output("verified", stack)
    last = verified.get("config") if isinstance(verified, dict) else None
    return last if isinstance(last, dict) else None


def docker(config: StackConfig) -> list[str]:
    """The docker CLI aimed at the stack's host; over SSH with the provider's own options."""
    host = config.target.host
    if host.is_local:
        return ["docker", "-H", host.docker_host]
    # The docker CLI runs `ssh`: a wrapper earlier on PATH adds the pinned host key, user and key.
    folder = Path(tempfile.mkdtemp(prefix="glm53-ops-"))
    ssh_wrapper(folder, host.ssh_options)
    os.environ["PATH"] = f"{folder}:{os.environ['PATH']}"
    return ["docker", "-H", host.docker_host]


def mark(line: str) -> str:
    """``==>`` before a start-up milestone or an error: the gate's own table
    (``components/gate/startup.py``), so ``make logs`` and the gate's progress agree."""
    return f"==> {line}" if milestone(line) is not None or is_error(line) else line


def logs(config: StackConfig, stack: str, follow: bool) -> int:
    cmd = [*docker(config), "logs", "--tail", "200", *(["-f"] if follow else []), config.container.name]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(mark(line), end="", flush=True)
    if proc.returncode in (INTERRUPTED, -signal.SIGINT):
        # The CLI was interrupted with us (Ctrl-C reaches the whole process group); where this
        # process ignores SIGINT (a shell's background job), only the CLI's exit code says so.
        raise KeyboardInterrupt
    return proc.returncode


def status(config: StackConfig, stack: str) -> int:
    """The API's state first (asked, not inferred: ``ops/api_state.py``), then the containers with
    their own events' times, the last update and gate, and usage per key."""
    outputs = json.loads(pulumi("stack", "output", "--json", stack=stack) or "{}")
    history = json.loads(pulumi("stack", "history", "--json", stack=stack) or "[]")
    names = (config.container.name, front_container_name(config.container))
    serving, front = _state(config, names[0]), _state(config, names[1])
    endpoint = outputs.get("endpoint")
    if endpoint:
        reply = ask(endpoint, status_key(stack), _front_trust(config, stack))
        host = shlex.join(["docker", "-H", config.target.host.docker_host])
        api = verdict(reply, serving, front, names, stack, host)
    else:
        api = Verdict(False, f"not deployed (no endpoint output). Fix: `make up STACK={stack}`.")
    last = history[0] if history else {}
    smoke = outputs.get("smoke") or {}
    rows = [
        ("API", api.line),
        ("stack", f"{stack} ({config.hardware})"),
        ("container", f"{names[0]} on {config.target.host.docker_host}"),
        ("state", state_line(serving)),
        ("front", f"{names[1]}: {state_line(front)}"),
        ("endpoint", endpoint or "(not deployed)"),
        ("image", outputs.get("imageRef", "?")),
        ("last update", f"{last.get('result', '?')} at {last.get('endTime', '?')} ({last.get('kind', '?')})"),
        ("last gate", _gate_summary(smoke, history)),
    ]
    for label, value in rows:
        print(f"{label:12s} {value}")
    print(f"\nusage per API key (counts since the usage meter started; latency over the last {WINDOW}):")
    prometheus = [*docker(config), "exec", f"{config.container.name}-prometheus", "promtool"]
    try:
        print(usage_table(usage_rows(promtool_query(prometheus))))
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
        print(f"not available: {e}")
    running = all(s and s.get("Running") for s in (serving, front))
    return 0 if api.answers and running else 1


def status_key(stack: str) -> str:
    """What ``status`` asks the API with: the gate's own key (counted as smoke-gate, never as a
    user's), or on a stack deployed before the gate had one, the first API key by name."""
    own = secret_output(stack, "gateApiKey")
    if own is not None:
        return own
    keys = json.loads(pulumi("config", "get", "glm:apiKeys", "--json", stack=stack))
    keys = keys.get("objectValue") or json.loads(keys["value"])
    return str(keys[sorted(keys)[0]])


def _state(config: StackConfig, container: str) -> dict[str, Any] | None:
    """``docker inspect``'s State of a container on the stack's host; None when there is none."""
    inspect = subprocess.run(
        [*docker(config), "inspect", "--format", "{{json .State}}", container], capture_output=True, text=True
    )
    return json.loads(inspect.stdout) if inspect.returncode == 0 else None


def _gate_summary(smoke: dict[str, Any], history: list[dict[str, Any]]) -> str:
    """The gate the ``smoke`` output holds: the one of the last update that succeeded, which is not
    the last update when that one failed (a failed update leaves the outputs as they were).

    >>> _gate_summary({"kv_pool_tokens": 9}, [{"kind": "update", "result": "failed"},
    ...     {"kind": "update", "result": "succeeded", "version": 3, "endTime": "T"}])
    'passed with the update that ended T (not with the last update, which failed); kv_pool 9'
    """
    if not smoke:
        return "never passed"
    steps = smoke.get("latencies_ms") or smoke.get("steps") or {}
    parts = ", ".join(f"{k} {v:.0f} ms" for k, v in steps.items() if isinstance(v, int | float))
    updates = [h for h in history if h.get("kind") == "update"]
    passed = next((h for h in updates if h.get("result") == "succeeded"), None)
    if passed is None or passed is (updates[0] if updates else None):
        when = "passed with the last update"
    else:
        when = (
            f"passed with the update that ended {passed.get('endTime', '?')} "
            f"(not with the last update, which {updates[0].get('result', '?')})"
        )
    return f"{when}{': ' + parts if parts else ''}; kv_pool {smoke.get('kv_pool_tokens', '?')}"


def smoke(config: StackConfig, stack: str, deadline: float) -> int:
    outputs = json.loads(pulumi("stack", "output", "--json", stack=stack) or "{}")
    if "endpoint" not in outputs:
        sys.exit(f"ops: stack {stack} has no endpoint output: deploy it first (make up STACK={stack})")
    # A stopped container is said at once: the gate would wait for an engine that is not there, then
    # advise waiting for the weights.
    names = (config.container.name, front_container_name(config.container))
    host = shlex.join(["docker", "-H", config.target.host.docker_host])
    down = container_down(_state(config, names[0]), _state(config, names[1]), names, stack, host)
    if down is not None:
        print(f"ops: smoke not run: {down}", file=sys.stderr)
        return 1
    # The gate's own key: its requests are counted apart from every user's (the usage meter).
    api_key = secret_output(stack, "gateApiKey")
    if api_key is None:
        sys.exit(
            f"ops: stack {stack} has no gateApiKey output yet (deployed before the gate had its own key): "
            f"run make up STACK={stack} once, then make smoke STACK={stack}"
        )
    env = {**os.environ, "GLM_API_KEY": api_key}
    cmd = [
        sys.executable, "-m", "components.gate",
        "--endpoint", outputs["endpoint"],
        "--api-key-env", "GLM_API_KEY",
        "--served-name", config.model.served_name,
        "--max-model-len", str(config.serving.max_model_len),
        "--steps", ",".join(config.smoke.steps),
        "--chat-template-kwargs", json.dumps(config.smoke.chat_template_kwargs),
        # A running stack is already loaded: a short wait, not the deploy's deadline.
        "--deadline-seconds", str(deadline),
    ]  # fmt: skip
    # The same source as the gate in `pulumi up`: the front's metrics route with the stack's key.
    metrics_url = config.smoke.metrics_url or outputs.get("metricsEndpoint")
    metrics_key = None if config.smoke.metrics_url else secret_output(stack, "gateMetricsKey")
    if metrics_url:
        cmd += ["--metrics-url", metrics_url]
    if metrics_key:
        env["GLM_METRICS_KEY"] = metrics_key
        cmd += ["--metrics-key-env", "GLM_METRICS_KEY"]
    with tempfile.TemporaryDirectory(prefix="glm53-ops-") as folder:
        cmd += _gate_tls(config, stack, Path(folder))
        return subprocess.run(cmd, env=env).returncode


def _gate_tls(config: StackConfig, stack: str, folder: Path) -> list[str]:
    """A TLS front: the name its certificate carries and the stack's CA, as `pulumi up`'s gate
    verifies them (components/front_tls.py)."""
    tls = _front_trust(config, stack)
    if tls is None:
        return []
    args = ["--tls-name", tls.server_name]
    if tls.ca is not None:
        (folder / "ca.crt").write_text(tls.ca)
        args += ["--tls-ca-file", str(folder / "ca.crt")]
    return args


def _front_trust(config: StackConfig, stack: str) -> EndpointTls | None:
    """What a client of a TLS front verifies: its name (from the certificate, the one public value
    read, where glm:front.tlsName is not set) and the stack's CA; None without TLS."""
    if not config.front.tls:
        return None
    if config.front.tls_name is None:
        certificate = pulumi("config", "get", "glm:tlsCertificate", stack=stack)
        config = SecretInputs(tls_certificate_pem=certificate).resolved(config)
    return front_tls(config.front, stack)


def secret_output(stack: str, name: str) -> str | None:
    """One secret stack output (the gate's keys): this one value, not the decrypted state."""
    result = subprocess.run(
        [*PULUMI, "stack", "output", name, "--show-secrets", "-s", stack],
        capture_output=True,
        text=True,
    )
    return (result.stdout.strip() or None) if result.returncode == 0 else None


def restart(config: StackConfig, stack: str) -> int:
    state = json.loads(pulumi("stack", "export", stack=stack))
    urns = [
        r["urn"]
        for r in state.get("deployment", {}).get("resources") or []
        if r.get("type") == "docker:index/container:Container"
        and r.get("outputs", {}).get("name") == config.container.name
    ]
    if not urns:
        sys.exit(f"ops: no serving container {config.container.name} in stack {stack}'s state")
    if len(config.target.hosts) == 1:  # said before acting: restart runs no preview
        print(
            f"ops: {one_box_outage_notice('restart', config.hardware, config.facts)}",
            file=sys.stderr,
            flush=True,
        )
    print(f"ops: replacing {urns[0]} (the JIT cache volume stays; the gate re-runs)", file=sys.stderr)
    return subprocess.run(
        [*PULUMI, "up", "--yes", "--skip-preview", "--replace", urns[0], "-s", stack]
    ).returncode


def debug_run(config: StackConfig, image: str, deployed_argv: list[str], port: int = DEBUG_PORT) -> str:
    """The serving container as the seed's run_debug.sh: the deployed image and argv (stack outputs
    ``imageRef``, ``vllmArgs``), the same env and mounts; another port on loopback, ``--rm``, in the
    foreground. ``glm:servingSecretEnv`` is left out: add its variables with ``-e NAME`` (Docker then
    takes the value from your shell)."""
    argv = [a if not a.startswith("--port=") else f"--port={port}" for a in deployed_argv]
    # The same rendering as the deployed container (devices, mounts, env; none of the accelerator's
    # in a rehearsal).
    serving = render_serving(config)
    c = serving.container
    args = ["docker", "run", "--rm", "-it", "--name", f"{c.name}-debug", "-p", f"127.0.0.1:{port}:{port}"]
    if serving.nvidia_gpus:
        args += ["--gpus", "all"]
    for device in serving.devices:
        args += ["--device", device]
    for source, target, read_only in weights_and_cache(config.model, c.name):
        args += ["-v", f"{source}:{target}{':ro' if read_only else ''}"]
    for m in serving.mounts:
        args += ["-v", f"{m.source}:{m.target}{':ro' if m.read_only else ''}"]
    args += ["--shm-size", c.shm_size] if c.shm_size else []
    args += ["--ipc", c.ipc_mode] if c.ipc_mode else []
    args += ["--privileged"] if c.privileged else []
    for name, value in serving.env.items():
        args += ["-e", f"{name}={value}"]
    args += ["--entrypoint", "vllm", image, "serve", *argv]
    return shlex.join(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ops", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["logs", "status", "smoke", "restart", "debug", "rollback"])
    parser.add_argument("-s", "--stack", default="local")
    parser.add_argument("--no-follow", action="store_true", help="logs: print and exit")
    parser.add_argument(
        "--deadline", type=float, default=30, help="smoke: readiness wait in seconds (default 30)"
    )
    args = parser.parse_args(argv)
    if args.command == "rollback":  # before reading the config: the current one may be what failed
        return rollback(args.stack, pulumi, PULUMI)
    config = stack_config(args.stack, args.command)
    if args.command == "logs":
        return logs(config, args.stack, follow=not args.no_follow)
    if args.command == "status":
        return status(config, args.stack)
    if args.command == "smoke":
        return smoke(config, args.stack, args.deadline)
    if args.command == "restart":
        return restart(config, args.stack)
    outputs = json.loads(pulumi("stack", "output", "--json", stack=args.stack) or "{}")
    print(debug_run(config, outputs.get("imageRef", "IMAGE"), outputs.get("vllmArgs") or render_argv(config)))
    return 0


def run(argv: list[str] | None = None) -> int:
    """``main`` with no traceback: Ctrl-C is one line and exit 130; anything unforeseen is one line
    naming it (``GLM_DEBUG=1`` shows the traceback)."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        print("\nops: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as err:  # the user gets one line, not a traceback
        if os.environ.get("GLM_DEBUG"):
            raise
        print(f"ops: {type(err).__name__}: {err} (GLM_DEBUG=1 shows where)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run())
