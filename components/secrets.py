"""The secret config keys as secret Outputs: never printed, never in plain-text state.

``components.config.load_stack_config`` has already validated them (``SecretInputs``); this module
only reads them the way components must hold them, with ``get_secret*``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi


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
