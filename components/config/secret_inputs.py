"""The secret keys as the program reads them before anything is created (``SecretInputs``): where
secrets may be set, the API and metrics keys' shapes and strength, and the rules between secrets and
the stack. The Outputs the components use are built by ``components/secrets.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.config.certificate import certificate_problems, default_name
from components.config.edge import SemanticProbeConfig
from components.config.key_strength import MIN_GUESSES_LOG10, guesses_log10
from components.config.kubernetes import secret_env_problem
from components.config.replica import ENV_NAME, VISIBILITY_ENV, dangerous_env
from components.config.stack import StackConfig
from components.config.values import CLIENT_NAME, fix_command

SET_HF_TOKEN = fix_command("config set --secret --path 'glm:servingSecretEnv.HF_TOKEN' \"$HF_TOKEN\"")
"""How a refusal says to set a secret variable for vLLM: from the user's own shell's ``$HF_TOKEN``."""

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


MIN_API_KEY_LENGTH = 16
# RFC 6750 b64token: what may follow "Bearer ". It also keeps keys free of quotes, spaces, `;`, `$`
# and `{}`, so a key can be written into nginx.conf without any escaping.
_API_KEY = re.compile(r"[A-Za-z0-9._~+/-]+=*")
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
                "stack generates. Fix: name your scraper otherwise ("
                + fix_command(f"config rm --path 'glm:metricsKeys.{GATE_METRICS_CLIENT}'")
                + ", then set it under another name)."
            )
        if self.serving_env is not None and not isinstance(self.serving_env, Mapping):
            found.append(
                "glm:servingSecretEnv must be a map of environment variables. Fix: "
                + fix_command("config rm glm:servingSecretEnv")
                + ", then set each variable, e.g. "
                + SET_HF_TOKEN
            )
        for name, value in sorted(self.serving_env_items()):
            if not ENV_NAME.fullmatch(name):
                found.append(
                    f"glm:servingSecretEnv.{name} is not an environment variable name. Fix: letters, "
                    "digits and `_`, not starting with a digit (e.g. HF_TOKEN)."
                )
            if not isinstance(value, str):
                found.append(
                    f"glm:servingSecretEnv.{name} is not a string. Fix: set it as text from your shell's "
                    f"${name}: "
                    + fix_command(f"config set --secret --path 'glm:servingSecretEnv.{name}' \"${name}\"")
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
            if (reason := dangerous_env(name, "1")) is not None:
                found.append(f"glm:servingSecretEnv.{name}: {reason}")
        if (lost := secret_env_problem(config, [name for name, _ in self.serving_env_items()])) is not None:
            found.append(lost)
        if (collision := _probe_key_collision(self.api_keys, config.semantic_probe)) is not None:
            found.append(collision)
        if isinstance(self.api_keys, Mapping) and GATE_METRICS_CLIENT in self.api_keys:
            found.append(
                f"glm:apiKeys.{GATE_METRICS_CLIENT} is the smoke gate's own client name: the stack "
                f"generates that key, so the gate's and `make smoke`'s requests are counted apart from "
                f"every user's. Fix: rename the key (pulumi config rm --path "
                f"'glm:apiKeys.{GATE_METRICS_CLIENT}' and set it under another name)."
            )
        found += _unknown_weights(self.api_keys, config)
        if config.front.tls and not (self.tls_certificate and self.tls_key):
            found.append(
                "glm:front.tls=true but no certificate was given. Fix: "
                + fix_command('config set glm:tlsCertificate -- "$(cat tls.crt)"')
                + " and "
                + fix_command('config set --secret glm:tlsKey -- "$(cat tls.key)"')
                + ", or turn TLS off: "
                + fix_command("config set --path glm:front.tls false")
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


def _unknown_weights(api_keys: Any, config: StackConfig) -> list[str]:
    """A usage-meter weight or budget for a name that is no key would silently apply to nobody (a
    typo); a budget for the stack's own keys would let the gate or the probe be refused."""
    users = set(api_keys) if isinstance(api_keys, Mapping) else set()
    own = {config.semantic_probe.client_name, GATE_METRICS_CLIENT}
    keys = ", ".join(sorted(users)) if users else "none"
    meter = config.front.usage_meter
    found = [
        f"glm:front.usageMeter.{setting}.{name} names no API key (the keys are {keys}). Fix: "
        + fix_command(f"config rm --path 'glm:front.usageMeter.{setting}.{name}'")
        + ", or set it under a key's name from glm:apiKeys."
        for setting, names in (("weights", meter.weights), ("limits", meter.limits))
        for name in sorted(names)
        if name not in users | own
    ]
    found += [
        f"glm:front.usageMeter.limits.{name} is the stack's own client ({'the gate' if name == GATE_METRICS_CLIENT else 'the semantic probe'}): "
        "its checks must never be refused for a budget, and never spend a user's. Fix: "
        + fix_command(f"config rm --path 'glm:front.usageMeter.limits.{name}'")
        for name in sorted(meter.limits)
        if name in own
    ]
    return found


