"""What the semantic probe is told, the same on a Docker host and on Kubernetes: its spec (the slice
of the stack config it reads), the targets it asks, and ``params.json`` with the paths of its files
in the container. Pure: the target's side uploads or mounts them (components/docker/semantic_probe.py,
components/kubernetes/semantic_probe.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from components.config import ContainerConfig, SemanticProbeConfig, StackConfig
from components.gate.messages import LookAt
from components.gate.settings import SmokeConfig
from components.gate.tls import EndpointTls
from components.render.nginx_conf import CONTAINER_PORT as FRONT_PORT
from components.semantic_probe.settings import ProbeSettings
from components.serving.spec import ServingSpec

PARAMS_PATH = "/etc/semantic-probe/params.json"
KEY_PATH = "/etc/semantic-probe/api-key"
REPLICA_KEY_PATH = "/etc/semantic-probe/replica-key"
"""The stack's replica key (several hosts): the probe asks each guarded replica directly with it."""
SCRAPE_KEY_PATH = "/etc/semantic-probe/scrape-key"
"""The guards' scrape key (several hosts): the probe reads a guarded replica's ``/metrics`` with it."""


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
    look_at: LookAt | None = None
    """What its checks' failures name to see the serving container, when not Docker's: kubectl's on
    Kubernetes (``ServingPods.look_at``), the same as the gate's."""

    @classmethod
    def of(
        cls,
        config: StackConfig,
        serving: ServingSpec,
        front_tls: EndpointTls | None = None,
        look_at: LookAt | None = None,
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
            look_at=look_at,
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
    replica_tls: EndpointTls | None = None,
) -> ProbeSettings:
    """What the probe runs: the gate's prompts and answers (``glm:smoke``) with the probe's own
    limits. ``front_host`` is the front's container name, ``upstream`` vLLM's ``host:port``,
    ``replicas`` those asked directly besides the front path; ``replica_tls`` how a guarded one is
    verified, when the guards serve TLS (on a Docker host: their pinned certificate,
    components/serving/replica_credentials.py)."""
    probe = spec.probe
    front_scheme = "https" if spec.front_tls else "http"
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
        replicas=tuple(_replica_target(r, replica_tls if r.guarded else None) for r in replicas),
        replica_key_file=REPLICA_KEY_PATH if any(r.guarded for r in replicas) else None,
        scrape_key_file=SCRAPE_KEY_PATH if any(r.guarded for r in replicas) else None,
        tls=spec.front_tls.params() if spec.front_tls else None,
        look_at=spec.look_at.params() if spec.look_at else None,
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
    """``params.json``: sorted keys, so the same settings render the same bytes (no diff). Without
    ``look_at`` it is left out: a Docker stack's params, and so its probe container, stay as they were."""
    fields = {name: getattr(settings, name) for name in ProbeSettings.__dataclass_fields__}
    if settings.look_at is None:
        del fields["look_at"]
    return json.dumps(fields, sort_keys=True, indent=2, default=dict) + "\n"
