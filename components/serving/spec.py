"""What the serving container runs, rendered once from the config: the same for a Docker host's
container and a Kubernetes pod.

``render_serving(config)`` gives the ``ServingSpec`` (argv, flags by name, env, devices, mounts)
that both targets' deployments hand to their containers, the gates, the promotion fingerprint and
the outputs; nothing parses the argv back. The argv is one ``--flag=value`` element per flag in a
fixed order, so changing one flag in a stack file shows up in ``pulumi preview --diff`` as exactly
one changed element of ``command``. The flags themselves are rendered by ``components/vllm_flags/``
(vLLM's command line in one place).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from components.config.replica import ContainerConfig, MountConfig
from components.template import one_line_script
from components.vllm_flags.render import FlagValue, argv_of, render_flags
from components.vllm_flags.render import shown_flags as _shown

if TYPE_CHECKING:
    from components.config.stack import StackConfig


def render_argv(config: StackConfig) -> list[str]:
    """The `vllm serve` arguments: the model path, then one ``--flag[=value]`` per element.

    >>> from components.config import build_stack_config
    >>> render_argv(build_stack_config({"hardware": "local"}))[:3]
    ['/models/GLM-5.3-Flash-sim', '--port=8000', '--served-model-name=glm-5.3-flash']
    """
    return argv_of(config.model.container_path, render_flags(config), config.serving.extra_args)


def render_env(config: StackConfig) -> dict[str, str]:
    """The container environment: profile env, accelerator pinning, cache dirs, then extraEnv."""
    env = dict(config.serving.env)
    visible = ",".join(str(i) for i in config.container.accelerators)
    if config.facts.accelerator == "ascend":
        env["ASCEND_RT_VISIBLE_DEVICES"] = visible
    elif config.facts.accelerator == "nvidia":
        # The container gets --gpus all (the only value pulumi-docker 4.11 keeps stable, SPEC §6);
        # CUDA_VISIBLE_DEVICES pins vLLM to the listed cards, numbered as nvidia-smi numbers them.
        # NVIDIA_VISIBLE_DEVICES says the same to the NVIDIA runtime where it reads it (a
        # `--runtime nvidia` start); Docker's own --gpus all adds `all` after it.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = visible
        env["NVIDIA_VISIBLE_DEVICES"] = visible
    env.update(config.cache_env)
    if config.serving.allowed_media_domains:
        # Without this a URL on an allowed host could redirect to any other (vLLM's docs).
        env["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] = "0"
    env.update(config.serving.extra_env)
    if config.rehearsing:
        # The simulator speaks the wire format of the profile's vLLM (e.g. 0.23.0 on ascend), and
        # prefills and holds KV as the seeds measured the hardware (images/vllm-sim/simulator/hardware.py).
        env["VLLM_SIM_VERSION"] = config.image.vllm_version
        env["VLLM_SIM_PROFILE"] = config.hardware
    return dict(sorted(env.items()))


def render_devices(config: StackConfig) -> list[str]:
    """Device nodes for the container (Ascend: one davinci node per card plus control devices);
    none in a rehearsal, whose host has no accelerator."""
    if config.rehearsing:
        return []
    cards = []
    if config.facts.accelerator == "ascend":
        cards = [f"/dev/davinci{i}" for i in config.container.accelerators]
    return cards + list(config.container.devices)


def command_line(argv: Sequence[str]) -> str:
    """The full command line, for reviewers and operators (shell-quoted)."""
    return shlex.join(["vllm", "serve", *argv])


def curl_command(url: str, served_name: str) -> str:
    """The ``curl`` output, a chat through the front at ``url`` to paste: every value shell-quoted,
    the body built as JSON (never by hand), the key read from ``$GLM_API_KEY``."""
    body = json.dumps(
        {"model": served_name, "messages": [{"role": "user", "content": "What is 13*17?"}]},
        separators=(",", ":"),
    )
    return (
        f"curl -s {shlex.quote(url + '/chat/completions')} "
        '-H "Authorization: Bearer $GLM_API_KEY" '
        f"-H 'Content-Type: application/json' -d {shlex.quote(body)}"
    )


@dataclass(frozen=True)
class ServingSpec:
    """The serving container as the config renders it, once per deployment (:func:`render_serving`),
    and handed to everything that needs it: the containers, the gates, the promotion fingerprint
    and the outputs."""

    hardware: str
    served_name: str
    model_path: str
    """Where the weights are inside the container (the argv's first element)."""
    revision: str | None
    """The weights' revision: part of what a promotion compares."""
    port: int
    max_model_len: int
    flags: dict[str, FlagValue]
    """Each rendered flag and its value (True for a bare switch, a tuple for several arguments),
    in argv order."""
    extra_args: list[str]
    env: dict[str, str]
    devices: list[str]
    nvidia_gpus: bool
    """``--gpus all`` (the cards are pinned by ``CUDA_VISIBLE_DEVICES`` in ``env``)."""
    mounts: list[MountConfig]
    """Bind mounts besides the model volume (Ascend driver, rtx5090 site-packages)."""
    container: ContainerConfig
    load_deadline_seconds: int
    """The gate's deadline: a load that long is normal, so Docker's health check starts after it."""
    rehearsal: bool
    """The vLLM-protocol simulator runs in place of the engine (``glm:rehearsal``)."""

    @property
    def argv(self) -> list[str]:
        return argv_of(self.model_path, self.flags, self.extra_args)

    @property
    def shown_flags(self) -> dict[str, str | bool]:
        """The flags as the gate's messages and the ``vllmFlags`` output show them."""
        return _shown(self.flags)


def render_serving(config: StackConfig) -> ServingSpec:
    """Everything the serving container runs, from the config."""
    return ServingSpec(
        hardware=config.hardware,
        served_name=config.model.served_name,
        model_path=config.model.container_path,
        revision=config.model.revision,
        port=config.serving.port,
        max_model_len=config.serving.max_model_len,
        flags=render_flags(config),
        extra_args=list(config.serving.extra_args),
        env=render_env(config),
        devices=render_devices(config),
        nvidia_gpus=config.facts.accelerator == "nvidia" and not config.rehearsing,
        mounts=list(config.serving_mounts),
        container=config.container,
        load_deadline_seconds=config.smoke.deadline_seconds,
        rehearsal=config.rehearsing,
    )


def health_probe(port: int) -> list[str]:
    """The serving container's health check, in Docker's form (a pod's exec probe takes it without
    the leading ``CMD``): vLLM's /health (python3 is in every vLLM image; curl is not)."""
    return ["CMD", "python3", "-c", one_line_script("vllm-health.py", values={"PORT": str(port)})]
