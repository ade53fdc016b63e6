"""The stack's sections in one model (``StackSections``): its fields, in the order of the ``glm:*``
keys, and what they derive together (the image served, the mounts kept in a rehearsal, vLLM's
shutdown timeout, the cache environment). The rules and advisories read it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, PrivateAttr

from components.config.edge import (
    REHEARSAL_IMAGE,
    FrontConfig,
    MonitoringConfig,
    PreflightConfig,
    RehearsalConfig,
    SemanticProbeConfig,
    is_driver_path,
)
from components.config.replica import (
    SHUTDOWN_MARGIN_SECONDS,
    SHUTDOWN_TIMEOUT_SINCE,
    ContainerConfig,
    ImageConfig,
    ModelConfig,
    MountConfig,
    ServingConfig,
)
from components.config.target import TargetConfig
from components.config.values import Hardware, hardware_description
from components.gate.settings import SmokeConfig
from components.model_base import Model
from components.profiles import PROFILES, HardwareFacts

CACHE_MOUNT_PATH = "/var/cache/glm53"
"""Where the persistent compile/JIT cache volume is mounted in the serving container."""


class StackSections(Model):
    """The stack's sections side by side, each valid on its own, and what they derive together;
    ``StackConfig`` is the one that passed the rules across sections."""

    _replica_values: dict[str, Any] = PrivateAttr(default_factory=dict)
    _stack: str | None = PrivateAttr(default=None)
    """The stack's name, for the commands its advisories print (``build_stack_config`` sets it)."""
    hardware: Hardware = Field(description=hardware_description())
    target: TargetConfig = Field(description="Where it runs (one host today).")
    image: ImageConfig = Field(description="The serving image.")
    model: ModelConfig = Field(description="The weights and served name.")
    serving: ServingConfig = Field(description="The vLLM command line and environment.")
    container: ContainerConfig = Field(description="The serving container.")
    front: FrontConfig = Field(default_factory=FrontConfig, description="The Nginx front.")
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig, description="Prometheus.")
    smoke: SmokeConfig = Field(default_factory=SmokeConfig, description="The smoke gate.")
    preflight: PreflightConfig = Field(default_factory=PreflightConfig, description="Host checks.")
    semantic_probe: SemanticProbeConfig = Field(
        default_factory=SemanticProbeConfig, description="The semantic probe after the deploy."
    )
    promote_from: str | None = Field(
        None,
        description="Fully qualified source stack (org/glm/a800-staging) whose verified outputs this "
        "stack promotes; empty for none.",
    )
    rehearsal: RehearsalConfig = Field(
        default_factory=RehearsalConfig,
        description="Rehearse the production deployment on a box without the accelerators (README "
        '"Rehearsal")',
    )

    @property
    def facts(self) -> HardwareFacts:
        return PROFILES[self.hardware].facts

    @property
    def rehearsing(self) -> bool:
        return self.rehearsal.enabled

    @property
    def serving_image(self) -> ImageConfig:
        """What the serving container runs: the profile's image, or in a rehearsal the simulator
        built on the target host from ``glm:rehearsal.baseImage``."""
        if not self.rehearsing:
            return self.image
        build = REHEARSAL_IMAGE.model_copy(update={"base_image": self.rehearsal.base_image})
        return ImageConfig(build=build, vllm_version=self.image.vllm_version)

    @property
    def serving_mounts(self) -> list[MountConfig]:
        """``glm:container.mounts``, less the driver mounts in a rehearsal."""
        return [m for m in self.container.mounts if not (self.rehearsing and is_driver_path(m.source))]

    def rehearsal_replaced(self) -> dict[str, Any]:
        """What a rehearsal replaces, production value beside rehearsal value (an output)."""
        image = self.image.to_build
        production_image = image.repository + " (built)" if image else self.image.reference
        cards = self.container.accelerators if self.facts.accelerator == "ascend" else []
        return {
            "image": {"production": production_image, "rehearsal": f"{REHEARSAL_IMAGE.repository} (built)"},
            "gpus": "all" if self.facts.accelerator == "nvidia" else None,
            "devices": [f"/dev/davinci{i}" for i in cards] + list(self.container.devices),
            "mounts": [m.source for m in self.container.mounts if is_driver_path(m.source)],
        }

    @property
    def replica_values(self) -> dict[str, Any]:
        """The :data:`REPLICA_KEYS` as the stack set them (camelCase, before the profile's
        defaults): published in ``verified`` when the gate passed, so a rollback can put them back."""
        return dict(self._replica_values)

    @property
    def shutdown_timeout(self) -> int | None:
        """vLLM's ``--shutdown-timeout``: set, or 5 s under Docker's stop grace where vLLM has it.
        Defence in depth: a roll drains a replica at the front before Docker stops it."""
        if self.serving.shutdown_timeout is not None:
            return self.serving.shutdown_timeout
        grace = self.container.stop_grace_seconds
        if self.image.vllm_version_tuple < SHUTDOWN_TIMEOUT_SINCE or grace <= SHUTDOWN_MARGIN_SECONDS:
            return None
        return grace - SHUTDOWN_MARGIN_SECONDS

    @property
    def cache_env(self) -> dict[str, str]:
        """Point every compile/JIT cache at the persistent cache volume."""
        return {
            "VLLM_CACHE_ROOT": f"{CACHE_MOUNT_PATH}/vllm",
            "TRITON_CACHE_DIR": f"{CACHE_MOUNT_PATH}/triton",
            "TILELANG_CACHE_DIR": f"{CACHE_MOUNT_PATH}/tilelang",
            "HF_HOME": f"{CACHE_MOUNT_PATH}/huggingface",
        }


def semantic_probe_runs(c: StackSections) -> bool:
    """Whether the stack deploys the probe (behind a TLS front too: components/front_tls.py)."""
    return c.semantic_probe.enabled


def usage_meter_runs(c: StackSections) -> bool:
    """Whether the front's path goes through the usage meter: unless ``glm:front.usageMeter.enabled``
    is false, on Docker hosts and on Kubernetes alike."""
    return c.front.usage_meter.enabled
