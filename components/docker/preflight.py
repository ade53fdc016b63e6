"""Preflight: check the target host before the serving container is created.

What a failed start would otherwise show only after a 6-12 minute load, in seconds on the box:
on NVIDIA, that every listed GPU exists, has the free memory ``gpuMemoryUtilization`` asks for
(naming the processes that hold it, by GPU UUID whatever their names hold), is the card the
profile is for, has a driver new enough for the image's CUDA, and that Docker can hand GPUs to a
container; on Ascend, the ``/dev/davinciN`` devices, the chip and its HBM in use; everywhere, free
disk, /dev/shm and the weights (unless the download step fetches them). Every problem is reported
at once, each naming the config key and the fix; of what the box reports (names, tools' errors)
only printable ASCII is shown.

The checks are ``components/host/preflight.sh`` (bash and awk, run as is by the tests) and
``components/host/weights_check.py``; this module fills the stack's values above them
(``templates/preflight-settings.sh``, ``preflight-check-weights.sh``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import pulumi

from components.config import HostConfig, ModelConfig, PreflightConfig
from components.docker.model_volume import weights_check_values
from components.docker.target import host_command, host_label
from components.hardware import HardwareFacts
from components.template import host_script

PREFLIGHT_SH = Path(__file__).parents[1] / "host" / "preflight.sh"

CONTEXT_MIB = 528
"""MiB the vLLM worker's own CUDA context takes before vLLM compares the free memory it sees with
``gpuMemoryUtilization`` x total: nvidia-smi's free memory before the worker starts must cover both.
Measured on the real H200 (driver 580.159.04, PyTorch): nvidia-smi free 143156 MiB before, 142629 MiB
free seen by the process after creating its context: 527 MiB. Comparing with nvidia-smi's total
(143771 MiB, which includes the 616 MiB the driver reserves; cudaMemGetInfo's total is 143155 MiB)
adds GMU x 616 MiB more margin. tests/fixtures/nvidia-h200/README.md has the run."""

IDLE_HBM_MIB = 3500
"""MB ``npu-smi info`` shows in use on an idle 64 GB NPU: the driver's own (3339-3414 MB in the
public outputs under tests/fixtures/npu-smi/), not a process's; it does not count against the budget."""


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
    settings = _settings(preflight, model, facts, profile, accelerators, gpu_memory_utilization)
    host_settings = {**settings, "HOST": shlex.quote(host_label(host)), "CARDS_FROM": shlex.quote("docker")}
    return _script(host_settings, model, facts)


POD_HOST = '"glm:target.kubernetes node ${NODE_NAME}"'
"""How a pod's preflight names where it runs, as the shell reads it: its node, from the downward
API (``NODE_NAME``)."""


def pod_preflight_script(
    preflight: PreflightConfig,
    model: ModelConfig,
    facts: HardwareFacts,
    profile: str,
    accelerator: str,
    cards: int,
    gpu_memory_utilization: float,
) -> str:
    """The same checks in the serving pod's init container, on the ``cards`` cards of kind
    ``accelerator`` (``none`` in a rehearsal) the device plugin gave the pod, indices 0 to
    ``cards`` - 1 (a container sees only its own); the weights where the pod mounts them
    (``model.mountPath``) and the pod's /dev/shm; its lines name the node. The Docker runtime check
    is left out: the device plugin handed the cards over, or the container would not have started."""
    mounted = model.model_copy(update={"host_dir": model.mount_path})
    settings = _settings(preflight, mounted, facts, profile, list(range(cards)), gpu_memory_utilization)
    pod = {
        **settings,
        "HOST": POD_HOST,
        "ACCELERATOR": shlex.quote(accelerator),
        "CARDS_FROM": shlex.quote("device-plugin"),
    }
    return _script(pod, mounted, facts)


def _settings(
    preflight: PreflightConfig,
    model: ModelConfig,
    facts: HardwareFacts,
    profile: str,
    accelerators: list[int],
    gpu_memory_utilization: float,
) -> dict[str, str]:
    need_disk = preflight.min_free_disk_gib
    if need_disk is None:
        need_disk = model.weights_gib if model.download.enabled else 0
    chip = facts.accelerator_model
    driver = facts.driver_minimum
    values = {
        "ACCELERATOR": facts.accelerator,
        "ACCELERATORS": " ".join(map(str, accelerators)),
        "GMU": f"{gpu_memory_utilization:g}",
        "CONTEXT_MIB": str(CONTEXT_MIB),
        "IDLE_HBM_MIB": str(IDLE_HBM_MIB),
        "PROFILE": profile,
        "CHIP": chip.name if chip else "",
        "CHIP_CC": chip.compute_capability or "" if chip else "",
        "IMAGE_CUDA": facts.image_cuda or "",
        "DRIVER_MINIMUM": driver.driver if driver else "",
        "HOST_DIR": model.host_dir,
        "NEED_DISK_GIB": _gib(need_disk),
        "MIN_SHM_GIB": _gib(preflight.min_shm_gib),
    }
    return {name: shlex.quote(value) for name, value in values.items()}


def _gib(size: float) -> str:
    """A size as the operator wrote it, for awk and for the refusal's words: ``1000000``, ``0.5``
    (``:g`` wrote ``1e+06``, which awk reads but the message printed as "1e+06 GiB")."""
    return str(int(size)) if float(size).is_integer() else repr(float(size))


def _script(settings: dict[str, str], model: ModelConfig, facts: HardwareFacts) -> str:
    """The settings (quoted for the shell: ``templates/preflight-settings.sh``), the weights check
    where the weights are checked in place (``preflight-check-weights.sh``), then
    components/host/preflight.sh, whole."""
    if model.download.enabled:
        script = host_script("preflight-settings.sh", values=settings)
    else:
        weights = weights_check_values(model, facts.served)
        script = host_script(
            "preflight-settings.sh", "preflight-check-weights.sh", values={**settings, **weights}
        )
    return script + PREFLIGHT_SH.read_text()


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
