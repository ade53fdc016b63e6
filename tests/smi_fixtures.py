"""What real hosts print, for the preflight's tests and the stand-in host's fake tools.

``tests/fixtures/nvidia-h200/``: a real H200 host's ``nvidia-smi`` (copies of ``../shared/fixtures``,
plus what this project's runs on the real host added; README there). ``tests/fixtures/npu-smi/``: a
real 8-NPU ``npu-smi info`` from a public bug report. Larger boxes are *derived* from these rows,
never written by hand: :func:`eight_gpus` repeats the real H200 row with the index, the UUID's last
digits and the PCI device number stepped; a busy GPU takes the real busy row's memory columns and
the real ``--query-compute-apps`` line, with that GPU's UUID.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from components.config import StackConfig, build_stack_config
from components.hardware import AcceleratorModel
from components.profiles import PROFILES

FIXTURES = Path(__file__).parent / "fixtures"
H200 = FIXTURES / "nvidia-h200"
NPU_SMI = FIXTURES / "npu-smi" / "vllm-ascend-5021-910b2.txt"

GPU_QUERY = (
    "--query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,memory.used,memory.free,compute_cap"
    " --format=csv,noheader,nounits"
)
APPS_QUERY = "--query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv"


def section(path: Path, title: str) -> str:
    """The output under ``### <title>`` in a capture file (capture.sh's layout), newline-terminated."""
    text = path.read_text()
    start = text.index(f"### {title}\n") + len(f"### {title}\n")
    end = text.find("\n### ", start)
    return text[start : end + 1 if end >= 0 else None]


@dataclass(frozen=True)
class NvidiaSmi:
    """What the fake ``nvidia-smi`` answers to the preflight's two queries."""

    gpus: str
    apps: str

    def install(self, bin_dir: Path) -> None:
        """A fake ``nvidia-smi`` in ``bin_dir`` that replays these outputs for exactly the queries
        the captures hold and fails on any other (so a changed query cannot pass unnoticed)."""
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "nvidia-smi.gpus").write_text(self.gpus)
        (bin_dir / "nvidia-smi.apps").write_text(self.apps)
        tool = bin_dir / "nvidia-smi"
        tool.write_text(
            "#!/bin/sh\n# Replays real nvidia-smi output (tests/smi_fixtures.py).\n"
            'here=$(dirname "$0")\n'
            'case "$*" in\n'
            f'  "{GPU_QUERY}") cat "$here/nvidia-smi.gpus" ;;\n'
            f'  "{APPS_QUERY}") cat "$here/nvidia-smi.apps" ;;\n'
            '  *) echo "fake nvidia-smi: no capture for: $*" >&2; exit 2 ;;\n'
            "esac\n"
        )
        tool.chmod(0o755)


def idle_row() -> list[str]:
    """The real idle H200's ``--query-gpu`` row, split at ``, ``."""
    return section(H200 / "nvidia-smi-idle.txt", "same, noheader,nounits").strip().split(", ")


def busy_row() -> list[str]:
    """The real H200's ``--query-gpu`` row while another process held 60 GiB (this project's run)."""
    return section(H200 / "preflight-h200-busy.txt", f"busy: nvidia-smi {GPU_QUERY}").strip().split(", ")


def apps_header_and_busy_line() -> tuple[str, str]:
    """``--query-compute-apps`` on that busy GPU: the header and the holder's line."""
    header, line = (
        section(H200 / "preflight-h200-busy.txt", f"busy: nvidia-smi {APPS_QUERY}").strip().split("\n")
    )
    return header, line


def eight_gpus(
    count: int = 8, busy: tuple[int, ...] = (), driver: str | None = None, process: str | None = None
) -> NvidiaSmi:
    """``count`` H200s derived from the real one (module docstring); ``busy`` GPUs held by the real
    busy capture's process; ``driver`` replaces the real driver version (an older host); ``process``
    replaces that process's name (what any user on the box can set, bytes included)."""
    _, name, uuid, bus, real_driver, *_, cc = idle_row()
    header, busy_line = apps_header_and_busy_line()
    rows, apps = [], [header]
    for i in range(count):
        gpu_uuid = f"{uuid[:-2]}{i:02x}"
        memory = (busy_row() if i in busy else idle_row())[5:8]
        pci = f"{bus[:-4]}{6 + i:02X}.0"
        rows.append(", ".join([str(i), name, gpu_uuid, pci, driver or real_driver, *memory, cc]))
        if i in busy:
            pid, real_process, used, _ = busy_line.split(", ")
            apps.append(", ".join([pid, real_process if process is None else process, used, gpu_uuid]))
    return NvidiaSmi("\n".join(rows) + "\n", "\n".join(apps) + "\n")


