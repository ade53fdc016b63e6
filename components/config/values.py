"""Value types: a bad value names its key (``_explain`` in ``loading.py`` adds it), the value and the
fix; and ``ConfigError``, what every refused stack raises.

The annotated types the sections share: sizes, durations, timeouts, the hardware profile's name,
the served model id, a hub repository id and revision, a client name. Nothing here imports the rest of the package.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from components.profiles import PROFILES, spoken_list


class ConfigError(ValueError):
    """A stack configuration that must not be deployed; the message says what to change."""


STACK = "<stack>"
"""Where a printed fix names its stack: ``build_stack_config`` writes the stack's name there."""


def fix_command(args: str) -> str:
    """A ``scripts/pulumi.sh`` command a refusal prints, in backticks, ready to paste once
    ``build_stack_config`` has named the stack: without ``-s`` the CLI changes whichever stack is
    selected, and the local stack's config is not even in the file it would write. ``-s`` goes
    before a ``--`` (after it, the CLI would take it as the value).

    >>> fix_command("config rm --path 'glm:serving.maxNumSeq'")
    "`scripts/pulumi.sh config rm --path 'glm:serving.maxNumSeq' -s <stack>`"
    >>> fix_command('config set --secret glm:tlsKey -- "$(cat tls.key)"')
    '`scripts/pulumi.sh config set --secret glm:tlsKey -s <stack> -- "$(cat tls.key)"`'
    """
    head, dashes, value = args.partition(" -- ")
    return f"`scripts/pulumi.sh {head} -s {STACK}{dashes.rstrip()}{' ' + value if dashes else ''}`"


THIS_KEY = "<this key>"
"""In a value type's fix, where ``_explain`` (``loading.py``) writes the key the value is under."""


def named(text: str, stack: str | None) -> str:
    """``text`` with its fixes' stack named (``fix_command``); as it is without a stack.

    >>> named("Fix: `scripts/pulumi.sh config rm glm:x -s <stack>`.", "local")
    'Fix: `scripts/pulumi.sh config rm glm:x -s local`.'
    """
    return text.replace(f"-s {STACK}", f"-s {stack}") if stack else text


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


def _env_text(value: Any) -> Any:
    """An environment value is text; ``pulumi config set --path ... 1`` stores the number 1 (the CLI
    reads the value as YAML): a number is taken as the text it was typed as. A YAML boolean is not:
    vLLM reads some switches with ``int()`` (``true`` crashes it) and others as ``"true"``."""
    if isinstance(value, bool):
        text = "1" if value else "0"
        raise ValueError(
            f"{str(value).lower()} was read as a boolean, and an environment value is text: which "
            "text the engine expects differs per variable (vLLM parses many with int()). Fix: quote "
            f"it as the variable expects, e.g. {text} as text: "
            + fix_command(f"config set --path --type string '{THIS_KEY}' {text}")
        )
    if isinstance(value, int | float):
        return str(value)
    return value


EnvText = Annotated[str, BeforeValidator(_env_text)]
"""A value of ``glm:serving.env``/``extraEnv``: text, or a number taken as its text."""

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


_UNIT_SECONDS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}


def duration_seconds(value: str) -> float:
    """A Prometheus duration in seconds.

    >>> duration_seconds("15s"), duration_seconds("1m30s"), duration_seconds("500ms")
    (15.0, 90.0, 0.5)
    """
    return float(sum(int(n) * _UNIT_SECONDS[unit] for n, unit in re.findall(r"([0-9]+)(ms|[ywdhms])", value)))


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


# Hugging Face's validate_repo_id and ModelScope's model ids: word characters, `.` and `-`, starting
# and ending with a word character, so an id can never be read as a command-line option.
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_HUB_REPO = re.compile(rf"{_HUB_PART}/{_HUB_PART}")


def _hub_repo(value: str) -> str:
    if not _HUB_REPO.fullmatch(value) or ".." in value or "--" in value:
        raise ValueError(
            f"{value!r} is not a hub repository id: the download command would read it as something "
            "else (an option, a path). Fix: owner/name, each of letters, digits and `_.-`, neither "
            "starting nor ending with `.` or `-`, without `..` or `--` (e.g. zai-org/GLM-5.3-Flash)"
        )
    return value


def _revision(value: str) -> str:
    if not value or value.startswith("-") or any(not c.isprintable() or c.isspace() for c in value):
        raise ValueError(
            f"{value!r} is not a revision the hub CLI reads as one: it starts with `-` (an option) or "
            "holds a space or control character. Fix: a branch, tag or commit hash (e.g. v1.0 or "
            "the commit's 40 hex digits), or unpinned"
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
NonzeroDuration = Annotated[str, AfterValidator(_nonzero_duration)]
ServedName = Annotated[str, AfterValidator(_served_name)]
HubRepo = Annotated[str, AfterValidator(_hub_repo)]
Revision = Annotated[str, AfterValidator(_revision)]

CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A client's name in the front's key maps and access log (``glm:apiKeys``, the probe's
``clientName``)."""
