"""Loading: the stack's ``glm:*`` keys and one-run overrides (``GLM_SET``, ``GLM_DOCKER_HOST``)
deep-merged over the hardware profile's defaults, validated with the secrets, and every problem
reported in one ``ConfigError``.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import shlex
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from components.config.advisories import floating_images
from components.config.replica import REPLICA_KEYS
from components.config.secret_inputs import PLAIN_TEXT_REFUSED, SECRET_KEYS, SecretInputs
from components.config.stack import StackConfig
from components.config.values import THIS_KEY, ConfigError, fix_command, named
from components.profiles import PROFILES
from policy.glm_policies import is_relaxed_stack


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


STACK_KEYS = [field.alias or name for name, field in StackConfig.model_fields.items() if name != "hardware"]
"""The ``glm:*`` keys of the models in field order, but ``hardware``: it is read first, to pick the profile."""

KNOWN_KEYS = ("hardware", *STACK_KEYS, *SECRET_KEYS)
"""Every ``glm:*`` key the program reads: any other is a typo, refused with the nearest of these."""

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
        nearest = difflib.get_close_matches(str(hardware), sorted(PROFILES), n=1, cutoff=0) or ["local"]
        raise ConfigError(
            named(
                f"glm:hardware={hardware!r} is not a known profile. Fix: set it to one of "
                f"{', '.join(sorted(PROFILES))} ({fix_command(f'config set glm:hardware {nearest[0]}')}).",
                stack,
            )
        )
    merged = deep_merge(dict(PROFILES[hardware].defaults), {k: v for k, v in raw.items() if k != "hardware"})
    hosts = merged.get("target", {}).get("hosts")
    if docker_host and isinstance(hosts, list) and hosts and isinstance(hosts[0], dict):
        hosts[0]["dockerHost"] = docker_host
    problems = secrets.problems() if secrets is not None else []
    try:
        config = StackConfig.model_validate({"hardware": hardware, **merged})
    except ValidationError as err:
        raise ConfigError(named(_report([*_explain(err, raw), *problems]), stack)) from None
    if secrets is not None:
        problems += secrets.problems_with(config)
    if not is_relaxed_stack(stack or "", {}):
        problems += floating_images(config)
    if problems:
        raise ConfigError(named(_report(problems), stack))
    if secrets is not None:
        config = secrets.resolved(config)
    config._replica_values = {k: raw[k] for k in REPLICA_KEYS if k in raw}
    config._stack = stack
    return config


def _report(problems: list[str]) -> str:
    return "invalid stack configuration:\n  " + "\n  ".join(problems)


def config_path(location: Sequence[str | int]) -> str:
    """A pydantic location as ``pulumi config --path`` writes it.

    >>> config_path(["target", "hosts", 0, "hostKy"])
    'glm:target.hosts[0].hostKy'
    """
    text = "glm:" + str(location[0])
    for part in location[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def nearest_key(location: Sequence[str | int]) -> str | None:
    """The real key nearest to the unknown one at ``location``, as a full path, or None.

    >>> nearest_key(["servng"])
    'glm:serving'
    >>> nearest_key(["front", "rateLimit", "burts"])
    'glm:front.rateLimit.burst'
    """
    *parents, unknown = location
    model: Any = StackConfig
    for part in parents:
        if isinstance(part, int):
            continue  # a list's item: the model is the list's
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        model = _model_in(field.annotation) if field is not None else None
        if model is None:
            return None
    names = list(KNOWN_KEYS) if not parents else [f.alias or n for n, f in model.model_fields.items()]
    found = difflib.get_close_matches(str(unknown), names, n=1, cutoff=0.6)
    if not found and str(unknown).lower() in {n.lower() for n in names}:
        found = [n for n in names if n.lower() == str(unknown).lower()]
    return config_path([*parents, found[0]]) if found else None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, through ``X | None``, ``list[X]`` and ``Annotated[X, …]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (model := _model_in(arg)) is not None:
            return model
    return None


def _unknown_key(location: Sequence[str | int], value: Any = None) -> str:
    path, nearest = config_path(location), nearest_key(location)
    remove = fix_command(f"config rm --path '{path}'")
    if nearest is None:
        return (
            f"{path} is not a known key. Fix: remove it ({remove}); README's Configuration lists every key."
        )
    # A value the CLI reads back as itself (YAML): the rename is two commands to paste.
    typed = isinstance(value, str | int | float) and not isinstance(value, bool)
    again = (
        fix_command(f"config set --path '{nearest}' {shlex.quote(str(value))}") if typed else f"set {nearest}"
    )
    return f"{path} is not a known key; did you mean {nearest}? Fix: rename it ({remove}, then {again})."


def _explain(err: ValidationError, raw: Mapping[str, Any]) -> list[str]:
    lines = []
    for e in err.errors():
        location = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(_unknown_key(e["loc"], e.get("input")))
            continue
        if e["type"] == "value_error":
            message = str(e["ctx"]["error"])
            # Model rules write their own "glm:<key>=..." sentence; value types get the key here.
            if THIS_KEY in message:
                message = message.replace(THIS_KEY, config_path(e["loc"]))
            found = message.split("\n") if message.startswith("glm:") else [f"glm:{location}={message}"]
        else:
            got = json.dumps(e.get("input"), default=str)[:80]
            found = [f"glm:{location}: {e['msg']} (got {got})"]
        # A value with no command of its own to paste: removing it is one, where the default is accepted.
        if len(found) == 1 and "`scripts/pulumi.sh" not in found[0] and _default_mends(raw, e["loc"]):
            remove = fix_command(f"config rm --path '{config_path(e['loc'])}'")
            found[0] = f"{found[0].rstrip('.')}; or remove it for the profile's default: {remove}"
        lines += found
    return lines


def _default_mends(raw: Mapping[str, Any], location: Sequence[str | int]) -> bool:
    """Whether the stack file set the refused value at ``location`` and, without it, the profile's
    default there is accepted: then ``config rm`` of that key is a fix to paste.

    >>> _default_mends({"hardware": "local", "front": {"maxBodySize": "20x"}}, ["front", "maxBodySize"])
    True
    >>> _default_mends({"hardware": "local"}, ["front", "maxBodySize"])
    False
    """
    if not location or any(isinstance(part, int) for part in location):
        return False
    trimmed = copy.deepcopy(dict(raw))
    node: Any = trimmed
    for part in location[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or location[-1] not in node:
        return False
    del node[location[-1]]
    hardware = trimmed.get("hardware")
    if not isinstance(hardware, str) or hardware not in PROFILES:
        return False
    merged = deep_merge(
        dict(PROFILES[hardware].defaults), {k: v for k, v in trimmed.items() if k != "hardware"}
    )
    try:
        StackConfig.model_validate({"hardware": hardware, **merged})
    except ValidationError as again:
        return all(tuple(e["loc"]) != tuple(location) for e in again.errors())
    return True


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
    # Any other glm:* key is a typo (glm:servng): the models refuse it, naming the nearest real key.
    for name in _stack_file_keys():
        if name not in KNOWN_KEYS:
            raw[name] = config.get(name)
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


def _stack_file_keys() -> list[str]:
    """The ``glm:*`` keys the engine gave this run (the stack file's and Pulumi.yaml's defaults)."""
    from pulumi.runtime import config as runtime_config

    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    return sorted(key.removeprefix("glm:") for key in keys if key.startswith("glm:"))
