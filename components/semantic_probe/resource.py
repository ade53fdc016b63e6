"""The semantic probe on the target host: its API key, its image and its container.

``GeneratedKey`` (components/secrets.py) generates the probe's API key once, in ``create``,
and keeps it as a secret output: stable across previews and updates (there is no random provider
here). ``deployment.py`` merges it into the front's key map under ``glm:semanticProbe.clientName``,
so the front logs the probe's traffic under its own name.

``SemanticProbe`` builds the probe image on the target's Docker engine (like the serving image) from
a context assembled under ``.build/`` (:func:`build_context`) and runs it on the stack's private
network: it reaches the front by its container name and vLLM's ``/metrics`` by its network alias.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic
import pulumi_docker as docker

from components.config import ContainerConfig, SemanticProbeConfig, StackConfig
from components.docker.replica_tls import guard_tls
from components.docker.rotation_requests import PROBE_REQUESTS_DIR
from components.docker.vllm_server import upstream_hosts
from components.gate.settings import SmokeConfig
from components.gate.tls import EndpointTls
from components.render.nginx_conf import CONTAINER_PORT as FRONT_PORT
from components.semantic_probe import container_name
from components.semantic_probe.settings import ProbeSettings
from components.serving.spec import ServingSpec

PROJECT_DIR = Path(__file__).resolve().parents[2]
DOCKERFILE = "images/semantic-probe/Dockerfile"
REPOSITORY = "glm53-semantic-probe"
BUILD_DIR = ".build"
PARAMS_PATH = "/etc/semantic-probe/params.json"
KEY_PATH = "/etc/semantic-probe/api-key"
REPLICA_KEY_PATH = "/etc/semantic-probe/replica-key"
"""The stack's replica key (several hosts): the probe asks each guarded replica directly with it."""
SCRAPE_KEY_PATH = "/etc/semantic-probe/scrape-key"
"""The guards' scrape key (several hosts): the probe reads a guarded replica's ``/metrics`` with it."""
APP_FILES = (
    "components/__init__.py",
    "components/model_base.py",
    "components/gate/__init__.py",
    "components/gate/__main__.py",  # the in-pod readiness check on Kubernetes (components/kubernetes/readiness.py)
    "components/gate/checks.py",
    "components/gate/container.py",
    "components/gate/messages.py",
    "components/gate/metrics.py",
    "components/gate/readiness.py",
    "components/gate/run.py",
    "components/gate/settings.py",
    "components/gate/sse.py",
    "components/gate/startup.py",
    "components/gate/startup_lines.json",  # startup.py reads its samples at import
    "components/gate/steps.py",
    "components/gate/tls.py",
    "components/gate/transport.py",
    "components/semantic_probe/__init__.py",
    "components/semantic_probe/__main__.py",
    "components/semantic_probe/saturation.py",
    "components/semantic_probe/service.py",
    "components/semantic_probe/settings.py",
    "components/semantic_probe/ejection.py",
    "components/template.py",  # gate/container.py writes its ssh wrapper from a template
    "components/host/templates/ssh-wrapper.sh",
    "components/vllm_flags/__init__.py",
    "components/vllm_flags/owned.py",  # gate/startup.py names the key a failing flag came from
)
"""The project modules the probe imports: the gate's checks themselves, not a copy of their logic."""
ROOT_DISTRIBUTIONS = ("httpx", "prometheus_client", "pydantic")
"""What those modules import from outside the standard library; their requirements come along."""


# ---- the image --------------------------------------------------------------------------------


