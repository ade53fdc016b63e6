"""What makes a replica (``REPLICA_KEYS``): the image, the weights, the ``vllm serve`` flags and
environment, and the serving container, with the environment variables the program sets or refuses.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from components.config.values import DockerSize, EnvText, HubRepo, Revision, ServedName
from components.model_base import Model, Positive

VISIBILITY_ENV = (
    "ASCEND_RT_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
)
"""Set by the program from ``glm:container.accelerators`` (``render_env``)."""
# vLLM env vars that open routes besides inference (SPEC §6 "vLLM routes"); the front forwards only
# the inference routes, but anything on the private network or the host could reach the rest.
REFUSED_ENV = {
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "opens /v1/load_lora_adapter and /v1/unload_lora_adapter: "
    "anyone who reaches vLLM can load code-bearing adapters into the server",
    "VLLM_SERVER_DEV_MODE": "opens /sleep, /wake_up, /reset_prefix_cache, /collective_rpc and other "
    "dev routes without a key",
}
WARNED_ENV = {
    "VLLM_TORCH_PROFILER_DIR": "opens /start_profile and /stop_profile (no key) and writes traces "
    "into the container; the front does not forward them",
}
FALSE_ENV = {"", "0", "false", "no", "off"}
"""What switches a boolean vLLM variable off."""


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A POSIX environment variable name (what `docker run -e NAME=value` splits on the first `=`)."""


def env_name_problems(env: Mapping[str, object], key: str) -> list[str]:
    """Names in ``key`` (e.g. ``glm:serving.env``) that are not environment variable names."""
    return [
        f"{key}.{name!r} is not an environment variable name: Docker splits `NAME=value` at the first "
        "`=`, so it would set another variable than the one written (and skip the checks on it). "
        "Fix: letters, digits and `_`, not starting with a digit (e.g. TZ or VLLM_ENGINE_READY_TIMEOUT_S)."
        for name in sorted(env)
        if not ENV_NAME.fullmatch(name)
    ]


def dangerous_env(name: str, value: str) -> str | None:
    """Why ``name`` set to ``value`` must not reach vLLM, or None (not a refused name, or switched off)."""
    if name not in REFUSED_ENV or value.strip().lower() in FALSE_ENV:
        return None
    return (
        f"{name} {REFUSED_ENV[name]}. Fix: remove it; change adapters or debug on a "
        "separate stack that is not reachable from clients."
    )


class ImageBuildConfig(Model):
    context: str = Field(description="Docker build context, relative to the project.")
    dockerfile: str = Field(description="Dockerfile path, relative to the project.")
    base_image: str = Field(description="`BASE_IMAGE` build argument: the image to patch.")
    repository: str = Field(description="Local image name; the tag is a content hash.")
    patches_dir: str | None = Field(
        None, description="Folder with the patch files and their MANIFEST (a800 only)."
    )


class ImageConfig(Model):
    reference: str | None = Field(
        None,
        description="A prebuilt or upstream image to pull; when set, no image is built "
        "(pin a tag or, better, a digest).",
    )
    build: ImageBuildConfig | None = Field(None, description="Build the image from this context.")
    vllm_version: str = Field(description="vLLM version inside the image; flags are checked against it.")
    added_flags: list[str] = Field(
        default_factory=list,
        description="Flags the image adds to `vllm serve` beyond its vLLM version's (a patched image's "
        "own switches, e.g. `--sparse-mla-force-mqa`): the flag check accepts them.",
    )
    keep_locally: bool = Field(True, description="Keep the pulled image on the host at destroy.")

    @model_validator(mode="after")
    def _one_source(self) -> ImageConfig:
        if self.reference is None and self.build is None:
            raise ValueError("glm:image needs `reference` (pull) or `build` (build locally)")
        return self

    @property
    def to_build(self) -> ImageBuildConfig | None:
        """The build to run: none when a reference is given (it wins over a profile's build)."""
        return self.build if self.reference is None else None

    @property
    def vllm_version_tuple(self) -> tuple[int, int]:
        major, minor = self.vllm_version.split(".")[:2]
        return int(major), int(minor)


class DownloadConfig(Model):
    enabled: bool = Field(False, description="Download the weights on the host before serving.")
    source: Literal["modelscope", "huggingface"] = Field(
        "huggingface", description="Which hub CLI downloads the weights on the host."
    )
    repo: HubRepo | None = Field(None, description="Hub repository id of the weights, `owner/name`.")

    @model_validator(mode="after")
    def _repo_when_enabled(self) -> DownloadConfig:
        if self.enabled and not self.repo:
            raise ValueError(
                "glm:model.download.enabled=true without glm:model.download.repo: "
                "set the hub repository id to download from"
            )
        return self


