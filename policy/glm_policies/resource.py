"""What a rule sees of one resource, and what the resource is: front, vLLM container, volume.

The engine sends inputs in camelCase, numbers as floats, secrets and values unknown during preview
in its wire markers; ``normalize`` turns them into plain data with ``UNKNOWN`` in place of what is
not known yet, and ``Resource.known`` raises ``Undecidable`` where a rule needs such a value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/image:Image"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
VOLUME = "docker:index/volume:Volume"
DYNAMIC = "pulumi-python:dynamic:Resource"

FRONT_LABEL = ("glm53.role", "front")
"""Set by ``components/docker/nginx_front.py``: the one container allowed to publish on all interfaces."""
SERVING_SUFFIX = "-vllm"
"""Logical name suffix of the vLLM container (``components/docker/vllm_server.py``)."""
SERVING_LABEL = "glm53.served-model"
"""Label only the vLLM container carries; a second way to recognise it."""
FRONT_SUFFIX = "-nginx"

# The engine's markers (pulumi sdk/go/common/resource/properties.go): a secret travels as
# {SIG: SECRET_SIG, "value": ...}; a value not known during preview as one of these strings.
_SIG = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_UNKNOWN_SENTINELS = frozenset(
    {
        "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",  # bool
        "3eeb2bf0-c639-47a8-9e75-3b44932eb421",  # number
        "04da6b54-80e4-46f7-96ec-b56ff0331ba9",  # string
        "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",  # array
        "030794c1-ac77-496b-92df-f27374a8bd58",  # asset
        "e48ece36-62e2-4504-bad9-02848725956a",  # archive
        "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",  # object
    }
)


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
"""A value the engine does not know yet (an Output during preview)."""


class Undecidable(Exception):
    """The rule cannot decide: a value it needs is unknown or unreadable. Reported as not applicable."""


def normalize(value: Any) -> Any:
    """Plain dicts and lists, secrets unwrapped, unknown markers replaced by ``UNKNOWN``.

    >>> normalize({"a": [{"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "value": 1}]})
    {'a': [1]}
    """
    if isinstance(value, str):
        return UNKNOWN if value in _UNKNOWN_SENTINELS else value
    if isinstance(value, Mapping):
        if value.get(_SIG) == _SECRET_SIG:
            return normalize(value.get("value"))
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        return [normalize(v) for v in value]
    return value


@dataclass(frozen=True)
class Resource:
    """What a rule sees of one resource."""

    type: str
    """Type token, e.g. ``docker:index/container:Container``."""
    name: str
    """Logical (Pulumi) name, e.g. ``a800-serving-vllm``."""
    props: Mapping[str, Any] = field(default_factory=dict)
    """Inputs in the engine's camelCase, after ``normalize``."""
    urn: str = ""
    protect: bool = False
    """The ``protect`` resource option."""
    retain_on_delete: bool | None = None
    """The ``retain_on_delete`` option where it can be seen; ``None`` when it cannot (the analyzer)."""

    def get(self, key: str, default: Any = None) -> Any:
        value = self.props.get(key, default)
        return default if value is None else value

    def known(self, key: str, default: Any = None) -> Any:
        """The input, or ``Undecidable`` when the engine does not know it yet."""
        value = self.get(key, default)
        if value is UNKNOWN:
            raise Undecidable(f"{self.name}: `{key}` is not known until the update runs")
        return value


# --- what a resource is -------------------------------------------------------------------------


def labels(resource: Resource) -> dict[str, Any]:
    """Docker labels as a dict (the engine sends a list of ``{label, value}``)."""
    raw = resource.get("labels", [])
    if raw is UNKNOWN:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    return {str(item.get("label")): item.get("value") for item in raw if isinstance(item, Mapping)}


def is_labelled_front(resource: Resource) -> bool:
    key, value = FRONT_LABEL
    return resource.type == CONTAINER and labels(resource).get(key) == value


def is_front(resource: Resource) -> bool:
    """The Nginx front, by its label or, failing that, by its ``-nginx`` name."""
    return is_labelled_front(resource) or (
        resource.type == CONTAINER and resource.name.endswith(FRONT_SUFFIX)
    )


def is_serving(resource: Resource) -> bool:
    """The vLLM container: ``-vllm`` logical name, or the served-model label only it carries."""
    return resource.type == CONTAINER and (
        resource.name.endswith(SERVING_SUFFIX) or SERVING_LABEL in labels(resource)
    )


def command_args(resource: Resource) -> list[str]:
    """A container's ``command``, the known arguments as text (``Undecidable`` if it is unknown)."""
    command = resource.known("command", [])
    return [str(arg) for arg in command if arg is not UNKNOWN]


def flag_value(argv: Sequence[str], *names: str) -> str | None:
    """The value of ``--flag=value`` or ``--flag value`` (last one wins, as in argparse).

    >>> flag_value(["m", "--tensor-parallel-size=8"], "--tensor-parallel-size")
    '8'
    >>> flag_value(["m", "-tp", "4"], "--tensor-parallel-size", "-tp")
    '4'
    """
    found = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg.startswith(name + "="):
                found = arg.split("=", 1)[1]
            elif arg == name and i + 1 < len(argv):
                found = argv[i + 1]
    return found
