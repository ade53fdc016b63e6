"""The preflight's script, for a Docker host (components/docker/preflight.py runs it over the
host's shell) and for a serving pod's init container (components/kubernetes/workload.py).

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
from pathlib import Path

from components.config import ModelConfig, PreflightConfig
from components.hardware import HardwareFacts, ServedArchitecture
from components.template import host_script

HOST_DIR = Path(__file__).parents[1] / "host"
PREFLIGHT_SH = HOST_DIR / "preflight.sh"
WEIGHTS_CHECK = HOST_DIR / "weights_check.py"

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


def weights_check_values(model: ModelConfig, served: ServedArchitecture | None = None) -> dict[str, str]:
    """``templates/weights-verify.sh``'s values, and preflight's check_weights': the program
    ``components/host/weights_check.py`` (its docstring says what it checks) and its arguments, with
    ``config.json``'s identity checked against ``served``."""
    args = [model.host_path, f"{model.weights_gib:g}"]
    if served is not None:
        args += [served.model_type, served.architecture]
    # The heredoc's last line is the template's: the program without its final newline.
    return {"ARGS": shlex.join(args), "PROGRAM": WEIGHTS_CHECK.read_text().removesuffix("\n")}


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
    settings = preflight_settings(
        preflight, mounted, facts, profile, list(range(cards)), gpu_memory_utilization
    )
    pod = {
        **settings,
        "HOST": POD_HOST,
        "ACCELERATOR": shlex.quote(accelerator),
        "CARDS_FROM": shlex.quote("device-plugin"),
    }
    return preflight_text(pod, mounted, facts)


def preflight_settings(
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


def preflight_text(settings: dict[str, str], model: ModelConfig, facts: HardwareFacts) -> str:
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
