"""Rules 1, 2, 7 and 8: what the network can reach. No published port but the front's, never one
from vLLM; the front checks the API key; the front serves TLS when it binds beyond loopback; a port
beyond loopback has a credential in front of it."""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from .resource import (
    CONTAINER,
    DYNAMIC,
    FRONT_LABEL,
    UNKNOWN,
    Resource,
    Undecidable,
    command_args,
    flag_value,
    is_front,
    is_labelled_front,
    is_serving,
    labels,
)

TLS_LABEL = "glm53.tls"
"""``on`` when the front serves TLS (``components/docker/nginx_front.py``)."""
PLAIN_HTTP_LABEL = ("glm53.plain-http", "accepted")
"""Set only from ``glm:front.allowPlainHttp``: the stack opted in to plain HTTP on a public bind."""
GUARD_LABEL = ("glm53.role", "replica-guard")
"""Set by ``components/docker/replica_guard.py``: nginx answering only the stack's guard keys (its
``nginx_conf``, an ``NginxReload`` input, is checked by rule 2 as the front's is)."""
PUBLIC_BIND_LABEL = ("glm53.public-bind", "accepted")
"""Set only from ``glm:monitoring.allowPublicBind``: the stack opted in to Prometheus, which checks
no credential, beyond loopback."""
NGINX_CONF = "/etc/nginx/nginx.conf"
RELOADED_CONF = "/etc/nginx/glm/current/nginx.conf"
"""Where a front delivered by ``NginxReload`` (components/docker/nginx_reload.py) reads its config."""


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


def _port(value: Any) -> str:
    """Ports arrive as floats (JSON numbers): 8080.0 -> '8080'."""
    if value is UNKNOWN:
        return "?"
    return str(int(value)) if isinstance(value, (int, float)) else str(value)


# --- 1. no-public-serving-port ------------------------------------------------------------------


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
        host = flag_value(command_args(resource), "--host")
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
                "components/render/nginx_conf.render_release_conf and set glm:apiKeys."
            ]
        return []
    if not is_front(resource):
        return []
    if any(RELOADED_CONF in arg for arg in command_args(resource)):
        return []  # its config is the NginxReload's nginx_conf, checked above
    uploads = resource.known("uploads", [])
    confs = [u for u in uploads if u is UNKNOWN or u.get("file") in (NGINX_CONF, UNKNOWN)]
    if any(u is UNKNOWN or u.get("file") is UNKNOWN for u in confs):
        raise Undecidable(f"{resource.name}: `uploads` is not known until the update runs")
    if not confs:
        return [
            f"{resource.name} (the Nginx front) uploads no {NGINX_CONF} and does not read "
            f"{RELOADED_CONF}: the image's default config serves without an API key. Fix: let "
            "NginxFront render and deliver it (components/docker/nginx_front.py)."
        ]
    missing = _key_check_missing(_upload_text(resource, confs[-1]))
    if missing:
        return [
            f"{resource.name} (the Nginx front): {NGINX_CONF} lacks {' and '.join(missing)}, so "
            "requests reach vLLM without an API key. Fix: render it with "
            "components/render/nginx_conf.render_nginx_conf and set glm:apiKeys."
        ]
    return []


# --- 7. front-tls-on-public-bind ----------------------------------------------------------------


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


# --- 8. published-port-needs-credential ---------------------------------------------------------


def published_port_needs_credential(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """A port published on an address beyond loopback belongs to a container that checks a key:
    the labelled front or a labelled replica guard, unless the stack opted in (``PUBLIC_BIND_LABEL``).
    vLLM and the all-interfaces spellings are rule 1's."""
    if resource.type != CONTAINER or is_serving(resource):
        return []
    found = labels(resource)
    if (
        is_labelled_front(resource)
        or found.get(GUARD_LABEL[0]) == GUARD_LABEL[1]
        or found.get(PUBLIC_BIND_LABEL[0]) == PUBLIC_BIND_LABEL[1]
    ):
        return []
    public = []
    for port in resource.known("ports", []):
        if port is UNKNOWN or port.get("ip") is UNKNOWN:
            raise Undecidable(f"{resource.name}: the bind address of its port is not known yet")
        ip = port.get("ip")
        if not binds_all_interfaces(ip) and not is_loopback(ip):
            public.append(f"{ip}:{_port(port.get('external'))}")
    if not public:
        return []
    return [
        f"{resource.name} publishes {', '.join(public)} with no credential in front of it: anyone who "
        f"reaches that address uses it. Only the Nginx front ({FRONT_LABEL[0]}={FRONT_LABEL[1]}) and the "
        f"replica guards ({GUARD_LABEL[0]}={GUARD_LABEL[1]}) check a key. Fix: bind it to 127.0.0.1 "
        "and reach it through an SSH tunnel, or put it behind the front; for Prometheus an explicit "
        f"glm:monitoring.allowPublicBind: true (label {PUBLIC_BIND_LABEL[0]}={PUBLIC_BIND_LABEL[1]})."
    ]
