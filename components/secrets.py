"""The secret config keys as secret Outputs: never printed, never in plain-text state.

``components.config.load_stack_config`` has already validated them (``SecretInputs``); this module
only reads them the way components must hold them, with ``get_secret*``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.config import GATE_METRICS_CLIENT, SemanticProbeConfig, SmokeConfig


@dataclass(frozen=True)
class Secrets:
    """Secret config values, each a secret Output."""

    api_keys: pulumi.Output[dict[str, str]]
    metrics_keys: pulumi.Output[dict[str, str]] | None = None
    """``glm:metricsKeys``: bearer tokens for the front's read-only ``/metrics`` route."""
    tls_files: tuple[pulumi.Output[str], pulumi.Output[str]] | None = None
    ssh_private_key: pulumi.Output[str] | None = None
    serving_env: Mapping[str, pulumi.Output[str]] = field(default_factory=dict)
    """``glm:servingSecretEnv``, name -> secret value: reaches only the vLLM container's env."""

    @property
    def serving_env_names(self) -> tuple[str, ...]:
        """Not secret: the fingerprint and outputs carry these, never the values."""
        return tuple(sorted(self.serving_env))

    @staticmethod
    def from_config() -> Secrets:
        config = pulumi.Config("glm")
        api_keys = config.require_secret_object("apiKeys")
        cert, key = config.get_secret("tlsCertificate"), config.get_secret("tlsKey")
        # The names are read in plain (they are config keys, not secrets); the values stay wrapped.
        names = sorted(config.get_object("servingSecretEnv") or {})
        values = config.get_secret_object("servingSecretEnv")
        return Secrets(
            api_keys=api_keys,
            metrics_keys=config.get_secret_object("metricsKeys"),
            tls_files=(cert, key) if cert is not None and key is not None else None,
            ssh_private_key=config.get_secret("sshPrivateKey"),
            serving_env={name: _item(values, name) for name in names} if values is not None else {},
        )


def _item(secret_map: pulumi.Output[Any], name: str) -> pulumi.Output[str]:
    """One value of a secret map: apply keeps it secret."""
    return secret_map.apply(lambda values: str(values[name]))


class _GeneratedKeyProvider(pulumi.dynamic.ResourceProvider):
    """Generates the key on create and never again: a rotation is ``pulumi up --replace <urn>``."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        import secrets
        import uuid

        key = str(props.get("prefix") or "sk-") + secrets.token_hex(24)
        return pulumi.dynamic.CreateResult(f"key-{uuid.uuid4().hex[:12]}", {**props, "key": key})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        # The client name may change without a new key; nothing else is an input.
        changed = olds.get("client_name") != news.get("client_name")
        return pulumi.dynamic.DiffResult(changes=changed, replaces=[], delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult({**news, "key": olds["key"]})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Nothing to remove: the key lives only in the state and the front's key maps."""


class GeneratedKey(pulumi.dynamic.Resource):
    """A key the stack makes for its own clients (the gate's and the semantic probe's API keys, the
    gate's metrics key): random once, then kept in the state; ``key`` is a secret output. There is no random
    provider here, and a key in a resource input would differ on every preview."""

    key: pulumi.Output[str]

    def __init__(
        self, name: str, client_name: str, prefix: str, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        secret = pulumi.ResourceOptions(additional_secret_outputs=["key"])
        super().__init__(
            _GeneratedKeyProvider(),
            name,
            {"client_name": client_name, "prefix": prefix, "key": None},
            pulumi.ResourceOptions.merge(opts, secret),
        )


@dataclass
class StackKeys:
    """Keys the stack makes for its own clients, secret, kept in the state (``GeneratedKey``)."""

    gate: pulumi.Output[str]
    """The gate's API key (client name ``smoke-gate``): the gate and ``make smoke`` never use a
    user's key, so the usage meter counts their requests apart."""
    probe: pulumi.Output[str] | None
    """The semantic probe's API key, when the probe runs."""
    probe_client: str | None
    """The name the front knows the probe's key by (``glm:semanticProbe.clientName``)."""
    gate_metrics: pulumi.Output[str] | None
    """The gate's metrics key: the KV-pool check reads vLLM's /metrics through the front, on every
    stack, unless glm:smoke.metricsUrl names another source."""

    @classmethod
    def create(
        cls,
        probe: SemanticProbeConfig | None,
        smoke: SmokeConfig,
        stack: str,
        after: Sequence[pulumi.Resource],
    ) -> StackKeys:
        """``probe``: the probe's settings when it runs, else None. ``after``: on Docker hosts their
        preflights, so that a refused host leaves nothing in the state."""
        opts = pulumi.ResourceOptions(depends_on=after)
        return cls(
            gate=GeneratedKey(f"{stack}-smoke-api-key", GATE_METRICS_CLIENT, "sk-gate-", opts=opts).key,
            probe=GeneratedKey(f"{stack}-semantic-probe-key", probe.client_name, "sk-probe-", opts=opts).key
            if probe is not None
            else None,
            probe_client=probe.client_name if probe is not None else None,
            gate_metrics=None
            if smoke.metrics_url
            else GeneratedKey(
                f"{stack}-smoke-metrics-key", GATE_METRICS_CLIENT, "sk-gate-metrics-", opts=opts
            ).key,
        )
