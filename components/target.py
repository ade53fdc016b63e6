"""Running a shell script on the stack's target host: locally or over SSH (pulumi-command)."""

from __future__ import annotations

import shlex

import pulumi
from pulumi_command import local, remote

from components.config import HostConfig


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
    connection = remote.ConnectionArgs(
        host=host.ssh_address,
        user=host.ssh_user,
        port=host.ssh_port,
        private_key=ssh_private_key,
    )
    return remote.Command(name, connection=connection, create=f"bash -c {shlex.quote(script)}", opts=opts)
