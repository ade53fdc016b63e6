"""The stack's target host: one SSH identity for the Docker provider and the commands (pulumi-command).

Both reach the same ``user@address:port`` parsed once from ``dockerHost``, with the same key, and
both accept only ``hostKey``: Docker's ssh through ``-o KnownHostsCommand`` (``HostConfig.ssh_options``;
the key line comes from config, so no known_hosts file is written and the inputs are the same on
every operator's machine), the commands through pulumi-command's ``hostKey`` (unset, it would accept
any key). The commands sign with the SSH agent: no private key is ever an input, so none reaches the
state.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pulumi
from pulumi_command import local, remote

from components.config import ConfigError, HostConfig
from components.config.values import fix_command, named
from components.template import one_line_script


def exec_ssh(host: HostConfig) -> dict[str, Any] | None:
    """How ``docker exec`` reaches ``host`` (components/docker/nginx_reload.py): none for the local engine,
    else ssh to its address and port with the Docker provider's options."""
    if host.is_local:
        return None
    return {"address": host.ssh_address, "port": host.ssh_port, "opts": host.ssh_options}


AGENT_FOR_RUN = "GLM_SSH_AGENT_FOR_RUN"
"""Set by ``scripts/pulumi.sh`` when it started an ssh-agent for this run only: the program may add
``identityFile`` to that agent (never to the user's own)."""


def _agent_keys() -> list[str] | None:
    """``type base64`` of every key the agent at ``SSH_AUTH_SOCK`` holds, in the order it offers
    them; None without an agent."""
    import subprocess

    if not os.environ.get("SSH_AUTH_SOCK"):
        return None
    listed = subprocess.run(["ssh-add", "-L"], capture_output=True, text=True, check=False)
    if listed.returncode not in (0, 1):  # 1: an agent with no keys
        return None
    return [" ".join(line.split()[:2]) for line in listed.stdout.splitlines() if line.strip()]


def _public_key(path: Path) -> str | None:
    """``type base64`` of the key file's public half: ``<file>.pub``, else ``ssh-keygen -y``."""
    import subprocess

    pub = path.with_name(path.name + ".pub")
    if pub.is_file():
        return " ".join(pub.read_text().split()[:2])
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-P", "", "-f", str(path)], capture_output=True, text=True, check=False
    )
    return " ".join(derived.stdout.split()[:2]) if derived.returncode == 0 else None