def required_distributions(
    roots: tuple[str, ...] = ROOT_DISTRIBUTIONS,
) -> list[importlib.metadata.Distribution]:
    """``roots`` and everything they require (extras left out), as installed in this virtualenv."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        dist = importlib.metadata.distribution(name)
        found[name] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [found[name] for name in sorted(found)]


def context_files() -> dict[str, bytes]:
    """Every file of the probe's build context, by its path in the context."""
    files = {"Dockerfile": (PROJECT_DIR / DOCKERFILE).read_bytes()}
    for rel in APP_FILES:
        files[f"app/{rel}"] = (PROJECT_DIR / rel).read_bytes()
    for dist in required_distributions():
        for entry in dist.files or []:
            parts = Path(entry).parts
            if parts[0] == ".." or "__pycache__" in parts or entry.suffix == ".pyc":
                continue  # console scripts outside site-packages; byte code is rebuilt
            files[f"site-packages/{Path(entry).as_posix()}"] = Path(str(dist.locate_file(entry))).read_bytes()
    return files


@functools.cache
def build_context() -> tuple[str, str]:
    """(context path relative to the project, image tag): the tag is the content hash, so any
    change of the checks, the probe or a package gives a new image and replaces the container."""
    files = context_files()
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + files[path] + b"\0")
    tag = digest.hexdigest()[:16]
    relative = f"{BUILD_DIR}/semantic-probe-{tag}"
    target = PROJECT_DIR / relative
    if not target.is_dir():
        target.parent.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="semantic-probe-", dir=target.parent))
        for path, content in files.items():
            (staging / path).parent.mkdir(parents=True, exist_ok=True)
            (staging / path).write_bytes(content)
        try:
            os.rename(staging, target)
        except OSError:  # another run made the same context first
            shutil.rmtree(staging, ignore_errors=True)
    return relative, f"{REPOSITORY}:{tag}"


# ---- the container ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SemanticProbeSpec:
    """What the probe reads from the stack config."""

    probe: SemanticProbeConfig
    """``glm:semanticProbe``: the probe's schedule, limits, base image and port."""
    smoke: SmokeConfig
    """``glm:smoke``: the gate's prompts and expected answers, which the probe asks again."""
    served_name: str
    """The model name vLLM serves (``glm:model.servedName``)."""
    max_model_len: int
    """vLLM's ``--max-model-len`` (``glm:serving.maxModelLen``)."""
    max_num_seqs: int
    """vLLM's ``--max-num-seqs`` (``glm:serving.maxNumSeqs``): running that many, a replica is
    saturated and the probe skips it."""
    container: ContainerConfig
    """``glm:container``: the probe's container is named after the serving one, rotates its logs
    the same way and, on the host network, reaches vLLM through the same gateway entry."""
    front_tls: EndpointTls | None = None
    """A TLS front (``glm:front.tls``): the name its certificate carries and what to trust
    (components/front_tls.py); the probe reaches it by its container name, which that name is not."""

    @classmethod
    def of(
        cls, config: StackConfig, serving: ServingSpec, front_tls: EndpointTls | None = None
    ) -> SemanticProbeSpec:
        """The spec of a stack whose serving container runs ``serving`` (Docker hosts or Kubernetes)."""
        return cls(
            probe=config.semantic_probe,
            smoke=config.smoke,
            served_name=serving.served_name,
            max_model_len=serving.max_model_len,
            max_num_seqs=config.serving.max_num_seqs,
            container=config.container,
            front_tls=front_tls,
        )


@dataclass(frozen=True)
class ProbeReplica:
    """One replica the probe asks directly."""

    host: str
    """Its host's name (``glm:target.hosts[].name``): the ``host`` label of its results."""
    address: str
    """``host:port`` where the probe reaches it: the front host's vLLM on the private network, or a
    replica's guard."""
    guarded: bool
    """Behind a guard: asked with the stack's replica key (over TLS, with ``glm:front.tls``)."""


