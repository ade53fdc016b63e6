"""The stack configuration as typed models: the one source of truth.

``load_stack_config`` takes the ``glm:*`` keys of a stack, deep-merges them over the selected
hardware profile's defaults (``components.profiles``) and validates the result. Every rule that can
be checked before anything is created is checked here, with a message that names the config key,
the value, the limit and the fix; a bad stack fails ``pulumi preview`` and nothing is deployed.

Pulumi.yaml's ``config:`` block and README's config table are checked against these models by
``tests/test_config_docs.py``.
"""

from __future__ import annotations

import base64
import copy
import getpass
import hashlib
import ipaddress
import itertools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from components.front_tls import (
    certificate_problems,
    check_ca_certificate,
    check_tls_name,
    default_name,
)
from components.gate.settings import SmokeConfig
from components.key_strength import MIN_GUESSES_LOG10, guesses_log10
from components.model_base import Model, Positive
from components.profiles import PROFILES, HardwareFacts, spoken_list
from components.vllm_flags import ENV_NAME, env_name_problems, extra_args_problems
from policy.glm_policies import binds_all_interfaces, is_loopback, is_relaxed_stack, unpinned_reason

# vLLM's own default for VLLM_ENGINE_READY_TIMEOUT_S (vLLM >= 0.14; SPEC §3).
VLLM_DEFAULT_ENGINE_READY_TIMEOUT_S = 600
# Docker's /dev/shm when neither --shm-size nor --ipc=host is given.
DOCKER_DEFAULT_SHM_MB = 64
# Where the persistent compile/JIT cache volume is mounted in the serving container.
CACHE_MOUNT_PATH = "/var/cache/glm53"
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
_FALSE_ENV = {"", "0", "false", "no", "off"}


class ConfigError(ValueError):
    """A stack configuration that must not be deployed; the message says what to change."""


# ---- value types: a bad value names its key (``_explain`` adds it), the value and the fix -------

_SIZE = re.compile(r"[0-9]+(?:\.[0-9]+)?[kKmMgGtT]")
_NGINX_SIZE = re.compile(r"[0-9]+[kKmMgG]?")
# Prometheus' model.ParseDuration, the parser promtool runs: units largest first, each at most once.
_PROMETHEUS_DURATION = re.compile(
    r"(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?"
)


def _known_profile(name: str) -> str:
    if name not in PROFILES:
        raise ValueError(f"{name!r} is not a known profile. Fix: one of {spoken_list(sorted(PROFILES))}")
    return name


def hardware_description() -> str:
    """``glm:hardware``'s description, naming every registered profile (README, Pulumi.yaml)."""
    return f"Hardware profile: {spoken_list(list(PROFILES))}; selects the seed's production defaults."


Hardware = Annotated[str, AfterValidator(_known_profile)]
"""A name in ``components.profiles.PROFILES``, checked when validated (so a profile registered
later is known too)."""


def _docker_size(value: str) -> str:
    if not _SIZE.fullmatch(value):
        raise ValueError(f"{value!r} is not a size. Fix: a number with a unit k, m, g or t, e.g. 64g")
    return value


def _nginx_size(value: str) -> str:
    if not _NGINX_SIZE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an nginx size. Fix: a number with an optional k, m or g suffix, e.g. 20m"
        )
    return value


def _prometheus_duration(value: str) -> str:
    if value == "0" or not value or not _PROMETHEUS_DURATION.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a Prometheus duration (promtool refuses it). Fix: a number with a "
            "unit, units largest first, e.g. 15s, 2m or 1m30s"
        )
    return value


def _nonzero_duration(value: str) -> str:
    if not re.search(r"[1-9]", _prometheus_duration(value)):
        raise ValueError(f"{value!r} is zero. Fix: a positive duration, e.g. 15s")
    return value


_SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")


def _served_name(value: str) -> str:
    if not _SERVED_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a model id clients can send as is. Fix: 1-128 letters, digits and "
            "`._:/-`, starting with a letter or digit (e.g. glm-5.3-flash or zai-org/GLM-5.3-Flash)"
        )
    return value


def _at_least_one_second(value: int) -> int:
    if value < 1:
        raise ValueError(f"{value} s: every request would time out. Fix: at least 1 s; the seed uses 600")
    return value


DockerSize = Annotated[str, AfterValidator(_docker_size)]
NginxSize = Annotated[str, AfterValidator(_nginx_size)]
PrometheusDuration = Annotated[str, AfterValidator(_prometheus_duration)]
Timeout = Annotated[int, AfterValidator(_at_least_one_second)]
Fraction = Annotated[float, Field(ge=0, le=1)]


