"""The glm-serving rules as pure functions over plain data: no engine, no gRPC, no pulumi import.

Each rule takes a ``Resource`` (the analyzer's view of one resource: type, logical name, inputs as
the engine sends them, in camelCase) and returns the violation messages, ``[]`` when it passes.
A rule that needs a value the engine does not know yet (an Output during preview) raises
``Undecidable``; ``glm_analyzer`` turns that into "not applicable" with the reason, so a preview
never crashes and never passes a resource silently.

Messages name the resource, the input, the value, and the fix. They never quote nginx.conf: it
holds the API keys.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/image:Image"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
VOLUME = "docker:index/volume:Volume"

FRONT_LABEL = ("glm53.role", "front")
"""Set by ``components/nginx_front.py``: the one container allowed to publish on all interfaces."""
SERVING_SUFFIX = "-vllm"
"""Logical name suffix of the vLLM container (``components/vllm_server.py``)."""
SERVING_LABEL = "glm53.served-model"
"""Label only the vLLM container carries; a second way to recognise it."""
TLS_LABEL = "glm53.tls"
"""``on`` when the front serves TLS (``components/nginx_front.py``)."""
PLAIN_HTTP_LABEL = ("glm53.plain-http", "accepted")
"""Set only from ``glm:front.allowPlainHttp``: the stack opted in to plain HTTP on a public bind."""
FRONT_SUFFIX = "-nginx"
NGINX_CONF = "/etc/nginx/nginx.conf"
RELOADED_CONF = "/etc/nginx/glm/current/nginx.conf"
"""Where a front delivered by ``NginxReload`` (components/nginx_reload.py) reads its config."""
DYNAMIC = "pulumi-python:dynamic:Resource"
DOCKER_DEFAULT_SHM_MB = 64

DEFAULT_RELAXED_STACKS = ("local",)
DEFAULT_RELAXED_STACK_SUFFIXES = ("-staging", "-dev")
DEFAULT_RETAINED_VOLUME_SUFFIXES = ("-jit-cache",)
"""Volumes the program creates with ``retain_on_delete=True``, which no analyzer can see (the
engine's AnalyzerResourceOptions has no such field); tests/test_policy.py checks this list
against the program."""

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


def binds_all_interfaces(host: Any) -> bool:
    """Every spelling that makes a server (vLLM's ``--host``) or a Docker port listen on all
    interfaces; the config's rules use this one too (components/config/target.py, rules.py).

    >>> [binds_all_interfaces(h) for h in (None, "", "0", "*", "::", "[::]", "0.0.0.0", "0.0.0.0/0")]
    [True, True, True, True, True, True, True, True]
    >>> [binds_all_interfaces(h) for h in ("127.0.0.1", "10.0.0.5", "172.17.0.1")]
    [False, False, False]
    """
    if host is None or str(host).strip() in ("", "0", "*"):
        return True
    text = str(host).strip().strip("[]").split("/")[0]
    try:
        return ipaddress.ip_address(text).is_unspecified
    except ValueError:
        return False


def _command(resource: Resource) -> list[str]:
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


# --- 1. no-public-serving-port ------------------------------------------------------------------


def _port(value: Any) -> str:
    """Ports arrive as floats (JSON numbers): 8080.0 -> '8080'."""
    if value is UNKNOWN:
        return "?"
    return str(int(value)) if isinstance(value, (int, float)) else str(value)


def no_public_serving_port(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """No port on all interfaces except the labelled front's; none at all from the vLLM container."""
    if resource.type != CONTAINER:
        return []
    violations = []
    serving = is_serving(resource)
    exempt = is_labelled_front(resource) and not serving
    for port in resource.known("ports", []):
        entry = {} if port is UNKNOWN else port
        internal, external, ip = entry.get("internal"), entry.get("external"), entry.get("ip")
        # No `external` still publishes: Docker picks a free host port >= 32768.
        host_port = "a random host port" if external is None else f"host port {_port(external)}"
        if serving:
            # Any published port is a violation: no value needs to be known.
            where = "?" if ip is UNKNOWN else "all interfaces" if binds_all_interfaces(ip) else ip
            violations.append(
                f"{resource.name} (the vLLM container) publishes container port {_port(internal)} on "
                f"{host_port} ({where}). vLLM has no API key; it must be reached only through the "
                "Nginx front on the private network. Fix: remove the port from the vLLM container."
            )
        elif exempt:
            continue
        elif port is UNKNOWN or ip is UNKNOWN:
            raise Undecidable(f"{resource.name}: the address of port {_port(internal)} is not known yet")
        elif binds_all_interfaces(ip):
            violations.append(
                f"{resource.name} publishes container port {_port(internal)} on {host_port} on all "
                f"interfaces (ip {ip or 'unset'}). Only the Nginx front (label "
                f"{FRONT_LABEL[0]}={FRONT_LABEL[1]}) may. Fix: bind it to 127.0.0.1 (e.g. "
                "glm:monitoring.bindAddress), or put it behind the front."
            )
    if serving and resource.get("networkMode") == "host":
        host = flag_value(_command(resource), "--host")
        if host is None or binds_all_interfaces(host):
            violations.append(
                f"{resource.name} (the vLLM container) uses the host network with vLLM listening on "
                f"{'all interfaces' if host is None else host}: its port is open without a key. "
                "Fix: glm:container.networkMode bridge, or glm:serving.host set to the Docker bridge gateway "
                "(172.17.0.1), where the front reaches it and the world does not."
            )
    return violations


# --- 2. front-requires-api-key ------------------------------------------------------------------

_KEY_MAP = re.compile(r"\bmap\s+\$http_authorization\s+\$\w+\s*\{")
_RETURN_401 = re.compile(r"\breturn\s+401\b")


def _upload_text(resource: Resource, upload: Mapping[str, Any]) -> str:
    content, encoded = upload.get("content"), upload.get("contentBase64")
    if UNKNOWN in (content, encoded):
        raise Undecidable(
            f"{resource.name}: the {NGINX_CONF} upload is not known until the update runs "
            "(its content is computed from secret config); checked on `pulumi up`"
        )
    if isinstance(content, str):
        return content
    if isinstance(encoded, str):
        try:
            return base64.b64decode(encoded).decode()
        except ValueError as err:
            raise Undecidable(f"{resource.name}: the {NGINX_CONF} upload is not base64 text") from err
    raise Undecidable(
        f"{resource.name}: the {NGINX_CONF} upload has no inline content (`source` files are not "
        "read by the policy)"
    )


def _key_check_missing(text: str) -> list[str]:
    return [
        what
        for what, pattern in (
            ("`map $http_authorization $<client> { ... }` (API key -> client)", _KEY_MAP),
            ("`return 401` for requests without a known key", _RETURN_401),
        )
        if not pattern.search(text)
    ]


def front_requires_api_key(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """The front's nginx.conf maps the Authorization header to a client and answers 401 otherwise.

    Two ways to ship it: an ``uploads`` entry of the front container, or (the program's way) the
    ``nginx_conf`` input of the front's ``NginxReload``, with the container reading
    ``RELOADED_CONF``. That input holds no key (the keys are in a secret file it includes).
    """
    if resource.type == DYNAMIC and "nginx_conf" in resource.props:
        missing = _key_check_missing(str(resource.known("nginx_conf")))
        if missing:
            return [
                f"{resource.name} (the front's config): nginx_conf lacks {' and '.join(missing)}, so "
                "requests reach vLLM without an API key. Fix: render it with "
                "components/nginx_front.render_release_conf and set glm:apiKeys."
            ]
        return []
    if not is_front(resource):
        return []
    if any(RELOADED_CONF in arg for arg in _command(resource)):
        return []  # its config is the NginxReload's nginx_conf, checked above
    uploads = resource.known("uploads", [])
    confs = [u for u in uploads if u is UNKNOWN or u.get("file") in (NGINX_CONF, UNKNOWN)]
    if any(u is UNKNOWN or u.get("file") is UNKNOWN for u in confs):
        raise Undecidable(f"{resource.name}: `uploads` is not known until the update runs")
    if not confs:
        return [
            f"{resource.name} (the Nginx front) uploads no {NGINX_CONF} and does not read "
            f"{RELOADED_CONF}: the image's default config serves without an API key. Fix: let "
            "NginxFront render and deliver it (components/nginx_front.py)."
        ]
    missing = _key_check_missing(_upload_text(resource, confs[-1]))
    if missing:
        return [
            f"{resource.name} (the Nginx front): {NGINX_CONF} lacks {' and '.join(missing)}, so "
            "requests reach vLLM without an API key. Fix: render it with "
            "components/nginx_front.render_nginx_conf and set glm:apiKeys."
        ]
    return []


# --- 3. images-pinned ---------------------------------------------------------------------------

_IMAGE_ID = re.compile(r"(sha256:)?[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def unpinned_reason(ref: str) -> str | None:
    """Why an image reference floats, or None when it is pinned.

    >>> [unpinned_reason(r) for r in ("nginx:1.27", "vllm/vllm-openai:nightly-385dce36b")]
    [None, None]
    >>> unpinned_reason("localhost:5000/vllm")
    'has no tag (Docker pulls :latest)'
    """
    if _IMAGE_ID.fullmatch(ref) or "@sha256:" in ref:
        return None
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag (Docker pulls :latest)"
    tag = last.rsplit(":", 1)[1]
    if tag == "latest":
        return "uses the :latest tag"
    if "nightly" in tag.lower() and not any(
        _COMMIT.fullmatch(part) for part in re.split(r"[-_.]", tag.lower())
    ):
        return f"uses the floating :{tag} tag"
    return None


def image_refs(resource: Resource) -> list[tuple[str, Any]]:
    """(input, reference) pairs of the image references a resource holds."""
    if resource.type == REMOTE_IMAGE:
        return [("name", resource.get("name"))]
    if resource.type == IMAGE:
        refs = [("imageName", resource.get("imageName"))]
        build = resource.get("build", {})
        build_args = build.get("args") if isinstance(build, Mapping) else None
        if isinstance(build_args, Mapping) and build_args.get("BASE_IMAGE") is not None:
            refs.append(("build.args.BASE_IMAGE", build_args["BASE_IMAGE"]))
        return refs
    if resource.type == CONTAINER:
        return [("image", resource.get("image"))]
    return []


def images_pinned(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Every image reference names a fixed image: an ID, a digest, or a tag other than latest/nightly."""
    violations, unknown = [], []
    for key, ref in image_refs(resource):
        if ref is UNKNOWN:
            unknown.append(key)
        elif ref is None or ref == "":
            continue
        elif (reason := unpinned_reason(str(ref))) is not None:
            violations.append(
                f"{resource.name}: {key} {ref!r} {reason}; the next pull can bring a different "
                "image than the one that was tested. Fix: pin a version tag, a commit tag "
                "(nightly-<commit>) or a digest (name@sha256:...)."
            )
    if unknown and not violations:
        raise Undecidable(
            f"{resource.name}: {', '.join(unknown)} is computed (not known during preview); the "
            "RemoteImage/Image it comes from is checked instead"
        )
    return violations


def stack_of(urn: str) -> str | None:
    """The stack name in a URN (``urn:pulumi:<stack>::<project>::<type>::<name>``)."""
    parts = urn.split("::")
    if len(parts) < 4 or not parts[0].startswith("urn:pulumi:"):
        return None
    return parts[0].removeprefix("urn:pulumi:")


def is_relaxed_stack(stack: str, config: Mapping[str, Any]) -> bool:
    """Stacks where an unpinned image is advisory: ``local``, ``*-staging``, ``*-dev`` by default.

    >>> [is_relaxed_stack(s, {}) for s in ("a800", "a800-staging", "local", "rtx5090-dev")]
    [False, True, True, True]
    """
    names = config.get("relaxedStacks", DEFAULT_RELAXED_STACKS)
    suffixes = config.get("relaxedStackSuffixes", DEFAULT_RELAXED_STACK_SUFFIXES)
    return stack in names or any(stack.endswith(s) for s in suffixes)


# --- 4. shm-for-tensor-parallel -----------------------------------------------------------------


def tensor_parallel_size(argv: Sequence[str]) -> int:
    value = flag_value(argv, "--tensor-parallel-size", "-tp")
    try:
        return int(value) if value is not None else 1
    except ValueError:
        return 1


def shm_for_tensor_parallel(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Tensor parallel > 1 needs more than Docker's 64 MB /dev/shm, or the host's IPC namespace."""
    if resource.type != CONTAINER:
        return []
    tp = tensor_parallel_size(_command(resource))
    if tp <= 1 or resource.known("ipcMode", "") == "host":
        return []
    shm = resource.known("shmSize", None)
    if shm is not None and float(shm) > DOCKER_DEFAULT_SHM_MB:
        return []
    shown = f"{float(shm):g} MB" if shm is not None else f"unset (Docker's {DOCKER_DEFAULT_SHM_MB} MB)"
    return [
        f"{resource.name} runs --tensor-parallel-size={tp} with shmSize {shown} and ipcMode "
        f"{resource.get('ipcMode', 'unset')}: the workers exchange tensors through /dev/shm and "
        "crash on Docker's 64 MB. Fix: glm:container.shmSize (e.g. 64g) or glm:container.ipcMode host."
    ]


# --- 5. weights-read-only -----------------------------------------------------------------------


def _binds(resource: Resource) -> list[dict[str, Any]]:
    """Bind mounts from ``mounts`` and host-path ``volumes``, as ``{source, target, readOnly}``."""
    binds = []
    for mount in resource.known("mounts", []):
        if mount is UNKNOWN:
            raise Undecidable(f"{resource.name}: a `mounts` entry is not known until the update runs")
        if mount.get("type") == "bind":
            binds.append(mount)
    for volume in resource.known("volumes", []):
        if isinstance(volume, Mapping) and volume.get("hostPath"):
            binds.append(
                {
                    "source": volume["hostPath"],
                    "target": volume.get("containerPath"),
                    "readOnly": volume.get("readOnly"),
                }
            )
    return binds


def _contains(target: Any, path: str) -> bool:
    if not isinstance(target, str) or not target.startswith("/"):
        return False
    target = target.rstrip("/") or "/"
    return path == target or path.startswith(target if target == "/" else target + "/")


def weights_mounts(resource: Resource) -> list[dict[str, Any]]:
    """The bind mounts that hold the weights vLLM serves.

    The first bind mount (``ModelVolume`` puts the weights first), and every bind mount whose target
    contains the model path vLLM is given (``command[0]``, e.g. ``/models/GLM-5.3-Flash``).
    """
    binds = _binds(resource)
    argv = _command(resource)
    model = argv[0] if argv and argv[0].startswith("/") else None
    return [b for i, b in enumerate(binds) if i == 0 or (model and _contains(b.get("target"), model))]


def weights_read_only(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """The vLLM container mounts the weights read-only: a serving process must not be able to alter them."""
    if not is_serving(resource):
        return []
    violations = []
    for bind in weights_mounts(resource):
        if bind.get("readOnly") is UNKNOWN:
            raise Undecidable(f"{resource.name}: readOnly of {bind.get('target')} is not known yet")
        if bind.get("readOnly") is not True:
            violations.append(
                f"{resource.name} mounts the weights {bind.get('source')} -> {bind.get('target')} "
                "writable: a bug or a compromised vLLM could corrupt the only copy of the weights. "
                "Fix: readOnly true on that mount (ModelVolume does this; check glm:container.mounts)."
            )
    return violations


# --- 6. volumes-retained ------------------------------------------------------------------------


def volumes_retained(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """A Docker volume survives ``pulumi destroy`` and replacement: protect or retain_on_delete.

    ``retain_on_delete`` never reaches an analyzer, so a volume whose logical name ends with one of
    ``retainedVolumeSuffixes`` (policy config) counts as retained: the program's word, which
    tests/test_policy.py checks.
    """
    if resource.type != VOLUME:
        return []
    if resource.protect or resource.retain_on_delete:
        return []
    suffixes = config.get("retainedVolumeSuffixes", DEFAULT_RETAINED_VOLUME_SUFFIXES)
    if resource.retain_on_delete is None and any(resource.name.endswith(s) for s in suffixes):
        return []
    return [
        f"{resource.name} (Docker volume {resource.get('name', '?')}) is neither protected nor "
        "retained: `pulumi destroy` or a replacement deletes it and its data. Fix: "
        "ResourceOptions(retain_on_delete=True) and add its name suffix to the policy config "
        "retainedVolumeSuffixes (analyzers cannot see retain_on_delete), or protect=True."
    ]


# --- 7. front-tls-on-public-bind ----------------------------------------------------------------


def is_loopback(host: Any) -> bool:
    """``localhost`` or a loopback address (a CIDR suffix ignored); the config's rules share it.

    >>> [is_loopback(h) for h in ("localhost", "127.0.0.1", "[::1]", "127.0.0.1/8", "10.0.0.5", None)]
    [True, True, True, True, False, False]
    """
    text = str(host).strip().strip("[]").split("/")[0]
    try:
        return text.lower() == "localhost" or ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def front_tls_on_public_bind(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """A front published beyond loopback serves TLS, unless the stack opted in to plain HTTP."""
    if not is_front(resource):
        return []
    public = []
    for port in resource.known("ports", []):
        if port is UNKNOWN or port.get("ip") is UNKNOWN:
            raise Undecidable(f"{resource.name}: the bind address of its port is not known yet")
        if not is_loopback(port.get("ip")):
            public.append(f"{port.get('ip') or 'all interfaces'}:{_port(port.get('external'))}")
    found = labels(resource)
    if not public or found.get(TLS_LABEL) == "on" or found.get(PLAIN_HTTP_LABEL[0]) == PLAIN_HTTP_LABEL[1]:
        return []
    return [
        f"{resource.name} (the Nginx front) serves plain HTTP on {', '.join(public)}: API keys and "
        "prompts cross the network in clear. Fix: glm:front.tls true with glm:tlsCertificate and "
        'glm:tlsKey (docs/front-and-alerts.md "TLS"), a loopback glm:front.bindAddress behind your '
        "own TLS proxy, or an explicit glm:front.allowPlainHttp: true (label "
        f"{PLAIN_HTTP_LABEL[0]}={PLAIN_HTTP_LABEL[1]})."
    ]


# --- the table glm_analyzer builds the pack from ------------------------------------------------


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    check: Callable[[Resource, Mapping[str, Any]], list[str]]
    advisory_on_relaxed_stacks: bool = False
    config_schema: Mapping[str, Any] = field(default_factory=dict)


_STRING_LIST = {"type": "array", "items": {"type": "string"}}

RULES: tuple[Rule, ...] = (
    Rule(
        "no-public-serving-port",
        "No port on all interfaces except the Nginx front's API port; no port at all from vLLM.",
        no_public_serving_port,
    ),
    Rule(
        "front-requires-api-key",
        "The Nginx front's nginx.conf checks the API key (map $http_authorization) and returns 401.",
        front_requires_api_key,
    ),
    Rule(
        "images-pinned",
        "Images are pinned: no :latest, no untagged image, no floating nightly tag.",
        images_pinned,
        advisory_on_relaxed_stacks=True,
        config_schema={"relaxedStacks": _STRING_LIST, "relaxedStackSuffixes": _STRING_LIST},
    ),
    Rule(
        "shm-for-tensor-parallel",
        "Tensor parallel > 1 runs with shmSize > 64 MB or ipcMode host.",
        shm_for_tensor_parallel,
    ),
    Rule(
        "weights-read-only",
        "The vLLM container mounts the model weights read-only.",
        weights_read_only,
    ),
    Rule(
        "volumes-retained",
        "Docker volumes are protected or retained on delete.",
        volumes_retained,
        config_schema={"retainedVolumeSuffixes": _STRING_LIST},
    ),
    Rule(
        "front-tls-on-public-bind",
        "The Nginx front serves TLS when it binds beyond loopback, unless the stack opted in to plain HTTP.",
        front_tls_on_public_bind,
    ),
)