def probe_settings(
    spec: SemanticProbeSpec,
    front_host: str,
    upstream: str,
    replicas: tuple[ProbeReplica, ...] = (),
    replica_certificate: str | None = None,
) -> ProbeSettings:
    """What the probe runs: the gate's prompts and answers (``glm:smoke``) with the probe's own
    limits. ``front_host`` is the front's container name, ``upstream`` vLLM's ``host:port``,
    ``replicas`` those asked directly besides the front path; ``replica_certificate`` the guards'
    pinned certificate, when they serve TLS."""
    probe = spec.probe
    front_scheme = "https" if spec.front_tls else "http"
    guard = guard_tls(replica_certificate) if replica_certificate is not None else None
    smoke = {
        "prompt": spec.smoke.prompt,
        "expected_answer": spec.smoke.expected_answer,
        "tool_prompt": spec.smoke.tool_prompt,
        "chat_template_kwargs": dict(spec.smoke.chat_template_kwargs),
        "max_tokens": probe.max_tokens,
        "request_timeout_seconds": probe.timeout_seconds,
        # Readiness polls /v1/models at most this long: one request's worth, not the gate's load wait.
        "deadline_seconds": probe.timeout_seconds,
        "poll_seconds": 0.25,
    }
    return ProbeSettings(
        endpoint=f"{front_scheme}://{front_host}:{FRONT_PORT}/v1",
        metrics_url=f"http://{upstream}/metrics",
        served_name=spec.served_name,
        max_model_len=spec.max_model_len,
        max_num_seqs=spec.max_num_seqs,
        smoke=smoke,
        interval_seconds=probe.interval_seconds,
        failures_before_alert=probe.failures_before_alert,
        port=probe.port,
        replicas=tuple(_replica_target(r, guard if r.guarded else None) for r in replicas),
        replica_key_file=REPLICA_KEY_PATH if any(r.guarded for r in replicas) else None,
        scrape_key_file=SCRAPE_KEY_PATH if any(r.guarded for r in replicas) else None,
        tls=spec.front_tls.params() if spec.front_tls else None,
    )


def _replica_target(replica: ProbeReplica, tls: EndpointTls | None) -> dict[str, Any]:
    """One replica's ``ProbeTarget`` fields: a guard serving TLS is asked over TLS, by its pinned name."""
    scheme = "https" if tls else "http"
    return {
        "host": replica.host,
        "endpoint": f"{scheme}://{replica.address}/v1",
        "metrics_url": f"{scheme}://{replica.address}/metrics",
        "replica_key": replica.guarded,
        **({"tls": tls.params()} if tls else {}),
    }


def render_params(settings: ProbeSettings) -> str:
    """``params.json``: sorted keys, so the same settings render the same bytes (no diff)."""
    fields = {name: getattr(settings, name) for name in ProbeSettings.__dataclass_fields__}
    return json.dumps(fields, sort_keys=True, indent=2, default=dict) + "\n"


@dataclass(frozen=True)
class SemanticProbeArgs:
    """What the probe asks, whom, with which keys, and where its container runs."""

    spec: SemanticProbeSpec
    """What the probe reads from the stack config."""
    network_name: pulumi.Input[str]
    """The stack's private network, on the front's host."""
    front_host: pulumi.Input[str]
    """The front's container name: the probe's way into the front on the private network."""
    upstream: str
    """vLLM's ``host:port`` on the private network, for its ``/metrics``."""
    api_key: pulumi.Output[str]
    """The probe's own API key (``GeneratedKey.key``)."""
    replicas: tuple[ProbeReplica, ...] = ()
    """The replicas it also asks directly, so that a result names its host."""
    replica_key: pulumi.Output[str] | None = None
    """The stack's replica key; needed when one of ``replicas`` is guarded."""
    scrape_key: pulumi.Output[str] | None = None
    """The guards' scrape key, for guarded replicas' ``/metrics``; needed with ``replica_key``."""
    requests_volume: pulumi.Input[str] | None = None
    """The front's requests volume (components/docker/rotation_requests.py), the one thing of the front the
    probe mounts: it ejects and re-admits replicas through it."""
    replica_certificate: pulumi.Output[str] | None = None
    """The guards' pinned certificate, when they serve TLS."""
    started_after: tuple[pulumi.Resource, ...] = ()
    """The container starts once these are done (the gate: a loading engine is the gate's business,
    not an alert); the image builds meanwhile."""
    build_platform: str | None = None
    """What its image is built for, where known (``HostConfig.build_platform`` of the front's host)."""

    def __post_init__(self) -> None:
        if any(r.guarded for r in self.replicas) and (self.replica_key is None or self.scrape_key is None):
            raise ValueError("a guarded replica needs the stack's replica key and the guards' scrape key")