def require_agent_identity(host: HostConfig, ssh_private_key: pulumi.Output[str] | None) -> None:
    """The commands log in through the SSH agent only: a key given to pulumi-command as
    ``privateKey`` is copied into every Command's inputs, outputs and the backend's history.

    With ``identityFile`` the agent must hold that key, so Docker's ssh (which reads the file) and
    the commands log in as one identity; an agent started for this run (``AGENT_FOR_RUN``) gets it
    added here. ``glm:sshPrivateKey`` is refused: only the commands could use it.
    """
    import subprocess

    key = f"glm:target.hosts[{host.name}].identityFile"
    if ssh_private_key is not None:
        raise ConfigError(
            named(
                f"glm:sshPrivateKey is set, but only the SSH commands could use it; Docker's ssh reads a key "
                f"file, so the two would log in with different keys. Fix: save the key to a file (chmod 600), "
                f"set {key} to its path and run {fix_command('config rm glm:sshPrivateKey')}.",
                pulumi.get_stack(),
            )
        )
    if host.identity_file is None:
        return
    path = Path(host.identity_file).expanduser()
    if not os.access(path, os.R_OK) or not path.is_file():
        raise ConfigError(
            f"{key}={host.identity_file}: cannot read it. Fix: the path of a private key readable "
            "by the user running pulumi."
        )
    public = _public_key(path)
    held = _agent_keys()
    if public is not None and held is not None and public in held:
        _offered_in_time(key, host.identity_file, held, public)
        return
    if held is not None and os.environ.get(AGENT_FOR_RUN):
        added = subprocess.run(
            ["ssh-add", "-q", str(path)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env={**os.environ, "SSH_ASKPASS_REQUIRE": "never"},
            check=False,
        )
        if added.returncode == 0:
            if public is not None:
                _offered_in_time(key, host.identity_file, _agent_keys() or [], public)
            return
    raise ConfigError(
        f"{key}={host.identity_file}: the SSH commands (preflight, downloads) log in through the SSH "
        "agent, so that the key is never copied into the Pulumi state, and "
        + ("no agent answers at SSH_AUTH_SOCK" if held is None else "the agent does not hold this key")
        + f". Fix: `ssh-add {host.identity_file}` (start one with `eval $(ssh-agent)` if needed), or "
        "run through scripts/pulumi.sh / make, which start an agent for the run and add the key."
    )


SSHD_MAX_AUTH_TRIES = 6
"""sshd's default ``MaxAuthTries``: after this many refused keys it disconnects the client with
"Too many authentication failures"."""


def _offered_in_time(key: str, identity_file: str, held: list[str], public: str) -> None:
    """pulumi-command offers the agent's keys in the agent's order and sshd refuses each one that is
    not the host's: a key behind ``SSHD_MAX_AUTH_TRIES`` others is never reached, and every command
    would fail after 10 retries with only "Too many authentication failures" to go on."""
    ahead = held.index(public) if public in held else 0
    if ahead >= SSHD_MAX_AUTH_TRIES:
        raise ConfigError(
            f"{key}={identity_file}: the SSH agent holds {len(held)} keys and offers this one after "
            f"{ahead} others; sshd disconnects after {SSHD_MAX_AUTH_TRIES} refused keys (its default "
            "MaxAuthTries), so the commands would never log in. Fix: run through scripts/pulumi.sh / "
            "make (an agent for the run, holding only this stack's keys), or empty your agent "
            f"(`ssh-add -D`) and `ssh-add {identity_file}` first."
        )


def ssh_connection(host: HostConfig, ssh_private_key: pulumi.Output[str] | None) -> remote.ConnectionArgs:
    """pulumi-command's connection: the Docker provider's user, address, port and host key, and no
    key: pulumi-command signs with the agent at the provider's ``SSH_AUTH_SOCK``."""
    require_agent_identity(host, ssh_private_key)
    return remote.ConnectionArgs(
        host=host.ssh_address,
        port=host.ssh_port,
        user=host.ssh_user,
        host_key=host.host_key_line,
        per_dial_timeout=30,
    )


def ssh_destination(host: HostConfig) -> str:
    """``user@address:port`` as the commands reach it (IPv6 in brackets)."""
    address = f"[{host.ssh_address}]" if ":" in host.ssh_address else host.ssh_address
    return f"{host.ssh_user}@{address}:{host.ssh_port}"


def host_label(host: HostConfig) -> str:
    """How messages name a host: ``glm:target.hosts[gpu01] (deploy@gpu01.example.internal:22)``,
    or ``(this machine)`` for the local engine."""
    return f"glm:target.hosts[{host.name}] ({'this machine' if host.is_local else ssh_destination(host)})"


RUN_STDIN = one_line_script("host-command.sh", values={})
"""The command line of every host command: bash runs the script that came on stdin, read whole
first, so that none of the script's own commands reads the rest of it as its input."""


def host_command(
    name: str,
    host: HostConfig,
    script: str,
    ssh_private_key: pulumi.Output[str] | None,
    opts: pulumi.ResourceOptions,
    log_stderr: bool = True,
) -> local.Command | remote.Command:
    """A Command that runs ``script`` with bash on ``host`` when created or when the script changes.

    The script goes on stdin: pulumi-command quotes the command line in its errors, and a script
    there was printed whole, shell-escaped, in each of them (a refused preflight on two hosts: 139 KB
    of output, tests/test_preflight_refusal_engine.py). ``log_stderr=False`` leaves stderr out of the lines streamed while it runs: a command
    whose stderr is its verdict has it printed once, in the error. No ``delete``: these commands
    check or fetch; destroying the stack must never remove weights.
    """
    if host.is_local:
        logging = local.Logging.STDOUT_AND_STDERR if log_stderr else local.Logging.STDOUT
        return local.Command(
            name, create=RUN_STDIN, stdin=script, interpreter=["/bin/bash", "-c"], logging=logging, opts=opts
        )
    # The command line names the host, so an error with no output of the script's (a connection cut
    # mid-run says only "remote command exited without exit status") does too.
    return remote.Command(
        name,
        connection=ssh_connection(host, ssh_private_key),
        create=f"{RUN_STDIN}  # on {ssh_destination(host)} (glm:target.hosts[{host.name}])",
        stdin=script,
        logging=remote.Logging.STDOUT_AND_STDERR if log_stderr else remote.Logging.STDOUT,
        opts=opts,
    )
