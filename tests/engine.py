"""Driving the real Pulumi CLI on a throwaway copy of the project (e2e tests and benchmarks).

The copy keeps the work tree clean: stack config changes (API keys, test ports) land in the copy,
and the state lives in a temporary file backend.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROJECT = Path(__file__).resolve().parent.parent
# policy: the program applies the pack's images-pinned rule itself (components/config/advisories.py).
COPIED = ["Pulumi.yaml", "__main__.py", "components", "images", "ops", "policy", "requirements.txt"]
PROVIDERS = ("docker", "command")


def core_engine_missing() -> str | None:
    """Why the CLI and the Python language host cannot run a program here, or None."""
    if shutil.which("pulumi") is None:
        return "the pulumi CLI is not on PATH (scripts/engine.sh gets it; make test puts it there)"
    if shutil.which("pulumi-language-python") is None:
        return "pulumi-language-python is not on PATH (scripts/engine.sh gets it)"
    if not (PROJECT / ".venv" / "bin" / "python").exists():
        return "no .venv (make test creates it)"
    return None


@functools.cache
def engine_missing() -> str | None:
    """Why the real engine cannot run the whole program here, or None."""
    if core_engine_missing():
        return core_engine_missing()
    listed = subprocess.run(["pulumi", "plugin", "ls", "--json"], capture_output=True, text=True)
    installed = {p.get("name") for p in json.loads(listed.stdout or "[]") if p.get("kind") == "resource"}
    for provider in PROVIDERS:
        if provider not in installed:
            return (
                f"the {provider} provider is not in Pulumi's plugin cache: scripts/engine.sh installs it "
                "(the official installer, or a build from source: docs/engine-build.md)"
            )
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "no Docker engine answers (start dockerd)"
    return None


def stack_file_without_secrets(stack_file: Path) -> str:
    """A stack file's text with a user's passphrase salt and encrypted values left out: the copies
    get their own secrets, under the tests' own passphrase."""
    data = yaml.safe_load(stack_file.read_text()) or {}
    data.pop("encryptionsalt", None)
    data["config"] = {k: v for k, v in (data.get("config") or {}).items() if "secure" not in json.dumps(v)}
    return yaml.safe_dump(data, sort_keys=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_subnet() -> str:
    """A /24 in 172.30.0.0/16 that no network of the Docker engine holds and no other test of this
    run has claimed. The program's default, one of 250 derived from the container name, met another
    stack's network under CI's parallel workers ("Pool overlaps with other one on this address
    space", stop 43): claims are files made with O_EXCL in a folder the run's workers share."""
    held = [ipaddress.ip_network(held, strict=False) for held in subprocess.run(
        ["sh", "-c", "docker network inspect --format '{{range .IPAM.Config}}{{.Subnet}} {{end}}' "
         "$(docker network ls -q)"],
        capture_output=True, text=True,
    ).stdout.split()]  # fmt: skip
    claims = Path(f"/tmp/glm53-subnets-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}")
    claims.mkdir(exist_ok=True)
    for third in range(1, 255):
        subnet = f"172.30.{third}.0/24"
        if any(ipaddress.ip_network(subnet).overlaps(network) for network in held):
            continue
        try:
            os.close(os.open(claims / f"172.30.{third}", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue
        return subnet
    raise RuntimeError(f"every /24 of 172.30.0.0/16 is held or claimed ({claims})")


@functools.cache
def ssh_agent(project: Path) -> dict[str, str]:
    """One ssh-agent for each project copy, as ``scripts/pulumi.sh`` starts one for a run: the
    program adds each stand-in host's identityFile to it (components/docker/target.py); the SSH commands
    sign with it and the state never holds a key. One for the whole session held every host's key
    it had ever met, and sshd refuses a client after 6 wrong ones. It ends with the session."""
    import atexit
    import re

    started = subprocess.run(["ssh-agent", "-s"], capture_output=True, text=True, check=True).stdout
    env = dict(re.findall(r"(SSH_AUTH_SOCK|SSH_AGENT_PID)=([^;]+);", started))
    atexit.register(lambda: subprocess.run(["kill", env["SSH_AGENT_PID"]], capture_output=True))
    return {**env, "GLM_SSH_AGENT_FOR_RUN": "1"}


@dataclass(frozen=True)
class LocalStack:
    container: str
    """The serving container's name; the front, Prometheus and the JIT cache volume derive theirs."""
    front_port: int
    prometheus_port: int
    subnet: str
    """Its private network (``glm:container.networkSubnet``): vLLM is at ``.10`` of it."""


@dataclass
class PulumiProject:
    """A copy of the project with its own file backend; ``run`` calls the pulumi CLI in it."""

    root: Path
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def copy_of_repo(cls, into: Path) -> PulumiProject:
        into.mkdir(parents=True, exist_ok=True)
        for name in COPIED:
            source = PROJECT / name
            if source.is_dir():
                shutil.copytree(source, into / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, into / name)
        for stack_file in PROJECT.glob("Pulumi.*.yaml"):
            (into / stack_file.name).write_text(stack_file_without_secrets(stack_file))
        (into / ".venv").symlink_to(PROJECT / ".venv")
        (into / "state").mkdir()
        return cls(into)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            PULUMI_BACKEND_URL=f"file://{self.root / 'state'}",
            PULUMI_CONFIG_PASSPHRASE="e2e-only-passphrase",
            PULUMI_SKIP_UPDATE_CHECK="true",
            PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
        )
        env.pop("PULUMI_CONFIG_PASSPHRASE_FILE", None)
        if shutil.which("ssh-agent"):
            env.update(ssh_agent(self.root))
        return env

    def run(
        self,
        *args: str,
        label: str | None = None,
        check: bool = True,
        timeout: float = 900,
        extra_env: dict[str, str] | None = None,
    ) -> str:
        if args[:1] == ("destroy",):
            # The serving containers' drain hook lives in the program (components/docker/rotation.py); as
            # scripts/pulumi.sh does, it gets the stack's `drain` output for a config it refuses.
            args = args if "--run-program" in args else (*args, "--run-program")
            stack = args[args.index("-s") + 1] if "-s" in args else None
            drain = subprocess.run(
                ["pulumi", "stack", "output", "drain", "--json", *(["-s", stack] if stack else [])],
                cwd=self.root, env=self.env, capture_output=True, text=True,
            )  # fmt: skip
            extra_env = {"GLM_DESTROY_DRAIN": drain.stdout.strip() or "null", **(extra_env or {})}
        start = time.monotonic()
        result = subprocess.run(
            ["pulumi", *args, "--non-interactive"],
            cwd=self.root,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if label:
            self.timings[label] = time.monotonic() - start
        if args[:1] == ("destroy",) and result.returncode != 0:
            # Teardown runs with check=False: a failed destroy must still show in the test's output.
            print(
                f"pulumi destroy failed ({result.returncode}):\n{_diagnostics(result.stdout)}\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        if check and result.returncode != 0:
            raise AssertionError(
                f"pulumi {' '.join(args)} failed ({result.returncode}):\n{_diagnostics(result.stdout)}\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        return result.stdout + result.stderr

    def init_stack(self, stack: str, config: dict[str, str], secrets: dict[str, str]) -> None:
        self.run("stack", "init", stack)
        for key, value in config.items():
            self.run("config", "set", "--path", key, value, "-s", stack)
        for key, value in secrets.items():
            self.run("config", "set", "--secret", "--path", key, value, "-s", stack)

    def init_local_stack(
        self, prefix: str, secrets: dict[str, str], config: dict[str, str] | None = None
    ) -> LocalStack:
        """The ``local`` stack on free loopback ports, its containers named ``<prefix>-<front port>``
        so that runs side by side (and a user's own local stack) never meet."""
        front_port, prometheus_port = free_port(), free_port()
        stack = LocalStack(f"{prefix}-{front_port}", front_port, prometheus_port, free_subnet())
        self.init_stack(
            "local",
            config={
                "glm:front.port": str(front_port),
                "glm:monitoring.port": str(prometheus_port),
                "glm:container.name": stack.container,
                "glm:container.networkSubnet": stack.subnet,
                **(config or {}),
            },
            secrets=secrets,
        )
        return stack

    def outputs(self, stack: str) -> dict[str, Any]:
        return json.loads(self.run("stack", "output", "--json", "--show-secrets", "-s", stack))

    def preview_steps(self, stack: str) -> list[dict[str, Any]]:
        """The resource steps a preview plans, from `pulumi preview --json`."""
        plan = json.loads(self.run("preview", "--json", "-s", stack))
        return [s for s in plan.get("steps", []) if s.get("op") != "same"]


def _diagnostics(stdout: str) -> str:
    """The engine's ``Diagnostics:`` section (the errors themselves), which a long resource list
    would push out of a printed tail."""
    start = stdout.find("Diagnostics:")
    # An error the engine prints as the step fails (a provider that cannot start) may not be repeated there.
    errors = [line for line in stdout[: max(start, 0)].splitlines() if "error" in line.lower()]
    said = "".join(f"{line}\n" for line in errors[-20:])
    if start < 0:
        return said
    end = stdout.find("\nOutputs:", start)
    return said + stdout[start : end if end >= 0 else start + 6000][:6000]