def _guard_key_uploads(args: SemanticProbeArgs) -> list[docker.ContainerUploadArgs]:
    """The guards' two keys, each in a file of its own: inference reads one, ``/metrics`` the other."""
    if not any(r.guarded for r in args.replicas) or args.replica_key is None or args.scrape_key is None:
        return []
    return [
        docker.ContainerUploadArgs(file=path, content=pulumi.Output.secret(key), permissions="0444")
        for path, key in ((REPLICA_KEY_PATH, args.replica_key), (SCRAPE_KEY_PATH, args.scrape_key))
    ]


SATURATION_LABEL = "glm53.probe-saturated-at-max-num-seqs"
"""The probe container's label holding ``glm:serving.maxNumSeqs``, the saturation it judges by."""


class SemanticProbe(pulumi.ComponentResource):
    """The probe container on the stack's private network, scraped by the stack's Prometheus."""

    container_name: pulumi.Output[str]
    """Docker name of the probe container."""
    image_ref: pulumi.Output[str]
    """The probe image (content-hash tag)."""

    def __init__(
        self, name: str, args: SemanticProbeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("glm:semanticProbe:SemanticProbe", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec = args.spec
        context, tag = build_context()
        image = docker.Image(
            f"{name}-image",
            image_name=tag,
            build=docker.DockerBuildArgs(
                context=context,
                dockerfile=f"{context}/Dockerfile",
                args={"BASE_IMAGE": spec.probe.base_image},
                builder_version=docker.BuilderVersion.BUILDER_BUILD_KIT,
                platform=args.build_platform,
            ),
            skip_push=True,
            opts=child,
        )
        certificate = (
            args.replica_certificate
            if args.replica_certificate is not None
            else pulumi.Output.from_input(None)
        )
        params = pulumi.Output.all(pulumi.Output.from_input(args.front_host), certificate).apply(
            lambda values: render_params(
                dataclasses.replace(
                    probe_settings(spec, values[0], args.upstream, args.replicas, values[1]),
                    requests_dir=PROBE_REQUESTS_DIR if args.requests_volume is not None else None,
                )
            )
        )
        container = docker.Container(
            f"{name}-container",
            name=container_name(spec.container.name),
            image=image.image_name,
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=args.network_name)],
            uploads=[
                docker.ContainerUploadArgs(file=PARAMS_PATH, content=params, permissions="0444"),
                # The probe runs as nobody in a container of its own: the key file is its only reader.
                docker.ContainerUploadArgs(
                    file=KEY_PATH, content=pulumi.Output.secret(args.api_key), permissions="0444"
                ),
                *_guard_key_uploads(args),
            ],
            # Nothing else is mounted: no Docker socket, no host path, none of the front's config.
            volumes=[
                docker.ContainerVolumeArgs(
                    volume_name=args.requests_volume, container_path=PROBE_REQUESTS_DIR
                )
            ]
            if args.requests_volume is not None
            else None,
            labels=[
                docker.ContainerLabelArgs(label="glm53.role", value="semantic-probe"),
                # The probe skips a replica running this many requests (saturated, not wrong); its
                # params upload carries it, and is secret: this label says why a maxNumSeqs change
                # replaces the probe too.
                docker.ContainerLabelArgs(label=SATURATION_LABEL, value=str(spec.max_num_seqs)),
            ],
            hosts=upstream_hosts(spec.container),
            restart="unless-stopped",
            log_driver="json-file",
            log_opts=spec.container.log_opts,
            # A fixed container name cannot exist twice: remove the old one first.
            opts=pulumi.ResourceOptions(
                parent=self, delete_before_replace=True, depends_on=list(args.started_after)
            ),
        )
        self.container_name = container.name
        self.image_ref = image.image_name
        self.register_outputs({"container_name": self.container_name, "image_ref": self.image_ref})
