"""What the probe container is told (``params.json``, rendered by the program) and what it asks:
the front path and every replica directly (:class:`ProbeTarget`). Plain Python, no Pulumi: the loops
(``service.py``), the saturation check and the program's side (components/verification/semantic_probe_spec.py)
all read it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FRONT_PATH = "front"
"""``host`` and ``path`` label of the target that is the whole path through the front."""
REPLICA_PATH = "replica"
"""``path`` label of a target that is one replica, asked directly."""


@dataclass(frozen=True)
class ProbeTarget:
    """One thing the probe asks: the front, or one replica directly."""

    host: str
    """The replica's host name (``glm:target.hosts[].name``), or ``front`` for the front path."""
    path: str
    """:data:`FRONT_PATH` or :data:`REPLICA_PATH`."""
    endpoint: str
    """OpenAI base URL (``…/v1``) on the private network."""
    metrics_url: str
    """vLLM's ``/metrics`` as this target reaches it (the kv_pool step)."""
    replica_key: bool = False
    """A guarded replica: asked with :class:`ReplicaKeys`, else with the probe's API key."""
    scrape_key: bool = False
    """``metrics_url`` asks for the scrape key (on Kubernetes the front path's: the front admits
    it on ``/metrics``); a guarded replica's always does."""
    tls: Mapping[str, Any] | None = None
    """An ``https`` endpoint's certificate name and trust (``EndpointTls.params``): the front's
    certificate names neither its container name nor a guard's address."""


@dataclass(frozen=True)
class ReplicaKeys:
    """What the probe holds for guarded replicas (components/docker/replica_guard.py), in two files."""

    inference: str
    """The stack's replica key: the steps' requests to a guard's inference routes."""
    scrape: str
    """The guards' scrape key: ``/metrics`` (kv_pool, the saturation check), the key Prometheus
    holds; a guard refuses it on every inference route."""


@dataclass(frozen=True)
class ProbeSettings:
    """What the probe container is told (``params.json``, rendered by the program)."""

    endpoint: str
    """The front's OpenAI base URL as the probe reaches it on the private network (``…/v1``)."""
    metrics_url: str
    """vLLM's own ``/metrics`` on the private network (the kv_pool step)."""
    served_name: str
    max_model_len: int
    smoke: Mapping[str, Any]
    """The gate's ``smoke`` parameters: prompts, expected answer, chat_template_kwargs, and the
    probe's ``max_tokens``, ``request_timeout_seconds`` and ``deadline_seconds``."""
    interval_seconds: float
    failures_before_alert: int
    port: int = 9101
    replicas: tuple[Mapping[str, Any], ...] = ()
    """Each replica asked directly: ``host``, ``endpoint``, ``metrics_url``, ``replica_key``
    (:class:`ProbeTarget`'s fields)."""
    replica_key_file: str | None = None
    """Where the stack's replica key is, when a replica is guarded."""
    scrape_key_file: str | None = None
    """Where the guards' scrape key is, when a replica is guarded."""
    max_num_seqs: int = 0
    """vLLM's ``--max-num-seqs``: a replica running that many requests is saturated (0: unknown,
    only a queue counts)."""
    requests_dir: str | None = None
    """The front's requests volume: set, the probe ejects a replica after ``failures_before_alert``
    failed runs in a row and re-admits it after as many passed ones (``ejection.py``)."""
    tls: Mapping[str, Any] | None = None
    """A TLS front: the name its certificate carries and what to trust (``EndpointTls.params``)."""
    guarded_metrics: bool = False
    """``metrics_url`` asks for the guards' scrape key, in ``scrape_key_file`` (Kubernetes: the
    front's ``/metrics``, which admits it as a metrics key)."""
    look_at: Mapping[str, str] | None = None
    """What the checks' failures name to see the serving container (``LookAt.params``): kubectl's on
    Kubernetes; without it, Docker's (a Docker stack's params leave it out)."""

    @classmethod
    def from_json(cls, text: str) -> ProbeSettings:
        data = json.loads(text)
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        fields["replicas"] = tuple(fields.get("replicas", ()))
        return cls(**fields)

    @property
    def targets(self) -> list[ProbeTarget]:
        """The front path first, then every replica in the order the program listed them."""
        front = ProbeTarget(
            FRONT_PATH,
            FRONT_PATH,
            self.endpoint,
            self.metrics_url,
            tls=self.tls,
            scrape_key=self.guarded_metrics,
        )
        return [front, *(ProbeTarget(path=REPLICA_PATH, **dict(r)) for r in self.replicas)]

    def gate_params(self, target: ProbeTarget) -> dict[str, Any]:
        """The inputs of the gate's checks (``run_gate``'s ``params``) for one target."""
        return {
            "endpoint": target.endpoint,
            "metrics_url": target.metrics_url,
            "served_name": self.served_name,
            "max_model_len": self.max_model_len,
            "container_name": "the serving container",
            "smoke": dict(self.smoke),
            **({"tls": dict(target.tls)} if target.tls else {}),
            **({"look_at": dict(self.look_at)} if self.look_at else {}),
        }
