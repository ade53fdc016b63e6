"""Preflight: check the target host before the serving container is created.

What a failed start would otherwise show only after a 6-12 minute load, in seconds on the box:
on NVIDIA, that every listed GPU exists, has the free memory ``gpuMemoryUtilization`` asks for
(naming the processes that hold it, by GPU UUID whatever their names hold), is the card the
profile is for, has a driver new enough for the image's CUDA, and that Docker can hand GPUs to a
container; on Ascend, the ``/dev/davinciN`` devices, the chip and its HBM in use; everywhere, free
disk, /dev/shm and the weights (unless the download step fetches them). Every problem is reported
at once, each naming the config key and the fix; of what the box reports (names, tools' errors)
only printable ASCII is shown.

The script is components/render/preflight.py's (a serving pod's init container runs the same
checks); this module runs it on the host before the serving container is created.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import pulumi

from components.config import HostConfig, ModelConfig, PreflightConfig
from components.docker.target import host_command, host_label
from components.hardware import HardwareFacts
from components.render.preflight import preflight_settings, preflight_text


def preflight_script(
    preflight: PreflightConfig,
    model: ModelConfig,
    facts: HardwareFacts,
    profile: str,
    accelerators: list[int],
    gpu_memory_utilization: float,
    host: HostConfig,
) -> str:
    """The bash script run on the host; exits 1 naming every problem, its config key and the fix,
    one line each on stderr, each naming ``host``.

    ``facts``/``profile``: the hardware profile (``glm:hardware``); ``accelerators``: the indices
    ``glm:container.accelerators`` gives the container.
    """
    settings = preflight_settings(preflight, model, facts, profile, accelerators, gpu_memory_utilization)
    host_settings = {**settings, "HOST": shlex.quote(host_label(host)), "CARDS_FROM": shlex.quote("docker")}
    return preflight_text(host_settings, model, facts)


@dataclass(frozen=True)
class PreflightArgs:
    """What the checks compare the host with, and how to reach it."""

    preflight: PreflightConfig
    """``glm:preflight``: the free disk (default: the weights' size) and /dev/shm the host must have."""
    model: ModelConfig
    """``glm:model``: where the weights are on the host, their size, and whether the download step
    fetches them (else they are checked in place)."""
    facts: HardwareFacts
    """The hardware profile's facts: the accelerator, the card, the driver the image's CUDA needs."""
    profile: str
    """The profile's name (``glm:hardware``), for the messages."""
    accelerators: list[int]
    """``glm:container.accelerators``: the indices the container gets."""
    gpu_memory_utilization: float
    """``glm:serving.gpuMemoryUtilization``: the share of each card's memory that must be free."""
    host: HostConfig
    """Which of ``glm:target.hosts`` runs the checks."""
    ssh_private_key: pulumi.Output[str] | None = None
    """``glm:sshPrivateKey``, refused for an SSH host (the checks log in through the SSH agent)."""


class Preflight(pulumi.ComponentResource):
    """Host checks that must pass before the serving container is created."""

    stdout: pulumi.Output[str]
    """What the checks found (accelerators, free memory, driver, runtime, disk, shm, weights)."""

    def __init__(self, name: str, args: PreflightArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        """What is checked as in :func:`preflight_script`."""
        super().__init__("glm:preflight:Preflight", name, None, opts)
        script = preflight_script(
            args.preflight,
            args.model,
            args.facts,
            args.profile,
            args.accelerators,
            args.gpu_memory_utilization,
            args.host,
        )
        # The problems are the script's stderr: printed once, in the error, not also as it runs.
        self.check = host_command(
            f"{name}-check",
            args.host,
            script,
            args.ssh_private_key,
            pulumi.ResourceOptions(parent=self),
            log_stderr=False,
        )
        self.stdout = self.check.stdout
        self.register_outputs({"stdout": self.stdout})