class ModelConfig(Model):
    host_dir: str = Field(description="Host folder holding the weights folder; mounted read-only.")
    mount_path: str = Field(description="Where `hostDir` appears inside the serving container.")
    directory: str = Field(description="Weights folder name inside `hostDir`.")
    served_name: ServedName = Field(
        description="`--served-model-name`: the model id clients send (letters, digits, `._:/-`)."
    )
    revision: Revision = Field(
        "unpinned",
        description="Weights revision (branch, tag or commit; not starting with `-`), part of the "
        "served-model fingerprint.",
    )
    weights_gib: float = Field(description="Total weights size in GiB, for the fit check.", ge=0)
    max_context_length: Positive = Field(description="The model's own context limit in tokens.")
    download: DownloadConfig = Field(default_factory=DownloadConfig)

    @property
    def container_path(self) -> str:
        return f"{self.mount_path}/{self.directory}"

    @property
    def host_path(self) -> str:
        return f"{self.host_dir}/{self.directory}"


SHUTDOWN_TIMEOUT_SINCE = (0, 18)
"""vLLM's ``--shutdown-timeout`` arrived in v0.18."""
SHUTDOWN_MARGIN_SECONDS = 5
"""Docker's stop grace exceeds vLLM's shutdown timeout by this much: vLLM exits before SIGKILL."""


_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def _media_domain(value: str) -> str:
    if not _HOSTNAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a host name: vLLM compares each media URL's host with these names "
            "exactly (no scheme, path or wildcard). Fix: e.g. upload.wikimedia.org"
        )
    return value


class ServingConfig(Model):
    """`vllm serve` flags. Unset (null) flags are not rendered, so vLLM's default applies."""

    host: str | None = Field(None, description="`--host`.")
    port: int = Field(8000, description="`--port`: vLLM's port inside the private network.")
    max_model_len: Positive = Field(description="`--max-model-len`.")
    tensor_parallel_size: Positive = Field(description="`--tensor-parallel-size`.")
    enable_expert_parallel: bool = Field(False, description="`--enable-expert-parallel`.")
    seed: int | None = Field(None, description="`--seed`.")
    safetensors_load_strategy: str | None = Field(None, description="`--safetensors-load-strategy`.")
    kv_cache_dtype: str | None = Field(None, description="`--kv-cache-dtype`.")
    block_size: Positive | None = Field(None, description="`--block-size`.")
    max_num_seqs: Positive = Field(description="`--max-num-seqs`.")
    max_num_batched_tokens: Positive | None = Field(None, description="`--max-num-batched-tokens`.")
    gpu_memory_utilization: float = Field(description="`--gpu-memory-utilization`.", gt=0, le=1)
    quantization: str | None = Field(None, description="`--quantization`.")
    moe_backend: str | None = Field(None, description="`--moe-backend`.")
    enable_flashinfer_autotune: bool | None = Field(None, description="`--[no-]enable-flashinfer-autotune`.")
    num_speculative_tokens: int | None = Field(
        None, description="MTP speculative decoding: `--speculative-config` with this many tokens."
    )
    trust_remote_code: bool = Field(False, description="`--trust-remote-code`.")
    tool_call_parser: str | None = Field(None, description="`--tool-call-parser`.")
    reasoning_parser: str | None = Field(None, description="`--reasoning-parser`.")
    enable_auto_tool_choice: bool = Field(False, description="`--enable-auto-tool-choice`.")
    enable_prefix_caching: bool | None = Field(None, description="`--[no-]enable-prefix-caching`.")
    enable_prompt_tokens_details: bool = Field(
        True,
        description="`--enable-prompt-tokens-details`: answers that hit vLLM's prefix cache carry "
        "`usage.prompt_tokens_details.cached_tokens` (vLLM's default is off), which the meter counts per key.",
    )
    async_scheduling: bool = Field(False, description="`--async-scheduling`.")
    enforce_eager: bool = Field(False, description="`--enforce-eager`.")
    limit_mm_per_prompt: dict[str, int] | None = Field(None, description="`--limit-mm-per-prompt`.")
    compilation_config: dict[str, Any] | None = Field(None, description="`--compilation-config`.")
    additional_config: dict[str, Any] | None = Field(None, description="`--additional-config`.")
    api_server_count: Positive | None = Field(None, description="`--api-server-count`.")
    shutdown_timeout: int | None = Field(
        None,
        ge=0,
        description="`--shutdown-timeout`: on SIGTERM vLLM refuses new requests and lets those in "
        "flight run this long. Unset: `glm:container.stopGraceSeconds` minus 5 (vLLM >= 0.18).",
    )
    allowed_media_domains: list[Annotated[str, AfterValidator(_media_domain)]] | None = Field(
        None,
        description="`--allowed-media-domains`: the only hosts whose image/video URLs vLLM fetches (with "
        "redirects off). Required when `limitMmPerPrompt` allows media; the ascend profile's "
        "`no-remote-media.invalid` (a name that never resolves) lets clients send images inline only.",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="Appended verbatim (the seed's EXTRA_ARGS knob); flags the config renders are refused.",
    )
    env: dict[str, EnvText] = Field(default_factory=dict, description="The profile's environment.")
    extra_env: dict[str, EnvText] = Field(
        default_factory=dict,
        description="Added to (and overriding) `env`. A number is taken as its text (`config set` stores "
        "`1` as a number); a boolean is refused: store the text the variable expects as text "
        "(`config set --path --type string 'glm:serving.extraEnv.NAME' 1`).",
    )

    @property
    def speculative_config(self) -> dict[str, Any] | None:
        if not self.num_speculative_tokens:
            return None
        return {"method": "mtp", "num_speculative_tokens": self.num_speculative_tokens}

    @property
    def merged_env(self) -> dict[str, str]:
        return {**self.env, **self.extra_env}


