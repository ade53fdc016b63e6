"""The stack's target host: one SSH identity for the Docker provider and the commands (pulumi-command).

Both reach the same ``user@address:port`` parsed once from ``dockerHost``, with the same key, and
both accept only ``hostKey``: Docker's ssh through ``-o KnownHostsCommand`` (the key line comes from
config, so no known_hosts file is written and the inputs are the same on every operator's machine),
the commands through pulumi-command's ``hostKey`` (unset, it would accept any key).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pulumi
from pulumi_command import local, remote

from components.config import ConfigError, HostConfig


def known_hosts_line(host: HostConfig) -> str:
    """``hostKey`` as a known_hosts line for ``dockerHost``'s address and port."""
    address = host.ssh_address if host.ssh_port == 22 else f"[{host.ssh_address}]:{host.ssh_port}"
    return f"{address} {host.host_key_line}"


def docker_ssh_opts(host: HostConfig) -> list[str]:
    """ssh options of the Docker provider: strict host-key checking against ``hostKey`` only, the
    commands' user and key, and no prompt that would hang ``pulumi up``."""
    opts = [
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "UserKnownHostsFile=/dev/null",
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", f"KnownHostsCommand=/bin/echo {known_hosts_line(host)}",
        "-o", f"User={host.ssh_user}",
        "-o", "ConnectTimeout=30",
    ]  # fmt: skip
    if host.identity_file:
        opts += ["-o", "IdentitiesOnly=yes", "-i", host.identity_file]
    return opts


def exec_ssh(host: HostConfig) -> dict[str, Any] | None:
    """How ``docker exec`` reaches ``host`` (components/nginx_reload.py): none for the local engine,
    else ssh to its address and port with the Docker provider's options."""
    if host.is_local:
        return None
    return {"address": host.ssh_address, "port": host.ssh_port, "opts": docker_ssh_opts(host)}


def command_private_key(
    host: HostConfig, ssh_private_key: pulumi.Output[str] | None
) -> pulumi.Output[str] | None:
    """The commands' key: the contents of ``identityFile`` (secret), else the SSH agent.

    ``glm:sshPrivateKey`` alone would reach only the commands (Docker's ssh takes a file), so it is
    refused rather than letting the two log in as different identities.
    """
    key = f"glm:target.hosts[{host.name}].identityFile"
    if ssh_private_key is not None:
        raise ConfigError(
            f"glm:sshPrivateKey is set, but only the SSH commands could use it; Docker's ssh reads a key "
            f"file, so the two would log in with different keys. Fix: save the key to a file (chmod 600), "
            f"set {key} to its path and run `pulumi config rm glm:sshPrivateKey`."
        )
    if host.identity_file is None:
        return None
    path = Path(host.identity_file).expanduser()
    try:
        return pulumi.Output.secret(path.read_text())
    except OSError as err:
        raise ConfigError(
            f"{key}={host.identity_file}: cannot read it ({err.strerror}). Fix: the path of "
            "a private key readable by the user running pulumi."
        ) from None


def ssh_connection(host: HostConfig, ssh_private_key: pulumi.Output[str] | None) -> remote.ConnectionArgs:
    """pulumi-command's connection: the Docker provider's user, address, port, key and host key."""
    return remote.ConnectionArgs(
        host=host.ssh_address,
        port=host.ssh_port,
        user=host.ssh_user,
        private_key=command_private_key(host, ssh_private_key),
        host_key=host.host_key_line,
        per_dial_timeout=30,
    )


def host_command(
    name: str,
    host: HostConfig,
    script: str,
    ssh_private_key: pulumi.Output[str] | None,
    opts: pulumi.ResourceOptions,
) -> local.Command | remote.Command:
    """A Command that runs ``script`` with bash on ``host`` when created or when the script changes.

    No ``delete``: these commands check or fetch; destroying the stack must never remove weights.
    """
    if host.is_local:
        return local.Command(name, create=script, interpreter=["/bin/bash", "-c"], opts=opts)
    # pulumi-command quotes the command in its errors (a connection cut mid-run says only "remote
    # command exited without exit status"): the first line names the host, so the error does too.
    address = f"[{host.ssh_address}]" if ":" in host.ssh_address else host.ssh_address
    where = f"# on {host.ssh_user}@{address}:{host.ssh_port} (glm:target.hosts[{host.name}])\n"
    return remote.Command(
        name,
        connection=ssh_connection(host, ssh_private_key),
        create=f"bash -c {shlex.quote(where + script)}",
        opts=opts,
    )
