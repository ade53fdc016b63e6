"""What a hardware kind *is*, as the preflight checks it on the box: ``HardwareFacts`` and the
tables it draws on (the accelerator model each profile is for, the driver each image's CUDA needs,
the model the profile serves). ``components/profiles.py`` fills them in per profile.

Sources are named next to each value (``../shared/SPEC.md``, ``../shared/seeds/``, NVIDIA's docs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AcceleratorKind = Literal["nvidia", "ascend", "none"]


@dataclass(frozen=True)
class AcceleratorModel:
    """The accelerator a profile's image and settings are for, as the host's tool names it."""

    name: str
    """A part of the name ``nvidia-smi --query-gpu=name`` / ``npu-smi info`` prints for it
    (``A800`` matches ``NVIDIA A800-SXM4-80GB`` and ``NVIDIA A800 80GB PCIe``)."""
    compute_capability: str | None
    """``nvidia-smi --query-gpu=compute_cap`` (``8.0`` for sm_80); ``None`` for NPUs."""
    source: str
    """Where the profile's claim comes from."""


@dataclass(frozen=True)
class DriverMinimum:
    """The oldest NVIDIA driver that runs an image built with a CUDA major version."""

    driver: str
    source: str


DRIVER_MINIMUMS: dict[str, DriverMinimum] = {
    # CUDA's minor-version compatibility: an image built with CUDA 12.y runs on any driver of the
    # 12.0 GA release or newer (PTX JIT of newer PTX aside), so the floor is the major's first driver.
    "12": DriverMinimum(
        "525.60.13",
        "NVIDIA CUDA Toolkit Release Notes, table 'CUDA Toolkit and Corresponding Driver Versions' "
        "(CUDA 12.0 GA, Linux x86_64) and the CUDA Compatibility guide (minor-version compatibility)",
    ),
    "13": DriverMinimum(
        "580.65.06",
        "NVIDIA CUDA Toolkit Release Notes, same table (CUDA 13.0 GA, Linux x86_64); ../shared/SPEC.md "
        "§7: 'CUDA 13.0 needs driver >= 580'. The rtx5090 seed's '要求 NVIDIA 驱动 ≥ 535' contradicts "
        "NVIDIA's table and is not used",
    ),
}
"""Minimum driver per CUDA major version of the serving image."""


@dataclass(frozen=True)
class ServedArchitecture:
    """What the weights folder's ``config.json`` says for the model a profile serves."""

    model_type: str
    architecture: str
    """One of ``config.json``'s ``architectures``."""
    source: str


GLM53_FLASH = ServedArchitecture(
    model_type="glm5_next",
    architecture="Glm5NextForConditionalGeneration",
    source="rtx5090-nvfp4-nightly.txt: 架构为 Glm5NextForConditionalGeneration（model_type: glm5_next）; "
    "the a800 and Ascend w8a8 checkpoints are the same model (quantization keeps config.json's identity)",
)


@dataclass(frozen=True)
class HardwareFacts:
    """What a hardware kind is; never overridden by a stack file."""

    accelerator: AcceleratorKind
    """How accelerators reach the container: NVIDIA ``gpus``, Ascend ``/dev/davinci*``, or none."""
    hbm_gib: float
    """Memory per accelerator card in GiB (0 for the local simulator)."""
    known_engine_start_seconds: float | None
    """Seed-measured time from container start to an engine that answers (weights load + init)."""
    known_weights_load_seconds: float | None
    """Seed-measured weights load alone; vLLM's engine-ready timeout must exceed it."""
    time_to_serve: str = "not measured in the seeds"
    """The seed's measured start, container start to serving, as a reviewer reads it in a preview
    (the API is down this long when the serving container is replaced on a one-box stack)."""
    mtp_warning: str | None = None
    """Why MTP speculative decoding is a poor trade on this hardware, when the seeds showed it."""
    accelerator_model: AcceleratorModel | None = None
    """The card the profile is for; the preflight refuses a box with another (``None``: any)."""
    image_cuda: str | None = None
    """CUDA version of the profile's serving image (``13.0.2``; ``12`` where only the major is known)."""
    served: ServedArchitecture | None = None
    """What the weights' ``config.json`` must say; ``None`` where no real weights are read."""
    ttft_slo_seconds: float = 0.5
    """The time-to-first-token objective (components/render/slo_rules.py), a bound of vLLM's histogram:
    the A100 seed (§9.1) wants first tokens within 500 ms under normal load (3 s reads as frozen)."""
    itl_slo_seconds: float = 0.05
    """The inter-token-latency objective, a bound of vLLM's histogram: the A100 seed (§9.1) calls
    below 20 tokens/s (50 ms a token) unusable, about 50 tokens/s enough for interactive use."""

    @property
    def driver_minimum(self) -> DriverMinimum | None:
        """The oldest driver that runs the image's CUDA, from ``DRIVER_MINIMUMS``."""
        if self.image_cuda is None:
            return None
        return DRIVER_MINIMUMS[self.image_cuda.split(".")[0]]