def npu_smi_info(chip: str | None = None, idle: bool = False) -> str:
    """The real 8-NPU ``npu-smi info``; ``chip`` renames the NPUs (910B2 → 910B3: same table, the
    profile's chip); ``idle`` gives every NPU the idle NPU 0's HBM figure and process line."""
    text = NPU_SMI.read_text()
    if chip is not None:
        text = text.replace("910B2", chip.ljust(5))
    if idle:
        devices, processes = text.split("| NPU     Chip")
        separator = "+" + devices.rsplit("\n+", 2)[1].split("\n")[0] + "\n"
        none = next(line for line in processes.splitlines() if "No running processes" in line) + "\n"
        devices = re.sub(r"\d+ ?/ 65536( *)\|", lambda m: "3414 / 65536".ljust(len(m[0]) - 1) + "|", devices)
        head = "| NPU     Chip" + processes.split("\n", 2)[0] + "\n" + processes.split("\n", 2)[1] + "\n"
        text = devices + head + "".join(none.replace("NPU 0 ", f"NPU {i} ") + separator for i in range(8))
    return text


H200_FACTS = replace(
    PROFILES["a800"].facts,
    accelerator_model=AcceleratorModel(
        "H200", "9.0", "tests/fixtures/nvidia-h200 (nvidia-smi on the real host)"
    ),
    image_cuda="13.0",
)
"""An a800-like profile for the real H200 host (whose nvidia-smi the fixtures hold), so that the
checks a box of the profile's own card passes can pass on that real card."""


def without_comments(script: str) -> str:
    """A script less its comment lines: what a run on a real host vouches for is the commands it ran.
    A comment changed since (a path renamed after a move, issue 51) leaves that run standing; a
    changed command does not.

    >>> without_comments("#!/bin/bash\\n# a note\\nset -e  # kept\\n")
    'set -e  # kept'
    """
    return "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))


def _h200_run_config(hardware: str, accelerators: list[int], mount_path: str | None = None) -> StackConfig:
    """The stack the real H200 runs render: weights in /tmp/w (2 GiB), ``accelerators`` listed;
    ``mount_path``: where a pod mounts them (its own scripts read them there)."""
    from tests.host_scripts import HOST

    model = {"hostDir": "/tmp/w", "directory": "GLM-5.3-Flash", "weightsGib": 2}
    return build_stack_config(
        {
            "hardware": hardware,
            "target": HOST,
            "front": {"allowPlainHttp": True},
            "model": {**model, "mountPath": mount_path} if mount_path else model,
            "serving": {"tensorParallelSize": len(accelerators)},
            "container": {"accelerators": accelerators},
        }
    )


def render_h200_scripts() -> dict[str, str]:
    """The preflight scripts the real H200 run uses (``run-on-h200.sh``), weights in /tmp/w: the
    H200 profile on GPU [0] and on [0..7], and the a800 and rtx5090 profiles on GPU [0]."""
    from tests.host_scripts import preflight_of

    config = _h200_run_config
    scripts = {
        "preflight-h200-1.sh": preflight_of(config("a800", [0]), H200_FACTS, "h200"),
        "preflight-h200-8.sh": preflight_of(config("a800", list(range(8))), H200_FACTS, "h200"),
        "preflight-a800-1.sh": preflight_of(config("a800", [0])),
        "preflight-rtx5090-1.sh": preflight_of(config("rtx5090", [0])),
    }
    return scripts


def render_h200_pod_scripts() -> dict[str, str]:
    """The pod's preflight (``CARDS_FROM=device-plugin``) the real H200 ran (``pod-2026-12-03/``):
    the H200 profile given 1 card and asking for 8, weights mounted at /tmp/w."""
    from components.render.preflight import pod_preflight_script

    scripts = {}
    for cards in (1, 8):
        config = _h200_run_config("a800", list(range(cards)), mount_path="/tmp/w")
        scripts[f"pod-preflight-h200-{cards}.sh"] = pod_preflight_script(
            config.preflight, config.model, H200_FACTS, "h200", "nvidia", cards,
            config.serving.gpu_memory_utilization,
        )  # fmt: skip
    return scripts
