"""ModelVolume: the weights on the host (read-only bind mount) and a persistent compile/JIT cache.

Neither may be lost: the weights are a host folder this program never deletes (the optional
download step has no delete action), and the cache is a Docker volume with ``retain_on_delete``, so
it survives container replacement and ``pulumi destroy`` and restarts skip minutes of recompiling
(a800 seed: Triton/TileLang JIT cache in ``vllm_cache/``).
"""

from __future__ import annotations

import shlex

import pulumi
import pulumi_docker as docker

from components.config import CACHE_MOUNT_PATH, HostConfig, ModelConfig
from components.docker.target import host_command
from components.hardware import ServedArchitecture
from components.render.preflight import weights_check_values
from components.template import host_script


def verify_script(model: ModelConfig, served: ServedArchitecture | None = None) -> str:
    """Shell that fails unless the weights folder is complete (``templates/weights-verify.sh``)."""
    return host_script("weights-verify.sh", values=weights_check_values(model, served))


def download_script(model: ModelConfig) -> str:
    """Shell that downloads the weights with the hub's CLI (``templates/weights-download.sh``, then
    ``weights-fetch-<source>.sh``), then verifies them.

    ``shlex.quote`` stops the shell, not the CLI's option parser: every option's value is glued to
    it (``--revision=…``) and the repository, Hugging Face's positional argument, follows ``--``, so
    no configured value can be read as an option (the config refuses such values too).
    """
    dest = model.host_path
    rev = [] if model.revision == "unpinned" else [f"--revision={model.revision}"]
    if model.download.source == "modelscope":
        options = [f"--model={model.download.repo}", *rev, f"--local_dir={dest}"]
    else:
        options = [*rev, f"--local-dir={dest}", "--", model.download.repo or ""]
    fetch = host_script(
        "weights-download.sh",
        f"weights-fetch-{model.download.source}.sh",
        values={"DEST": shlex.quote(dest), "OPTIONS": shlex.join(options)},
    )
    return fetch + verify_script(model)


def cache_volume_name(container_name: str) -> str:
    """The JIT cache volume's Docker name, from the serving container's (``glm:container.name``).

    >>> cache_volume_name("glm53-flash")
    'glm53-flash-jit-cache'
    """
    return f"{container_name}-jit-cache"


def weights_and_cache(model: ModelConfig, container_name: str) -> list[tuple[str, str, bool]]:
    """(source, target, read only) of the serving container's two mounts: the weights folder
    (read-only bind) and the JIT cache volume. ``ops debug`` renders the same as ``-v``."""
    return [
        (model.host_dir, model.mount_path, True),
        (cache_volume_name(container_name), CACHE_MOUNT_PATH, False),
    ]


class ModelVolume(pulumi.ComponentResource):
    """Mounts for the serving container: weights read-only and the persistent JIT cache."""

    mounts: list[docker.ContainerMountArgs]
    """Bind of the weights folder (read-only) and the cache volume."""
    cache_volume_name: pulumi.Output[str]
    """Docker volume holding Triton/TileLang/vLLM caches; retained on destroy."""

    def __init__(
        self,
        name: str,
        model: ModelConfig,
        container_name: str,
        host: HostConfig,
        ssh_private_key: pulumi.Output[str] | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``container_name``: the serving container's (``glm:container.name``), which names the
        cache volume; ``host``: which of ``glm:target.hosts`` holds the weights (and downloads them)."""
        super().__init__("glm:model:ModelVolume", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.cache = docker.Volume(
            f"{name}-jit-cache",
            name=cache_volume_name(container_name),
            labels=[docker.VolumeLabelArgs(label="glm53.role", value="jit-cache")],
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )
        self.download = None
        if model.download.enabled:
            self.download = host_command(
                f"{name}-download",
                host,
                download_script(model),
                ssh_private_key,
                child,
            )
        self.cache_volume_name = self.cache.name
        (weights, target, _), (_, cache_target, _) = weights_and_cache(model, container_name)
        self.mounts = [
            docker.ContainerMountArgs(type="bind", source=weights, target=target, read_only=True),
            docker.ContainerMountArgs(type="volume", source=self.cache.name, target=cache_target),
        ]
        self.register_outputs({"cache_volume_name": self.cache_volume_name})