class HostConfig(Model):
    name: str = Field(description="Short name of the host, used in resource names and outputs.")
    docker_host: str = Field(
        description="Docker endpoint of the host: `ssh://[user@]host[:port]` for a GPU box (IPv6 as "
        "`ssh://[2001:db8::1]:2222`; no user means your local user, as with the Docker CLI), "
        "`unix:///var/run/docker.sock` for the local engine. The SSH commands use the same user and port."
    )
    host_key: str | None = Field(
        None,
        description="The host's SSH public key, `ssh-ed25519 AAAA…` (from `ssh-keyscan -p PORT HOST`); "
        "required for `ssh://`: Docker and the commands refuse any other key.",
    )
    identity_file: str | None = Field(
        None,
        description="Private key file (on the machine running Pulumi) used by Docker's ssh and the "
        "commands alike; default: the SSH agent.",
    )
    private_address: str | None = Field(
        None,
        description="With several hosts: the address on the hosts' private network where this host "
        "publishes vLLM for the front (never all interfaces); default: the address of `dockerHost`.",
    )
    hardware: Hardware | None = Field(
        None,
        description="What the box is, when the inventory says so; must equal `glm:hardware` (the "
        "replicas behind one front are identical). Unset: `glm:hardware`.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_ssh_port(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("dockerHost"), str):
            # URL schemes are case-insensitive (RFC 3986 §3.1): `SSH://` is `ssh://`, and every
            # check below (host key, user, port) must see it as such.
            scheme, sep, rest = data["dockerHost"].partition("://")
            if sep:
                data = {**data, "dockerHost": f"{scheme.lower()}://{rest}"}
        if isinstance(data, dict) and "sshPort" in data:
            raise ValueError(
                f"glm:target.hosts[].sshPort={data['sshPort']} is no longer read: Docker took the port "
                f"from dockerHost and the commands from sshPort. Fix: put the port in dockerHost "
                f"(ssh://user@host:{data['sshPort']}) and remove sshPort."
            )
        return data

    @model_validator(mode="after")
    def _ssh_endpoint(self) -> HostConfig:
        key = f"glm:target.hosts[{self.name}]"
        if self.is_local:
            return self
        if not self.docker_host.startswith("ssh://"):
            # tcp:// is the Docker API in clear without authentication; a bare name or any other
            # scheme would reach the host without the pinned host key.
            raise ValueError(
                f"{key}.dockerHost={self.docker_host!r} is neither ssh:// nor unix://: only those two "
                "are accepted (tcp:// talks to the Docker API in clear with no authentication, and "
                "anything else connects without the pinned host key). Fix: "
                "ssh://[user@]host[:port] with hostKey, or unix:///var/run/docker.sock for this machine."
            )
        try:
            url = urlsplit(self.docker_host)
            url.port  # noqa: B018 (parses the port; raises on garbage)
        except ValueError as err:
            raise ValueError(
                f"{key}.dockerHost={self.docker_host!r} is not ssh://[user@]host[:port] ({err}). "
                "Fix: write an IPv6 address in brackets, e.g. ssh://deploy@[2001:db8::1]:2222."
            ) from None
        if not url.hostname or url.path not in ("", "/"):
            raise ValueError(
                f"{key}.dockerHost={self.docker_host!r} has no host or has a path. "
                "Fix: ssh://[user@]host[:port], e.g. ssh://deploy@gpu01:2222."
            )
        keyscan = f"ssh-keyscan -t ed25519 -p {self.ssh_port} {self.ssh_address}"
        if self.host_key is None:
            raise ValueError(
                f"{key}.hostKey is not set for {self.docker_host}: without it, whatever answers at "
                f"that address gets the deployment and your SSH login. Fix: run `{keyscan}`, check "
                f"the key with the host's owner, and set hostKey to its `ssh-ed25519 AAAA…` part."
            )
        if _public_key_line(self.host_key) is None:
            raise ValueError(
                f"{key}.hostKey={self.host_key[:40]!r} is not an SSH public key. Fix: set it to the "
                f"`ssh-ed25519 AAAA…` part of `{keyscan}`."
            )
        return self

    @property
    def is_local(self) -> bool:
        return self.docker_host.startswith("unix://")

    @property
    def ssh_user(self) -> str:
        """The URL's user or, as the Docker CLI does, the local user (never a silent root)."""
        return urlsplit(self.docker_host).username or getpass.getuser()

    @property
    def ssh_address(self) -> str:
        """Host name or address, IPv6 without brackets (``2001:db8::1``)."""
        return urlsplit(self.docker_host).hostname or ""

    @property
    def ssh_port(self) -> int:
        return urlsplit(self.docker_host).port or 22

    @property
    def replica_address(self) -> str:
        """Where the front reaches this host's vLLM when it runs on another host."""
        return self.private_address or self.ssh_address

    @property
    def host_key_line(self) -> str | None:
        """``hostKey`` as ``type base64`` (what pulumi-command's ``hostKey`` parses)."""
        return _public_key_line(self.host_key) if self.host_key else None


_SSH_KEY_TYPES = (
    "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
)  # fmt: skip


def _public_key_line(text: str) -> str | None:
    """``type base64`` from a public key or ``ssh-keyscan`` line, or None when there is no valid key."""
    words = text.split()
    for kind, blob in itertools.pairwise(words):
        if kind in _SSH_KEY_TYPES:
            try:
                raw = base64.b64decode(blob, validate=True)
            except ValueError:
                return None
            length = int.from_bytes(raw[:4], "big")
            return f"{kind} {blob}" if raw[4 : 4 + length] == kind.encode() else None
    return None


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class KubernetesTargetConfig(Model):
    """The Kubernetes form of ``glm:target`` (components/k8s_deployment.py; docs/scaling.md)."""

    namespace: str = Field(description="Namespace the stack's objects live in (created by the stack).")
    front_url: str = Field(
        description="The front's OpenAI base URL as the machine running Pulumi reaches its Service "
        "(a load balancer, an ingress, or a NodePort: `http://node:30080/v1`): the smoke gate goes there."
    )
    kubeconfig: str | None = Field(
        None, description="Kubeconfig file; default: `$KUBECONFIG`, else `~/.kube/config`."
    )
    context: str | None = Field(None, description="Kubeconfig context; default: the file's current one.")
    replicas: Positive = Field(1, description="Serving pods; each takes the listed cards on its node.")
    front_node_port: int | None = Field(
        None, ge=30000, le=32767, description="The front Service's NodePort; unset: a ClusterIP Service."
    )
    weights_claim: str | None = Field(
        None,
        description="PersistentVolumeClaim holding `model.directory`, mounted read-only at "
        "`model.mountPath`; unset: the node's `model.hostDir` (hostPath, read-only).",
    )
    cache_claim: str = Field(
        "glm53-jit-cache", description="PersistentVolumeClaim of the JIT/compile cache (kept on destroy)."
    )
    cache_size: str = Field("50Gi", description="Size the cache claim requests.")
    cache_host_path: str | None = Field(
        None,
        description="One-node clusters without a provisioner: a hostPath PersistentVolume (Retain) bound "
        "to the cache claim; unset: the cluster's default StorageClass provides it.",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="The pods' imagePullPolicy (`Never` for images loaded into the nodes)."
    )
    image_load_command: str | None = Field(
        None,
        description="Run on the machine running Pulumi for each image the stack builds, `{image}` "
        "replaced (`scripts/k8s/cluster.sh import {image}`, `docker push {image}`); unset: none.",
    )
    pre_stop_seconds: int = Field(
        10,
        ge=3,
        description="preStop pause before SIGTERM: the Service stops routing to the pod first, and "
        "the front's connections to it (2 s at most each) end; at least 3.",
    )
    prometheus_node_port: int | None = Field(
        None, ge=30000, le=32767, description="Prometheus' Service NodePort; unset: a ClusterIP Service."
    )
    prometheus_operator: bool = Field(
        False,
        description="The cluster runs the Prometheus Operator: the same alert rules as a PrometheusRule "
        "and the pods' scrape as a PodMonitor, instead of the stack's own Prometheus.",
    )
    readiness_period_seconds: Positive = Field(
        15,
        description="How often each pod's readiness check runs the gate's checks (13x17, a tool "
        "call, the KV pool) against it; each run is one short chat per step.",
    )

    @model_validator(mode="after")
    def _names(self) -> KubernetesTargetConfig:
        problems = [
            f"glm:target.kubernetes.{key}={value!r} is not a DNS label (lower-case letters, digits, "
            "`-`, at most 63). Fix: e.g. glm53-prod."
            for key, value in (("namespace", self.namespace), ("cacheClaim", self.cache_claim))
            if not _DNS_LABEL.fullmatch(value)
        ]
        if not self.front_url.startswith(("http://", "https://")) or not self.front_url.endswith("/v1"):
            problems.append(
                f"glm:target.kubernetes.frontUrl={self.front_url!r} is not an http(s) URL ending in /v1. "
                "Fix: e.g. http://10.0.0.5:30080/v1."
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self


class TargetConfig(Model):
    hosts: list[HostConfig] = Field(
        description="Hosts that each run one vLLM replica; with several, one Nginx front on "
        "`frontHost` balances across them (docs/scaling.md)."
    )
    front_host: str | None = Field(
        None, description="Name of the host that runs the front and Prometheus; default: the first host."
    )
    kubernetes: KubernetesTargetConfig | None = Field(
        None,
        description="Run on Kubernetes instead of Docker hosts: the same profile as a Deployment "
        "behind the front's Service (`hosts` then only builds the images).",
    )

    @model_validator(mode="after")
    def _hosts(self) -> TargetConfig:
        """Every problem of the host list at once: names, addresses, the front host."""
        problems = []
        if not self.hosts:
            problems.append("glm:target.hosts is empty. Fix: list at least one host (name, dockerHost).")
        names = [h.name for h in self.hosts]
        for name in sorted({n for n in names if names.count(n) > 1}):
            problems.append(
                f"glm:target.hosts lists the name {name!r} {names.count(name)} times: resources are named "
                "after it. Fix: give each host its own name."
            )
        seen: dict[str, str] = {}
        for host in self.hosts:
            for where in sorted({host.docker_host.rstrip("/").lower(), host.replica_address.lower()}):
                if where in seen and seen[where] != host.name:
                    problems.append(
                        f"glm:target.hosts[{host.name}] and glm:target.hosts[{seen[where]}] are both at "
                        f"{where}: two replicas on one box would clash on its port and GPUs. Fix: "
                        "list each box once (dockerHost, privateAddress)."
                    )
                seen.setdefault(where, host.name)
        if self.front_host is not None and self.front_host not in names:
            problems.append(
                f"glm:target.frontHost={self.front_host!r} is not in glm:target.hosts "
                f"({', '.join(names)}). Fix: set it to one of those names, or remove it (the first host)."
            )
        if len(self.hosts) > 1 and self.kubernetes is not None:
            problems.append(
                f"glm:target.hosts lists {len(self.hosts)} hosts with glm:target.kubernetes: on "
                "Kubernetes the replicas are `kubernetes.replicas` and `hosts` only names the Docker "
                "engine that builds the images. Fix: keep one host (the builder)."
            )
        elif len(self.hosts) > 1:
            problems += [p for h in self.replica_hosts if (p := _replica_address_problem(h))]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def host(self) -> HostConfig:
        """The front's host (with one host: the host)."""
        return next((h for h in self.hosts if h.name == self.front_host), self.hosts[0])

    @property
    def replica_hosts(self) -> list[HostConfig]:
        """The other hosts, in list order: their vLLM is published on ``replica_address``."""
        return [h for h in self.hosts if h is not self.host]


def _replica_address_problem(host: HostConfig) -> str | None:
    address = host.replica_address
    key = f"glm:target.hosts[{host.name}]"
    if host.is_local and host.private_address is None:
        return (
            f"{key}.dockerHost={host.docker_host} is this machine's engine: the front on another host "
            f"cannot reach it. Fix: an ssh:// dockerHost, or set {key}.privateAddress."
        )
    if binds_all_interfaces(address) or is_loopback(address):
        return (
            f"{key}.privateAddress={address!r}: vLLM would be published on every interface or on "
            "loopback, where the world, or not even the front, reaches it. Fix: the host's address "
            "on the private network the front host shares (e.g. 10.0.0.12)."
        )
    return None


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
    repo: str | None = Field(None, description="Hub repository id of the weights.")

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
    served_name: Annotated[str, AfterValidator(_served_name)] = Field(
        description="`--served-model-name`: the model id clients send (letters, digits, `._:/-`)."
    )
    revision: str = Field("unpinned", description="Weights revision, part of the served-model fingerprint.")
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
    env: dict[str, str] = Field(default_factory=dict, description="The profile's environment.")
    extra_env: dict[str, str] = Field(default_factory=dict, description="Added to (and overriding) `env`.")

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


class RateLimitConfig(Model):
    """The front's limits (docs/front-and-alerts.md "Limits"): per API key for key holders, per
    client address for everything else (no or a wrong key, metrics keys, ``/healthz``)."""

    enabled: bool = Field(True, description="Request and connection limits at the front (429 beyond them).")
    requests_per_second: Positive = Field(10, description="Sustained requests per second per API key.")
    burst: Positive = Field(20, description="Requests per API key allowed above the rate before 429.")
    connections_per_key: Positive = Field(
        64, description="Requests in flight per API key (streams included): twice a800's maxNumSeqs."
    )
    unauthenticated_requests_per_second: Positive = Field(
        5,
        description="Requests per second per client address without an API key (401s, /healthz, "
        "/metrics, /version): key guessing and polling.",
    )
    unauthenticated_burst: Positive = Field(
        20, description="Requests per address without an API key allowed above the rate before 429."
    )
    connections_per_address: Positive = Field(
        16, description="Requests in flight per client address without an API key."
    )


class FrontConfig(Model):
    image: str = Field("nginx:1.27", description="Nginx image.")
    port: int = Field(8080, description="The stack's one published port (the API).")
    bind_address: str = Field("0.0.0.0", description="Host address the API port binds to.")
    max_body_size: NginxSize = Field("20m", description="`client_max_body_size`.")
    read_timeout_seconds: Timeout = Field(600, description="`proxy_read_timeout`.")
    send_timeout_seconds: Timeout = Field(600, description="`proxy_send_timeout`.")
    keepalive: Positive = Field(32, description="Upstream keepalive connections.")
    rate_limit: RateLimitConfig = Field(default_factory=RateLimitConfig)
    tls: bool = Field(False, description="Serve TLS with `glm:tlsCertificate`/`glm:tlsKey`.")
    tls_name: str | None = Field(
        None,
        description="The name the smoke gate and the semantic probe verify in the front's certificate: "
        "they reach the front by its own address (`localhost`, the host's, its container name) and send "
        "this name instead (SNI). Default: the certificate's first name (DNS, else IP).",
    )
    tls_ca_certificate: str | None = Field(
        None,
        description="PEM certificate of the CA that signed `glm:tlsCertificate` (or a self-signed "
        "certificate itself): the gate and the probe trust it, and nothing else, for the front. "
        "Default: the system's CAs.",
    )
    allow_plain_http: bool = Field(
        False,
        description="Accept plain HTTP on a non-loopback `bindAddress` (keys and prompts cross the "
        "network in clear); without it such a stack is refused. Prefer `tls`.",
    )

    @field_validator("tls_name")
    @classmethod
    def _tls_name(cls, value: str | None) -> str | None:
        return None if value is None else check_tls_name(value)

    @field_validator("tls_ca_certificate")
    @classmethod
    def _tls_ca_certificate(cls, value: str | None) -> str | None:
        return None if value is None else check_ca_certificate(value)


class AlertThresholds(Model):
    kv_cache_usage: Fraction = Field(0.9, description="KV cache usage fraction that alerts.")
    ttft_p99_seconds: float = Field(10.0, description="TTFT p99 bound in seconds.", gt=0)
    spec_acceptance_min: Fraction = Field(0.3, description="Minimum MTP draft acceptance rate.")
    capacity_wait_for: PrometheusDuration = Field(
        "2m", description="How long capacity-waiting with nothing running may last."
    )


class MonitoringConfig(Model):
    image: str = Field("prom/prometheus:v2.53.0", description="Prometheus image.")
    port: int = Field(9090, description="Host port of the Prometheus UI.")
    bind_address: str = Field("127.0.0.1", description="Host address Prometheus binds to (loopback).")
    allow_public_bind: bool = Field(
        False,
        description="Accept a non-loopback `bindAddress`: Prometheus has no authentication, so anyone "
        "who reaches it reads every metric and can query the API. Without it such a stack is refused.",
    )
    scrape_interval: Annotated[str, AfterValidator(_nonzero_duration)] = Field(
        "15s", description="Scrape interval of vLLM /metrics."
    )
    thresholds: AlertThresholds = Field(default_factory=AlertThresholds)
    target_down_for: PrometheusDuration | None = Field(
        None,
        description="How long vLLM's scrape may fail before VllmTargetDown fires (default: the "
        "profile's measured start time plus 20 %, at least 5m).",
    )


class PreflightConfig(Model):
    enabled: bool = Field(True, description="Check the host before creating the container.")
    min_free_disk_gib: float | None = Field(
        None, description="Free disk needed under `model.hostDir` (default: the weights size)."
    )
    min_shm_gib: float = Field(1, description="Minimum /dev/shm on the host in GiB.")


# ---- the semantic probe (issue 18): the gate's checks on a schedule, after the deploy ----------

SEMANTIC_PROBE_CHAT_STEPS = 2
"""Steps of one probe run that wait on the model (arithmetic, tool_call): what a stalled engine
holds for ``timeoutSeconds`` each."""


def _probe_interval(value: int) -> int:
    if value <= 0:
        raise ValueError(
            f"{value} s: the probe would never run or never pause. Fix: a positive number of seconds; "
            "the default 60 costs one request slot for a few seconds a minute"
        )
    return value


def _probe_failures(value: int) -> int:
    if value < 1:
        raise ValueError(
            f"{value}: an alert needs at least one failed run. Fix: 1 or more; the default 3 alerts "
            "after three failed runs in a row (3 minutes at the default interval)"
        )
    return value


class SemanticProbeConfig(Model):
    """The semantic probe: a container of the stack that runs the gate's readiness, arithmetic,
    tool-call and KV-pool checks through the front on a schedule (docs/semantic-probe.md)."""

    enabled: bool = Field(True, description="Run the semantic probe container with the stack.")
    interval_seconds: Annotated[int, AfterValidator(_probe_interval)] = Field(
        60,
        description="Seconds between the starts of two probe runs. Every probe request takes one of "
        "the users' `maxNumSeqs` slots while it runs: shorter alerts sooner and costs more.",
    )
    failures_before_alert: Annotated[int, AfterValidator(_probe_failures)] = Field(
        3,
        description="K: consecutive failed runs of a step before its alert fires; with `ejectReplicas`, "
        "a replica asked directly also leaves the front's rotation after K failed runs and comes back "
        "after K passed ones.",
    )
    eject_replicas: bool = Field(
        True,
        description="Take a replica that fails a probe step K runs in a row out of the front's "
        "rotation, and put it back after K passes (docs/semantic-probe.md). With every replica out, the "
        "front answers a JSON 503 naming the failing check. False: alerts only.",
    )
    max_tokens: Positive = Field(
        256, description="`max_tokens` of the probe's chats: room for low-effort reasoning and the answer."
    )
    timeout_seconds: Positive = Field(15, description="Limit of one probe request, body included.")
    client_name: str = Field(
        "semantic-probe",
        description="The probe's client name in the front's key map and access log; its key is "
        "generated by the stack. No `glm:apiKeys` entry may use it.",
    )
    base_image: str = Field(
        "python:3.11-slim",
        description="Base of the probe image; needs Python 3.11 (the program's own packages are copied in).",
    )
    port: int = Field(9101, description="Port of the probe's /metrics on the private network.")

    @model_validator(mode="after")
    def _fits(self) -> SemanticProbeConfig:
        problems = []
        if not _CLIENT_NAME.fullmatch(self.client_name):
            problems.append(
                f"glm:semanticProbe.clientName={self.client_name!r} is not a client name. Fix: 1-64 "
                "letters, digits, `_`, `.` and `-`, starting with a letter or digit (e.g. semantic-probe)."
            )
        worst_run = SEMANTIC_PROBE_CHAT_STEPS * self.timeout_seconds
        if self.interval_seconds < worst_run:
            problems.append(
                f"glm:semanticProbe.intervalSeconds={self.interval_seconds} is shorter than "
                f"{SEMANTIC_PROBE_CHAT_STEPS} x timeoutSeconds={self.timeout_seconds} = {worst_run} s, what "
                "one run takes when the engine stalls: runs would start late and the alert with them. "
                f"Fix: intervalSeconds >= {worst_run}, or a smaller timeoutSeconds."
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def silent_after_seconds(self) -> int:
        """How long without a finished run means the probe itself is silent: two intervals plus
        a run that stalled on every chat step."""
        return 2 * self.interval_seconds + SEMANTIC_PROBE_CHAT_STEPS * self.timeout_seconds

    @property
    def unprobed_after_seconds(self) -> int:
        """How long a replica skipped as saturated may go unprobed before it alerts: ten intervals
        (10 min with the defaults), and never sooner than the probe counts as silent."""
        return max(10 * self.interval_seconds, self.silent_after_seconds)


def semantic_probe_runs(c: StackConfig) -> bool:
    """Whether the stack deploys the probe (behind a TLS front too: components/front_tls.py)."""
    return c.semantic_probe.enabled


def _probe_key_collision(api_keys: Any, probe: SemanticProbeConfig) -> str | None:
    if not probe.enabled or not isinstance(api_keys, Mapping) or probe.client_name not in api_keys:
        return None
    return (
        f"glm:apiKeys.{probe.client_name} is the semantic probe's client name "
        f"(glm:semanticProbe.clientName): the front could not tell its traffic from the probe's, and the "
        f"stack-generated probe key would replace yours. Fix: rename the key (pulumi config rm --path "
        f"'glm:apiKeys.{probe.client_name}' and set it under another name), or set "
        "glm:semanticProbe.clientName to another name."
    )


# Host paths that exist only on a box with the accelerator's driver: a rehearsal leaves these mounts
# out (with the devices and --gpus), because the stand-in or new box has no such driver yet.
DRIVER_PATHS = ("/usr/local/Ascend", "/usr/local/sbin/npu-smi", "/etc/hccn.conf", "/usr/local/nvidia")
REHEARSAL_IMAGE = ImageBuildConfig(
    context="images/vllm-sim",
    dockerfile="images/vllm-sim/Dockerfile",
    base_image="python:3.11-slim",
    repository="glm53-vllm-sim",
)
"""The vLLM-protocol simulator a rehearsal builds on the target host (the local stack's image)."""


def is_driver_path(path: str) -> bool:
    """``/usr/local/Ascend/driver`` yes, ``/home/glm/glm53_site`` no."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in DRIVER_PATHS)


class RehearsalConfig(Model):
    enabled: bool = Field(
        False,
        description="Deploy the hardware profile as in production, with the vLLM-protocol simulator "
        "(images/vllm-sim, built on the host) as the engine and no accelerator devices, `--gpus` or "
        "driver mounts; `glm:rehearsal: true` is short for `{enabled: true}`. Never promotable to a "
        "real stack.",
    )
    base_image: str = Field(
        REHEARSAL_IMAGE.base_image,
        description="Base image of the simulator build (any image with python3; offline: a local one "
        "loaded onto the host, e.g. glm53-local/python:bookworm).",
    )

    @model_validator(mode="before")
    @classmethod
    def _switch(cls, data: Any) -> Any:
        """``glm:rehearsal: true`` (the one switch) or the full object."""
        if isinstance(data, bool):
            return {"enabled": data}
        if isinstance(data, str) and data.lower() in ("true", "false"):
            return {"enabled": data.lower() == "true"}
        return data


REPLICA_KEYS = ("hardware", "image", "model", "serving", "container")
"""The ``glm:`` keys that make a replica what it is: what a rollback puts back (``make rollback``)."""


class StackConfig(Model):
    _replica_values: dict[str, Any] = PrivateAttr(default_factory=dict)
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

    @model_validator(mode="after")
    def _validate(self) -> StackConfig:
        problems = [p for check in _CHECKS if (p := check(self))]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def advisories(self) -> list[str]:
        """Warnings: the stack deploys, but an operator should know."""
        return [w for check in _ADVISORIES if (w := check(self))]


# ---- rules checked before anything is created ----------------------------------------------


def _check_weights_fit(c: StackConfig) -> str | None:
    if c.facts.hbm_gib == 0:
        return None
    per_card = c.model.weights_gib / c.serving.tensor_parallel_size
    budget = c.facts.hbm_gib * c.serving.gpu_memory_utilization
    if per_card <= budget:
        return None
    return (
        f"glm:serving.tensorParallelSize={c.serving.tensor_parallel_size}: weights "
        f"{c.model.weights_gib:g} GiB / {c.serving.tensor_parallel_size} cards = {per_card:.1f} GiB per "
        f"card exceeds the budget {c.facts.hbm_gib:g} GiB HBM x gpuMemoryUtilization "
        f"{c.serving.gpu_memory_utilization:g} = {budget:.1f} GiB per card, leaving nothing for the KV "
        f"cache. Fix: use more cards (tensorParallelSize and container.accelerators; "
        f"{c.hardware} needs at least "
        f"{_min_cards(c.model.weights_gib, budget)}) or a smaller/quantized model."
    )


def _min_cards(weights_gib: float, budget_gib: float) -> int:
    cards = 1
    while weights_gib / cards > budget_gib:
        cards *= 2
    return cards


def _check_tp_matches_accelerators(c: StackConfig) -> str | None:
    cards = len(c.container.accelerators)
    if c.facts.accelerator == "none" or c.serving.tensor_parallel_size == cards:
        return None
    return (
        f"glm:serving.tensorParallelSize={c.serving.tensor_parallel_size} but "
        f"glm:container.accelerators lists {cards} accelerators {c.container.accelerators}: vLLM needs "
        f"exactly one accelerator per tensor-parallel rank. Fix: make them agree."
    )


def _check_cudagraph_sizes(c: StackConfig) -> str | None:
    sizes = (c.serving.compilation_config or {}).get("cudagraph_capture_sizes") or []
    too_big = [s for s in sizes if s > c.serving.max_num_seqs]
    if not too_big:
        return None
    return (
        f"glm:serving.compilationConfig.cudagraph_capture_sizes has {too_big} above "
        f"maxNumSeqs={c.serving.max_num_seqs}: graphs larger than the batch are never used and waste "
        f"memory the KV pool needs. Fix: keep every capture size <= maxNumSeqs."
    )


def _check_tool_parser(c: StackConfig) -> str | None:
    if not c.serving.enable_auto_tool_choice or c.serving.tool_call_parser:
        return None
    return (
        "glm:serving.enableAutoToolChoice=true without glm:serving.toolCallParser: vLLM refuses to "
        "start. Fix: set toolCallParser (glm47 for GLM-5.3) or turn enableAutoToolChoice off."
    )


def _check_max_model_len(c: StackConfig) -> str | None:
    if c.serving.max_model_len <= c.model.max_context_length:
        return None
    return (
        f"glm:serving.maxModelLen={c.serving.max_model_len} exceeds the model's limit "
        f"glm:model.maxContextLength={c.model.max_context_length}. Fix: lower maxModelLen to at most "
        f"{c.model.max_context_length}."
    )


def _engine_ready_timeout(c: StackConfig) -> float:
    value = c.serving.merged_env.get("VLLM_ENGINE_READY_TIMEOUT_S")
    return float(value) if value is not None else VLLM_DEFAULT_ENGINE_READY_TIMEOUT_S


def _check_engine_ready_timeout(c: StackConfig) -> str | None:
    load = c.facts.known_weights_load_seconds
    timeout = _engine_ready_timeout(c)
    if load is None or timeout > load:
        return None
    return (
        f"glm:serving.env.VLLM_ENGINE_READY_TIMEOUT_S={timeout:g} s (vLLM's default is "
        f"{VLLM_DEFAULT_ENGINE_READY_TIMEOUT_S}) is shorter than the {load:g} s the {c.hardware} weights "
        f"take to load: vLLM declares the engine dead mid-load. Fix: set it to 3600 as the seed does."
    )


def _check_smoke_deadline(c: StackConfig) -> str | None:
    start = c.facts.known_engine_start_seconds
    if start is None or c.smoke.deadline_seconds > start:
        return None
    return (
        f"glm:smoke.deadlineSeconds={c.smoke.deadline_seconds} is shorter than the {start:g} s a "
        f"{c.hardware} engine is known to take to start: the gate would fail a healthy load. "
        f"Fix: raise it above {start:g} (default 1800)."
    )


def _check_ports(c: StackConfig) -> str | None:
    published = {"glm:front.port": c.front.port, "glm:monitoring.port": c.monitoring.port}
    if c.container.network_mode == "host":
        published["glm:serving.port (network host)"] = c.serving.port
    seen: dict[int, str] = {}
    for key, port in published.items():
        if not 0 < port < 65536:
            return f"{key}={port} is not a TCP port (1-65535)."
        if port in seen:
            return f"{key}={port} clashes with {seen[port]}={port} on the host. Fix: give each its own port."
        seen[port] = key
    return None


DOCKER_BRIDGE_GATEWAY = "172.17.0.1"
"""Docker's default bridge gateway: what ``host-gateway`` (the front's ``host.docker.internal``)
resolves to unless dockerd sets ``--bip`` or ``--host-gateway-ip``."""


def _check_vllm_not_exposed(c: StackConfig) -> str | None:
    if c.container.network_mode != "host":
        return None
    host, port = c.serving.host, c.serving.port
    fix = (
        f"Fix: keep networkMode bridge, or set glm:serving.host to the Docker bridge gateway "
        f"({DOCKER_BRIDGE_GATEWAY} unless dockerd sets --bip/--host-gateway-ip), where the front "
        "reaches it as host.docker.internal and the world does not."
    )
    if binds_all_interfaces(host):
        shown = "unset" if host is None else repr(host)
        return (
            f"glm:container.networkMode=host with glm:serving.host={shown} publishes vLLM's port "
            f"{port} on every interface without a key (scanned within a day in the A100 seed). {fix}"
        )
    if host is not None and is_loopback(host):
        return (
            f"glm:container.networkMode=host with glm:serving.host={host!r}: vLLM listens on the host's "
            f"loopback only, and the front (in its own container) cannot reach it; the gate would wait "
            f"out its whole deadline. {fix}"
        )
    return None


def _check_plain_http(c: StackConfig) -> str | None:
    front = c.front
    if front.tls or front.allow_plain_http:
        return None
    if len(c.target.hosts) > 1:
        return (
            f"{len(c.target.hosts)} hosts without glm:front.tls: the front would send prompts and the "
            "replica key to the other hosts' replicas in clear. Fix: turn on TLS (glm:front.tls true "
            'with glm:tlsCertificate and glm:tlsKey, docs/front-and-alerts.md "TLS"; the replicas then '
            "speak TLS too), or accept it explicitly with glm:front.allowPlainHttp: true."
        )
    if is_loopback(front.bind_address):
        return None
    return (
        f"glm:front.bindAddress={front.bind_address} serves the API over plain HTTP: API keys and "
        "prompts cross the network in clear. Fix: turn on TLS (glm:front.tls true with "
        'glm:tlsCertificate and glm:tlsKey, docs/front-and-alerts.md "TLS"), or bind to '
        "127.0.0.1 behind your own TLS proxy, or accept it explicitly with "
        "glm:front.allowPlainHttp: true (every preview then warns)."
    )


def _check_prometheus_bind(c: StackConfig) -> str | None:
    monitoring = c.monitoring
    if monitoring.allow_public_bind or is_loopback(monitoring.bind_address):
        return None
    return (
        f"glm:monitoring.bindAddress={monitoring.bind_address!r} publishes Prometheus beyond loopback: it "
        "has no authentication, so anyone who reaches the port reads every metric and queries its API. "
        "Fix: keep 127.0.0.1 and reach it over `ssh -L 9090:127.0.0.1:9090`, scrape vLLM through the "
        "front with a glm:metricsKeys key, or accept it explicitly with "
        "glm:monitoring.allowPublicBind: true (every preview then warns)."
    )


def _check_extra_args(c: StackConfig) -> str | None:
    return "\n".join(extra_args_problems(c.serving.extra_args)) or None


def _check_env_names(c: StackConfig) -> str | None:
    found = env_name_problems(c.serving.env, "glm:serving.env")
    found += env_name_problems(c.serving.extra_env, "glm:serving.extraEnv")
    return "\n".join(found) or None


MEDIA_DOMAINS_SINCE = (0, 22)
"""The oldest vLLM whose documentation this project checked for ``--allowed-media-domains``."""


def media_input_allowed(c: StackConfig) -> bool:
    """``limitMmPerPrompt`` lets a prompt carry media, which vLLM fetches when given as a URL."""
    return any(n > 0 for n in (c.serving.limit_mm_per_prompt or {}).values())


def _check_media_fetching(c: StackConfig) -> str | None:
    if not media_input_allowed(c):
        return None
    allowed = {k: v for k, v in (c.serving.limit_mm_per_prompt or {}).items() if v > 0}
    if c.image.vllm_version_tuple < MEDIA_DOMAINS_SINCE:
        return (
            f"glm:serving.limitMmPerPrompt={allowed} on vLLM {c.image.vllm_version}: any key holder can "
            "make vLLM fetch URLs on the private network (Prometheus, the replicas, a cloud metadata "
            f"address), and this vLLM predates the checked --allowed-media-domains "
            f"({'.'.join(map(str, MEDIA_DOMAINS_SINCE))}). Fix: set the media limits to 0, or a newer image."
        )
    if not c.serving.allowed_media_domains:
        return (
            f"glm:serving.limitMmPerPrompt={allowed} without glm:serving.allowedMediaDomains: any key "
            "holder can make vLLM fetch URLs on the private network (Prometheus, the replicas, a cloud "
            "metadata address), and vLLM reads an empty list as `any host`. Fix: list the hosts image URLs "
            "may name, or set it to [no-remote-media.invalid] (never resolves: clients send images "
            "inline as data: URLs), or set the media limits to 0."
        )
    return None


def _dangerous_env(name: str, value: str) -> str | None:
    if name not in REFUSED_ENV or value.strip().lower() in _FALSE_ENV:
        return None
    return (
        f"{name} {REFUSED_ENV[name]}. Fix: remove it; change adapters or debug on a "
        "separate stack that is not reachable from clients."
    )


def _check_dangerous_env(c: StackConfig) -> str | None:
    found = [
        f"glm:serving.env/extraEnv.{name}={value!r}: {reason}"
        for name, value in sorted(c.serving.merged_env.items())
        if (reason := _dangerous_env(name, value)) is not None
    ]
    return "\n".join(found) or None


def _check_rehearsal(c: StackConfig) -> str | None:
    if c.rehearsing and c.hardware == "local":
        return (
            "glm:rehearsal=true on hardware local: the local stack already runs the simulator. "
            "Fix: remove glm:rehearsal, or set glm:hardware to the profile to rehearse (a800, ascend, rtx5090)."
        )
    return None


def _check_nvidia_gpus(c: StackConfig) -> str | None:
    if c.container.gpus is None:
        return None
    if c.facts.accelerator != "nvidia":
        return f"glm:container.gpus is for NVIDIA hardware; {c.hardware} takes accelerators as devices."
    if c.container.gpus != "all":
        return (
            f"glm:container.gpus={c.container.gpus!r}: pulumi-docker 4.11 supports only `all` (any other "
            "value replaces the container on every up). Fix: remove it and list the cards in "
            "glm:container.accelerators; vLLM is pinned to them with CUDA_VISIBLE_DEVICES."
        )
    return None


def _check_shm(c: StackConfig) -> str | None:
    # Also the policy pack's shm-for-tensor-parallel (mandatory): a crash, not a preference.
    shm_mb = c.container.shm_size_mb
    small = shm_mb is None or shm_mb <= DOCKER_DEFAULT_SHM_MB
    if c.serving.tensor_parallel_size > 1 and small and c.container.ipc_mode != "host":
        return (
            f"glm:container.shmSize={c.container.shm_size} and ipcMode is not host: with "
            f"tensorParallelSize={c.serving.tensor_parallel_size} the workers exchange tensors through "
            f"/dev/shm, and Docker's {DOCKER_DEFAULT_SHM_MB} MB default crashes them at random (A100 "
            "seed §8.1). Fix: set glm:container.shmSize (e.g. 64g) or glm:container.ipcMode host."
        )
    return None


def floating_images(c: StackConfig) -> list[str]:
    """Every image the stack names that can change under it, by the policy pack's images-pinned rule
    (``policy/glm_policies.unpinned_reason``): an error, except on the stacks the pack relaxes."""
    build = c.image.to_build
    images = {
        "image.reference": c.image.reference,
        "image.build.baseImage": build.base_image if build else None,
        "front.image": c.front.image,
        "monitoring.image": c.monitoring.image,
    }
    return [
        f"glm:{key}={ref} {reason}: the next pull can bring another image than the one tested. Fix: "
        "pin a version tag, a commit tag (nightly-<commit>) or a digest (name@sha256:...); only "
        "the stacks local, *-staging and *-dev deploy it with a warning."
        for key, ref in images.items()
        if ref and (reason := unpinned_reason(ref))
    ]


def _check_shutdown_timeout(c: StackConfig) -> str | None:
    timeout, grace = c.serving.shutdown_timeout, c.container.stop_grace_seconds
    if timeout is not None and timeout >= grace:
        return (
            f"glm:serving.shutdownTimeout={timeout} is not below glm:container.stopGraceSeconds={grace}: "
            "Docker would kill vLLM while it still finishes requests. Fix: stopGraceSeconds at least "
            f"{timeout + SHUTDOWN_MARGIN_SECONDS}, or unset shutdownTimeout (then {grace} - 5)."
        )
    return None


def _check_replicas_alike(c: StackConfig) -> str | None:
    """One stack renders one profile: every replica behind the front is the same server."""
    found = [
        f"glm:target.hosts[{h.name}].hardware={h.hardware} but glm:hardware={c.hardware}: the front "
        "would balance across unlike replicas (another image, flags and KV pool). Fix: one stack per "
        "hardware profile; move this host to a stack of its own."
        for h in c.target.hosts
        if h.hardware is not None and h.hardware != c.hardware
    ]
    if len(c.target.hosts) > 1 and c.container.network_mode == "host":
        found.append(
            f"glm:container.networkMode=host with {len(c.target.hosts)} hosts: a replica is published on "
            "its host's private address from the private Docker network. Fix: networkMode bridge."
        )
    return "\n".join(found) or None


def _check_known_flags(c: StackConfig) -> str | None:
    """Every flag exists in the profile's vLLM version (the real parser's table)."""
    from components.flag_check import check_known_flags  # both import this module
    from components.vllm_server import render_flags

    return check_known_flags(c.image.vllm_version, render_flags(c), c.serving.extra_args, c.image.added_flags)


_CHECKS = [
    _check_known_flags,
    _check_replicas_alike,
    _check_shutdown_timeout,
    _check_weights_fit,
    _check_tp_matches_accelerators,
    _check_cudagraph_sizes,
    _check_tool_parser,
    _check_max_model_len,
    _check_engine_ready_timeout,
    _check_smoke_deadline,
    _check_ports,
    _check_vllm_not_exposed,
    _check_nvidia_gpus,
    _check_dangerous_env,
    _check_plain_http,
    _check_shm,
    _check_rehearsal,
    _check_prometheus_bind,
    _check_extra_args,
    _check_env_names,
    _check_media_fetching,
]


# ---- advisories: deploy, but say so -------------------------------------------------------


def _warn_mtp(c: StackConfig) -> str | None:
    if c.serving.num_speculative_tokens and c.facts.mtp_warning:
        return (
            f"glm:serving.numSpeculativeTokens={c.serving.num_speculative_tokens} on {c.hardware}: "
            f"{c.facts.mtp_warning}. Consider removing it."
        )
    return None


def _warn_dead_env(c: StackConfig) -> str | None:
    if "VLLM_RPC_TIMEOUT" in c.serving.merged_env and c.image.vllm_version_tuple >= (0, 23):
        return (
            f"glm:serving.env.VLLM_RPC_TIMEOUT does nothing on vLLM {c.image.vllm_version} "
            "(removed in 0.23.0); it is kept as the seed had it. Remove it, or rely on "
            "VLLM_ENGINE_READY_TIMEOUT_S / VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS."
        )
    return None


def _warn_floating_images(c: StackConfig) -> str | None:
    """Reached only on the stacks where floating images are allowed (``build_stack_config``)."""
    return "\n".join(floating_images(c)) or None


def _warn_profiler(c: StackConfig) -> str | None:
    found = [
        f"glm:serving.env/extraEnv.{name} {reason}; remove it once the profile is taken."
        for name, value in sorted(c.serving.merged_env.items())
        if name in WARNED_ENV and value.strip().lower() not in _FALSE_ENV
        for reason in [WARNED_ENV[name]]
    ]
    return "\n".join(found) or None


def _warn_plain_http(c: StackConfig) -> str | None:
    front = c.front
    if front.tls or not front.allow_plain_http or is_loopback(front.bind_address):
        return None
    return (
        f"glm:front.allowPlainHttp=true: the API on {front.bind_address}:{front.port} is plain HTTP, so "
        "API keys and prompts cross the network in clear. Set up TLS (docs/front-and-alerts.md "
        '"TLS") and remove the opt-in.'
    )


def _warn_prometheus_bind(c: StackConfig) -> str | None:
    monitoring = c.monitoring
    if not monitoring.allow_public_bind or is_loopback(monitoring.bind_address):
        return None
    return (
        f"glm:monitoring.allowPublicBind=true: Prometheus on {monitoring.bind_address}:{monitoring.port} "
        "answers anyone who reaches it, without authentication. Put it on loopback and remove the opt-in."
    )


def _warn_rehearsal(c: StackConfig) -> str | None:
    if not c.rehearsing:
        return None
    replaced = c.rehearsal_replaced()
    dropped = [*replaced["devices"], *replaced["mounts"]] + (["--gpus all"] if replaced["gpus"] else [])
    return (
        f"glm:rehearsal=true: this is a REHEARSAL of {c.hardware}, not a model. The engine is the "
        f"vLLM-protocol simulator ({replaced['image']['rehearsal']}, base {c.rehearsal.base_image}) run "
        f"with the profile's argv instead of {replaced['image']['production']}"
        + (f"; left out: {', '.join(dropped)}" if dropped else "")
        + ". Everything else (preflight, weights, front, Prometheus, gate) is production's. A passing "
        "gate proves the plumbing only, and this stack can never be promoted to a real one."
    )


_ADVISORIES = [
    _warn_rehearsal,
    _warn_plain_http,
    _warn_prometheus_bind,
    _warn_profiler,
    _warn_mtp,
    _warn_dead_env,
    _warn_floating_images,
]


# ---- loading ---------------------------------------------------------------------------------


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Merge ``override`` into a copy of ``base``: dicts merge, anything else replaces, None deletes."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


STACK_KEYS = [
    "target", "image", "model", "serving", "container", "front",
    "monitoring", "smoke", "preflight", "semanticProbe", "promoteFrom", "rehearsal",
]  # fmt: skip

SECRET_KEYS = {
    "apiKeys": "API keys of the front, `{name: key}` (secret, required).",
    "servingSecretEnv": "Secret environment of the vLLM container, `{NAME: value}` (e.g. `HF_TOKEN` for a "
    "gated download); only the names reach the fingerprint and outputs (secret).",
    "metricsKeys": "Keys that read vLLM's `/metrics` through the front and nothing else, "
    "`{name: key}` (secret, optional; docs/front-and-alerts.md).",
    "tlsCertificate": "PEM certificate when `front.tls` is true (secret).",
    "tlsKey": "PEM key when `front.tls` is true (secret).",
    "sshPrivateKey": "Refused: Docker's ssh cannot use a key's contents, so set "
    "`target.hosts[].identityFile` (one key for Docker and the commands) instead (secret).",
}
"""The ``glm:*`` keys that hold secrets, read with ``get_secret*`` (components/secrets.py)."""
PLAIN_TEXT_REFUSED = ("apiKeys", "metricsKeys", "servingSecretEnv", "tlsKey", "sshPrivateKey")
"""Secret keys refused when set without ``--secret``; ``tlsCertificate`` is public by nature."""

DOCKER_HOST_OVERRIDE = "GLM_DOCKER_HOST"
"""Environment variable that replaces ``glm:target.hosts[0].dockerHost`` (validated like it):
CI previews a hardware stack on the local engine with ``GLM_DOCKER_HOST=unix:///var/run/docker.sock``."""

SET_OVERRIDE = "GLM_SET"
"""Environment variable of one-run overrides, ``path=value`` separated by spaces, validated like the
stack file: ``GLM_SET="serving.maxModelLen=32768 serving.enforceEager=true"`` is the seed's quick
small-context check, without editing the stack file (the next plain ``up`` puts the file's values back)."""


def parse_overrides(text: str) -> dict[str, Any]:
    """``GLM_SET``'s ``a.b=value`` items as a nested dict; values are JSON where they parse as JSON.

    >>> parse_overrides("serving.maxModelLen=32768 serving.enforceEager=true smoke.prompt=hi")
    {'serving': {'maxModelLen': 32768, 'enforceEager': True}, 'smoke': {'prompt': 'hi'}}
    """
    out: dict[str, Any] = {}
    for item in text.split():
        path, sep, value = item.partition("=")
        if not sep or not path or any(not part for part in path.split(".")):
            raise ConfigError(
                f"{SET_OVERRIDE}: {item!r} is not path=value. Fix: e.g. "
                f'{SET_OVERRIDE}="serving.maxModelLen=32768 serving.enforceEager=true"'
            )
        *parents, leaf = path.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        try:
            node[leaf] = json.loads(value)
        except json.JSONDecodeError:
            node[leaf] = value
    return out


MIN_API_KEY_LENGTH = 16
# RFC 6750 b64token: what may follow "Bearer ". It also keeps keys free of quotes, spaces, `;`, `$`
# and `{}`, so a key can be written into nginx.conf without any escaping.
_API_KEY = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_NEW_KEY = "`echo sk-$(openssl rand -hex 24)`"


@dataclass(frozen=True)
class SecretInputs:
    """The secret keys as the program reads them before anything is created, for validation only.

    Plain values: never put one in a message, a resource input or an output. The Outputs the
    components use are built by ``components.secrets.Secrets``.
    """

    api_keys: Any = None
    metrics_keys: Any = None
    serving_env: Any = None
    tls_certificate: bool = False
    tls_key: bool = False
    tls_certificate_pem: str | None = None
    """``glm:tlsCertificate`` itself (public by nature): its names are checked against
    ``glm:front.tlsName`` and give its default. Never put in a message either."""
    secret_plain_keys: tuple[str, ...] = ()
    """``glm:*`` keys of the models that hold a value set with ``--secret``."""
    plain_secret_keys: tuple[str, ...] = ()
    """Secret keys (``SECRET_KEYS``) set without ``--secret``: in clear in the stack file."""

    def problems(self) -> list[str]:
        """Rules that need no model: where secrets are, and the keys' and names' shapes."""
        found = [_secret_in_plain_key(key) for key in self.secret_plain_keys]
        found += [_plain_secret_key(key) for key in self.plain_secret_keys]
        found += check_api_keys(self.api_keys)
        found += check_metrics_keys(self.metrics_keys, self.api_keys)
        if isinstance(self.metrics_keys, Mapping) and GATE_METRICS_CLIENT in self.metrics_keys:
            found.append(
                f"glm:metricsKeys.{GATE_METRICS_CLIENT} is the smoke gate's own metrics key, which the "
                f"stack generates. Fix: name your scraper otherwise (pulumi config rm --path "
                f"'glm:metricsKeys.{GATE_METRICS_CLIENT}', then set it under another name)."
            )
        if self.serving_env is not None and not isinstance(self.serving_env, Mapping):
            found.append(
                "glm:servingSecretEnv must be a map of environment variables. Fix: "
                "pulumi config set --secret --path 'glm:servingSecretEnv.HF_TOKEN' <value>"
            )
        for name, value in sorted(self.serving_env_items()):
            if not ENV_NAME.fullmatch(name):
                found.append(
                    f"glm:servingSecretEnv.{name} is not an environment variable name. Fix: letters, "
                    "digits and `_`, not starting with a digit (e.g. HF_TOKEN)."
                )
            if not isinstance(value, str):
                found.append(
                    f"glm:servingSecretEnv.{name} is not a string. Fix: set it with "
                    f"pulumi config set --secret --path 'glm:servingSecretEnv.{name}' <value>"
                )
        return found

    def serving_env_items(self) -> list[tuple[str, Any]]:
        return list(self.serving_env.items()) if isinstance(self.serving_env, Mapping) else []

    def problems_with(self, config: StackConfig) -> list[str]:
        """Rules that need the validated model."""
        found = []
        taken = {
            **{name: "glm:serving.env / extraEnv" for name in config.serving.merged_env},
            **{name: "the program (cache directories)" for name in config.cache_env},
            **{name: "the program (accelerator pinning)" for name in VISIBILITY_ENV},
        }
        for name, _ in sorted(self.serving_env_items()):
            if name in taken:
                found.append(
                    f"glm:servingSecretEnv.{name} is also set by {taken[name]}: the container would "
                    f"get one of them at random. Fix: set {name} in one place only."
                )
            if (reason := _dangerous_env(name, "1")) is not None:
                found.append(f"glm:servingSecretEnv.{name}: {reason}")
        if (collision := _probe_key_collision(self.api_keys, config.semantic_probe)) is not None:
            found.append(collision)
        if config.front.tls and not (self.tls_certificate and self.tls_key):
            found.append(
                "glm:front.tls=true but no certificate was given. Fix: pulumi config set "
                'glm:tlsCertificate -- "$(cat tls.crt)" and pulumi config set --secret glm:tlsKey '
                '-- "$(cat tls.key)", or set glm:front.tls false.'
            )
        if config.front.tls and self.tls_certificate_pem is not None:
            found += certificate_problems(self.tls_certificate_pem, config.front.tls_name)
        return found

    def resolved(self, config: StackConfig) -> StackConfig:
        """``config`` with ``glm:front.tlsName`` defaulted to the certificate's first name."""
        pem = self.tls_certificate_pem
        if not config.front.tls or config.front.tls_name is not None or pem is None:
            return config
        front = config.front.model_copy(update={"tls_name": default_name(pem)})
        return config.model_copy(update={"front": front})


def _plain_secret_key(key: str) -> str:
    """The mirror of ``_secret_in_plain_key``: a secret key written in clear. Never the value."""
    path = {
        "apiKeys": "--path 'glm:apiKeys.<client>' <key>",
        "metricsKeys": "--path 'glm:metricsKeys.<scraper>' <key>",
        "servingSecretEnv": "--path 'glm:servingSecretEnv.<NAME>' <value>",
        "tlsKey": 'glm:tlsKey -- "$(cat tls.key)"',
    }.get(key, f"glm:{key} <value>")
    return (
        f"glm:{key} is set in plain text: it holds a secret, and Pulumi.<stack>.yaml is a tracked file "
        f"(anyone with the repository reads it, and git keeps it after a fix). Fix: remove it "
        f"(pulumi config rm glm:{key}), set it again with pulumi config set --secret {path}, and "
        "replace the value: it has been in clear."
    )


def _secret_in_plain_key(key: str) -> str:
    where = (
        "the vLLM argv and env, the gate's inputs and the stack outputs"
        if key == "serving"
        else "resource inputs and stack outputs"
    )
    return (
        f"glm:{key} holds a secret value (set with --secret), but glm:{key} is written in plain text "
        f"into {where}. Fix: remove it (pulumi config rm --path 'glm:{key}.<path>') and put a secret "
        "environment variable such as HF_TOKEN in glm:servingSecretEnv "
        "(pulumi config set --secret --path 'glm:servingSecretEnv.HF_TOKEN' <value>); vLLM needs no "
        "--api-key behind the front, which checks glm:apiKeys. Secret keys: "
        + ", ".join(f"glm:{k}" for k in SECRET_KEYS)
        + "."
    )


def check_api_keys(api_keys: Any) -> list[str]:
    """Keys nginx.conf can hold safely and an attacker cannot guess. Messages name the client,
    never the key."""
    if api_keys is None:
        return [
            "glm:apiKeys is not set: the front refuses every request without a key. Fix: "
            "pulumi config set --secret --path 'glm:apiKeys.ops' \"$(openssl rand -hex 24)\""
        ]
    if not isinstance(api_keys, Mapping) or not api_keys:
        return [
            "glm:apiKeys is empty: the front would refuse every request. Fix: "
            "pulumi config set --secret --path 'glm:apiKeys.<client>' <key>"
        ]
    return _check_key_map(api_keys, "apiKeys")


GATE_METRICS_CLIENT = "smoke-gate"
"""The gate's own metrics key (generated by the stack) in the front's metrics key map: the KV-pool
check reads vLLM's /metrics through the front on every stack, from wherever ``pulumi up`` runs."""


def check_metrics_keys(metrics_keys: Any, api_keys: Any) -> list[str]:
    """``glm:metricsKeys`` (optional): the same rules as the API keys, and none of them may also be
    an API key, so a scraper's key never reaches the model and no inference key reads /metrics."""
    if metrics_keys is None or metrics_keys == {}:
        return []
    if not isinstance(metrics_keys, Mapping):
        return [
            "glm:metricsKeys must be a map {scraper name: key}. Fix: "
            "pulumi config set --secret --path 'glm:metricsKeys.prometheus' \"sk-$(openssl rand -hex 24)\""
        ]
    found = _check_key_map(metrics_keys, "metricsKeys")
    inference = {v: n for n, v in api_keys.items()} if isinstance(api_keys, Mapping) else {}
    for name in sorted(metrics_keys):
        key = metrics_keys[name]
        if isinstance(key, str) and key in inference:
            found.append(
                f"glm:metricsKeys.{name} and glm:apiKeys.{inference[key]} hold the same key: the "
                "metrics key would also reach the model, and the inference key /metrics. Fix: give "
                f"the scraper its own key ({_NEW_KEY})."
            )
    return found


def _check_key_map(keys: Mapping[str, Any], config_key: str) -> list[str]:
    found = []
    seen: dict[str, str] = {}
    for name in sorted(keys):
        key = keys[name]
        if not _CLIENT_NAME.fullmatch(name):
            found.append(
                f"glm:{config_key}.{name}: the client name must be 1-64 characters of letters, digits, "
                "`_`, `.` and `-`, starting with a letter or digit (it is logged as the client)."
            )
        if not isinstance(key, str) or not _API_KEY.fullmatch(key):
            found.append(
                f"glm:{config_key}.{name}: the key must be a bearer token (letters, digits and "
                f"`-._~+/`, optionally ending in `=`). Fix: generate one with {_NEW_KEY}."
            )
            continue
        if len(key) < MIN_API_KEY_LENGTH:
            found.append(
                f"glm:{config_key}.{name} is {len(key)} characters; use at least {MIN_API_KEY_LENGTH} "
                f"random characters (e.g. {_NEW_KEY})."
            )
        elif (guesses := guesses_log10(key)) < MIN_GUESSES_LOG10:
            found.append(
                f"glm:{config_key}.{name} is not random enough: about 10^{guesses:.0f} guesses find it "
                f"(zxcvbn: sequences, keyboard walks, repeated or dictionary words; at least "
                f"10^{MIN_GUESSES_LOG10:.0f} needed). Fix: generate one with {_NEW_KEY}."
            )
        if key in seen:
            found.append(
                f"glm:{config_key}.{name} and glm:{config_key}.{seen[key]} hold the same key: the access log "
                "could not tell the clients apart. Fix: give each client its own key."
            )
        seen[key] = name
    return found


def build_stack_config(
    raw: dict[str, Any],
    secrets: SecretInputs | None = None,
    docker_host: str | None = None,
    stack: str | None = None,
) -> StackConfig:
    """Validate raw ``glm:*`` values (camelCase, as in the stack file) over their profile.

    ``secrets`` (when given) are checked too, and every problem is reported in one error;
    ``docker_host`` replaces ``target.hosts[0].dockerHost`` (``GLM_DOCKER_HOST``). Floating images
    are refused unless ``stack`` is one the policy pack relaxes (then they are an advisory).
    """
    hardware = raw.get("hardware")
    if hardware not in PROFILES:
        raise ConfigError(
            f"glm:hardware={hardware!r} is not a known profile. Fix: set it to one of "
            f"{', '.join(sorted(PROFILES))} (pulumi config set glm:hardware a800)."
        )
    merged = deep_merge(dict(PROFILES[hardware].defaults), {k: v for k, v in raw.items() if k != "hardware"})
    hosts = merged.get("target", {}).get("hosts")
    if docker_host and isinstance(hosts, list) and hosts and isinstance(hosts[0], dict):
        hosts[0]["dockerHost"] = docker_host
    problems = secrets.problems() if secrets is not None else []
    try:
        config = StackConfig.model_validate({"hardware": hardware, **merged})
    except ValidationError as err:
        raise ConfigError(_report([*_explain(err), *problems])) from None
    if secrets is not None:
        problems += secrets.problems_with(config)
    if not is_relaxed_stack(stack or "", {}):
        problems += floating_images(config)
    if problems:
        raise ConfigError(_report(problems))
    if secrets is not None:
        config = secrets.resolved(config)
    config._replica_values = {k: raw[k] for k in REPLICA_KEYS if k in raw}
    return config


def _report(problems: list[str]) -> str:
    return "invalid stack configuration:\n  " + "\n  ".join(problems)


def _explain(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        location = ".".join(str(p) for p in e["loc"])
        if e["type"] == "value_error":
            message = str(e["ctx"]["error"])
            # Model rules write their own "glm:<key>=..." sentence; value types get the key here.
            lines += message.split("\n") if message.startswith("glm:") else [f"glm:{location}={message}"]
        else:
            got = json.dumps(e.get("input"), default=str)[:80]
            lines.append(f"glm:{location}: {e['msg']} (got {got})")
    return lines


def load_stack_config(environ: Mapping[str, str] = os.environ) -> StackConfig:
    """Read the current stack's ``glm:*`` keys and validate them, secrets included (their values
    are only checked here; components get them as secret Outputs from ``components.secrets``)."""
    import pulumi

    config = pulumi.Config("glm")
    raw: dict[str, Any] = {"hardware": config.get("hardware")}
    for key in STACK_KEYS:
        value = config.get_object(key) if key != "promoteFrom" else config.get(key)
        if value not in (None, "", {}):  # Pulumi.yaml's defaults mean "not set"
            raw[key] = value
    if environ.get(SET_OVERRIDE):
        raw = deep_merge(raw, parse_overrides(environ[SET_OVERRIDE]))
        pulumi.log.warn(
            f"{SET_OVERRIDE} overrides the stack file for this run only: {environ[SET_OVERRIDE]} "
            "(the next `up` without it puts the stack file's values back)"
        )
    secrets = SecretInputs(
        api_keys=config.get_object("apiKeys"),
        metrics_keys=config.get_object("metricsKeys"),
        serving_env=config.get_object("servingSecretEnv"),
        tls_certificate=config.get("tlsCertificate") is not None,
        tls_certificate_pem=config.get("tlsCertificate"),
        tls_key=config.get("tlsKey") is not None,
        secret_plain_keys=tuple(
            key for key in ["hardware", *STACK_KEYS] if pulumi.runtime.is_config_secret(f"glm:{key}")
        ),
        plain_secret_keys=tuple(
            key
            for key in PLAIN_TEXT_REFUSED
            if config.get(key) is not None and not pulumi.runtime.is_config_secret(f"glm:{key}")
        ),
    )
    return build_stack_config(raw, secrets, environ.get(DOCKER_HOST_OVERRIDE) or None, pulumi.get_stack())
