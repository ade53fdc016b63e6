"""Preflight: check the target host before the serving container is created.

Accelerator count and driver (``nvidia-smi`` / ``npu-smi info``), free disk for the weights, the
weights themselves (unless the download step fetches them) and /dev/shm. Each failure says what was
found, what the stack config asks for, and which key to change.
"""

from __future__ import annotations

import shlex

import pulumi

from components.config import HostConfig, ModelConfig, PreflightConfig
from components.model_volume import verify_script
from components.profiles import AcceleratorKind
from components.target import host_command


def preflight_script(
    preflight: PreflightConfig, model: ModelConfig, accelerator: AcceleratorKind, accelerators: list[int]
) -> str:
    """The bash script run on the host; exits non-zero with a message naming the config key.

    ``accelerator``: the hardware's kind (which tool counts the cards); ``accelerators``: the
    indices ``glm:container.accelerators`` gives the container (at least that many must be found).
    """
    want = len(accelerators)
    need_disk = preflight.min_free_disk_gib
    if need_disk is None:
        need_disk = model.weights_gib if model.download.enabled else 0
    lines = [
        "set -eu",
        'fail() { echo "preflight: $*" >&2; exit 1; }',
    ]
    if accelerator == "nvidia":
        lines += [
            "command -v nvidia-smi >/dev/null || fail 'nvidia-smi not found on the host: install the NVIDIA driver and container toolkit'",
            "found=$(nvidia-smi -L | grep -c '^GPU' || true)",
            f'[ "$found" -ge {want} ] || fail "found $found NVIDIA GPUs, glm:container.accelerators lists {want}"',
            "driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)",
            'echo "preflight: $found GPUs, driver $driver"',
        ]
    elif accelerator == "ascend":
        lines += [
            "command -v npu-smi >/dev/null || fail 'npu-smi not found on the host: install the Ascend driver (/usr/local/sbin/npu-smi)'",
            # No fixed file in /tmp: another user's copy there made this fail (stand-in host).
            'npu_info=$(npu-smi info 2>&1) || fail "npu-smi info failed: $(printf %s "$npu_info" | head -c 300)"',
            "found=$(ls /dev/davinci[0-9]* 2>/dev/null | wc -l)",
            f'[ "$found" -ge {want} ] || fail "found $found /dev/davinci* NPUs, glm:container.accelerators lists {want}"',
            'echo "preflight: $found NPUs"',
        ]
    lines += [
        f"dir={shlex.quote(model.host_dir)}",
        'probe="$dir"; while [ ! -d "$probe" ]; do probe=$(dirname "$probe"); done',
        "free_kib=$(df -Pk \"$probe\" | awk 'NR==2 {print $4}')",
        f"need_kib=$(awk 'BEGIN {{printf \"%d\", {need_disk} * 1048576}}')",
        '[ "$free_kib" -ge "$need_kib" ] || fail "only $((free_kib / 1048576)) GiB free under $probe, '
        f'the weights need {need_disk:g} GiB (glm:model.weightsGib / glm:preflight.minFreeDiskGib)"',
        "shm_kib=$(df -Pk /dev/shm | awk 'NR==2 {print $2}')",
        f"need_shm_kib=$(awk 'BEGIN {{printf \"%d\", {preflight.min_shm_gib} * 1048576}}')",
        '[ "$shm_kib" -ge "$need_shm_kib" ] || fail "/dev/shm on the host is $((shm_kib / 1024)) MiB, '
        f'glm:preflight.minShmGib asks for {preflight.min_shm_gib:g} GiB"',
        'echo "preflight: $((free_kib / 1048576)) GiB free under $probe, /dev/shm $((shm_kib / 1024)) MiB"',
    ]
    script = "\n".join(lines) + "\n"
    if not model.download.enabled:
        script += verify_script(model)
    return script


class Preflight(pulumi.ComponentResource):
    """Host checks that must pass before the serving container is created."""

    stdout: pulumi.Output[str]
    """What the checks found (accelerators, driver, disk, shm)."""

    def __init__(
        self,
        name: str,
        preflight: PreflightConfig,
        model: ModelConfig,
        accelerator: AcceleratorKind,
        accelerators: list[int],
        host: HostConfig,
        ssh_private_key: pulumi.Output[str] | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """What is checked as in :func:`preflight_script`; ``host``: which of ``glm:target.hosts``."""
        super().__init__("glm:preflight:Preflight", name, None, opts)
        self.check = host_command(
            f"{name}-check",
            host,
            preflight_script(preflight, model, accelerator, accelerators),
            ssh_private_key,
            pulumi.ResourceOptions(parent=self),
        )
        self.stdout = self.check.stdout
        self.register_outputs({"stdout": self.stdout})