class MountConfig(Model):
    source: str = Field(description="Host path.")
    target: str = Field(description="Container path.")
    read_only: bool = Field(
        True, description="Mount read-only (the default: the container runs as root with remote code)."
    )


class ContainerConfig(Model):
    name: str = Field(description="Serving container name.")
    accelerators: list[int] = Field(description="Accelerator indices given to the container.")
    gpus: str | None = Field(
        None,
        description="NVIDIA `--gpus`: always `all` on NVIDIA (pulumi-docker 4.11 takes no other value); "
        "vLLM is pinned to `accelerators` with CUDA_VISIBLE_DEVICES (PCI bus order) and "
        "NVIDIA_VISIBLE_DEVICES. Unset or `all`.",
    )
    devices: list[str] = Field(
        default_factory=list, description="Extra device nodes (Ascend control devices)."
    )
    mounts: list[MountConfig] = Field(default_factory=list, description="Extra bind mounts.")
    shm_size: DockerSize | None = Field(
        "64g", description="`--shm-size` (e.g. `64g`); TP > 1 crashes on Docker's 64 MB default."
    )
    ipc_mode: Literal["host", "private", "shareable"] | None = Field(
        None, description="`--ipc`; `host` instead of a large shm."
    )
    privileged: bool = Field(False, description="`--privileged` (not needed for one box).")
    network_mode: Literal["bridge", "host"] = Field(
        "bridge", description="`bridge`: private network behind the front; `host` as in the Ascend seed."
    )
    network_subnet: str | None = Field(
        None,
        description="Subnet of the private network (default: a /24 in 172.30.0.0/16 derived from "
        "`name`); vLLM keeps one address in it across replacements, so the front's upstream holds.",
    )
    stop_grace_seconds: int = Field(
        30,
        description="Docker's stop grace when the container is replaced or removed (SIGTERM, then "
        "SIGKILL): with vLLM's `--shutdown-timeout` at most this, requests in flight finish "
        "(the Docker provider's default, 0, kills them).",
        ge=0,
    )
    restart: Literal["no", "on-failure", "always", "unless-stopped"] = Field(
        "unless-stopped", description="Docker restart policy."
    )
    log_max_size: DockerSize = Field("100m", description="json-file log rotation: size per file.")
    log_max_files: Positive = Field(5, description="json-file log rotation: files kept.")

    @property
    def log_opts(self) -> dict[str, str]:
        """json-file rotation options, the same for every container of the stack."""
        return {"max-size": self.log_max_size, "max-file": str(self.log_max_files)}

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        if self.network_subnet is not None:
            return ipaddress.IPv4Network(self.network_subnet)
        third = int(hashlib.sha256(self.name.encode()).hexdigest(), 16) % 250 + 1
        return ipaddress.IPv4Network(f"172.30.{third}.0/24")

    @property
    def vllm_address(self) -> str:
        """vLLM's fixed address: Nginx resolves its upstream once, at start."""
        return str(self.subnet.network_address + 10)

    @property
    def shm_size_mb(self) -> int | None:
        if self.shm_size is None:
            return None
        units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
        return int(float(self.shm_size[:-1]) * units[self.shm_size[-1].lower()])


REPLICA_KEYS = ("hardware", "image", "model", "serving", "container")
"""The ``glm:`` keys that make a replica what it is: what a rollback puts back (``make rollback``)."""