def _plain_secret_key(key: str) -> str:
    """The mirror of ``_secret_in_plain_key``: a secret key written in clear. Never the value."""
    path = {
        "apiKeys": "--path 'glm:apiKeys.ops' \"sk-$(openssl rand -hex 24)\"",
        "metricsKeys": "--path 'glm:metricsKeys.prometheus' \"sk-$(openssl rand -hex 24)\"",
        "servingSecretEnv": "--path 'glm:servingSecretEnv.HF_TOKEN' \"$HF_TOKEN\"",
        "tlsKey": 'glm:tlsKey -- "$(cat tls.key)"',
    }.get(key, f'glm:{key} -- "$(cat {key})"')
    return (
        f"glm:{key} is set in plain text: it holds a secret, and Pulumi.<stack>.yaml is a tracked file "
        f"(anyone with the repository reads it, and git keeps it after a fix). Fix: remove it "
        f"({fix_command(f'config rm glm:{key}')}), set a new value as a secret (e.g. "
        f"{fix_command(f'config set --secret {path}')}): the old one has been in clear."
    )


def _secret_in_plain_key(key: str) -> str:
    where = (
        "the vLLM argv and env, the gate's inputs and the stack outputs"
        if key == "serving"
        else "resource inputs and stack outputs"
    )
    return (
        f"glm:{key} holds a secret value (set with --secret), but glm:{key} is written in plain text "
        f"into {where}. Fix: find the secret value ({fix_command('config --show-secrets')}), remove it "
        f"(config rm --path 'glm:{key}.…'), and put a secret environment variable such as HF_TOKEN in "
        f"glm:servingSecretEnv ({SET_HF_TOKEN}); vLLM needs no "
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
            + fix_command("config set --secret --path 'glm:apiKeys.ops' \"sk-$(openssl rand -hex 24)\"")
        ]
    if not isinstance(api_keys, Mapping) or not api_keys:
        return [
            "glm:apiKeys is empty: the front would refuse every request. Fix: "
            + fix_command("config rm glm:apiKeys")
            + ", then "
            + fix_command("config set --secret --path 'glm:apiKeys.ops' \"sk-$(openssl rand -hex 24)\"")
        ]
    return _check_key_map(api_keys, "apiKeys")


GATE_METRICS_CLIENT = "smoke-gate"
"""The name of the gate's own keys, which the stack generates: its API key in the front's key map
(the gate's and ``make smoke``'s requests, counted apart from every user's by the usage meter), and
its metrics key in the metrics key map (the KV-pool check reads vLLM's /metrics through the front
on every stack, from wherever ``pulumi up`` runs)."""


def check_metrics_keys(metrics_keys: Any, api_keys: Any) -> list[str]:
    """``glm:metricsKeys`` (optional): the same rules as the API keys, and none of them may also be
    an API key, so a scraper's key never reaches the model and no inference key reads /metrics."""
    if metrics_keys is None or metrics_keys == {}:
        return []
    if not isinstance(metrics_keys, Mapping):
        return [
            "glm:metricsKeys must be a map {scraper name: key}. Fix: "
            + fix_command("config rm glm:metricsKeys")
            + ", then "
            + fix_command(
                "config set --secret --path 'glm:metricsKeys.prometheus' \"sk-$(openssl rand -hex 24)\""
            )
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
        if not CLIENT_NAME.fullmatch(name):
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


def _probe_key_collision(api_keys: Any, probe: SemanticProbeConfig) -> str | None:
    if not probe.enabled or not isinstance(api_keys, Mapping) or probe.client_name not in api_keys:
        return None
    return (
        f"glm:apiKeys.{probe.client_name} is the semantic probe's client name "
        f"(glm:semanticProbe.clientName): the front could not tell its traffic from the probe's, and the "
        "stack-generated probe key would replace yours. Fix: rename the key ("
        + fix_command(f"config rm --path 'glm:apiKeys.{probe.client_name}'")
        + " and set it under another name), or name the probe otherwise: "
        + fix_command("config set --path glm:semanticProbe.clientName semantic-probe-2")
    )
