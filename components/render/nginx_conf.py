"""The front's ``nginx.conf`` and the files beside it: pure, proven against the real ``nginx``.

``render_front_files`` is every file of one release (``nginx.conf`` from
``components/host/templates/nginx.conf``, the key maps and the TLS pair), as ``NginxReload`` delivers
them (components/docker/nginx_front.py); ``render_nginx_conf`` is the same config as one self-contained
file, for harnesses that run one ``nginx -c`` file. The tests run both through ``nginx``.

Here: where a release's files and the rotation's lie, the ``upstream`` of replicas (how the front
connects to them, retries and gives one up), and the whole config put together. What the front
shows its clients (keys, limits, TLS, error bodies, the access log) is in
components/render/nginx_clients.py. Past 400 lines, kept whole: the replicas' upstreams (prefix
affinity's per-replica groups too) are parts of the one config rendered here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from components.config import FrontConfig
from components.render.nginx_clients import (
    INFERENCE_ROUTES,
    access_log_format,
    check_keys,
    error_bodies,
    rate_limit_lines,
    render_key_map,
    render_server_tls,
)
from components.render.nginx_meter import (
    UPSTREAM_KEEPALIVE_TIMEOUT_SECONDS,
    MeterRoute,
    meter_conf,
    routes_by_prefix,
)
from components.render.status_page import render_front_conf as render_status_page
from components.template import render_file

# The front's config volume, as its files name each other's paths (NginxReload delivers to it).
CONF_ROOT = "/etc/nginx/glm"
"""Mount point of the front's config volume: ``releases/<id>/`` and the ``current`` symlink."""
ROTATION_DIR = f"{CONF_ROOT}/rotation"
"""The replicas in rotation (components/docker/rotation.py): beside the releases, never part of one."""
STATUS_DIR = f"{CONF_ROOT}/status"
"""What the front's status port serves: ``rotation.prom``, written by the rotation (readable by
nginx's workers, unlike the rotation's own files)."""
DOCKER_DNS = "127.0.0.11"
"""Docker's embedded DNS on a user-defined network: nginx finds the status page's Prometheus by name
at request time, so a replaced container (a new address) needs no reload."""
LUA_MODULES_INCLUDE = "/etc/nginx/modules-enabled/*.conf"
"""With the usage meter: the Lua module, as Debian's nginx packages enable it (their snippets name
the module relative to nginx's prefix). OpenResty's nginx has Lua built in and no such file: the
pattern matches nothing there."""
CONTAINER_PORT = 8080
"""Port Nginx listens on inside its container; the host port is ``glm:front.port``."""
STATUS_PORT = 9146
"""The front's status port: the rotation's state for the stack's Prometheus (``/metrics``). Never
published: only containers on the stack's private network reach it."""
STATUS_FILE = f"{STATUS_DIR}/rotation.prom"
CONF_FILE = "nginx.conf"
API_KEYS_FILE = "api-keys.map"
METRICS_KEYS_FILE = "metrics-keys.map"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
"""File names inside a release directory; nginx.conf refers to the others by these relative names."""
FRONT_SNIPPET = "replica-guard-auth.conf"
"""With several hosts: the replica key the front sends (and, with TLS, how it verifies the guards)."""
FRONT_TRUST = "replica-guard-ca.crt"
"""With several hosts and TLS: the replica certificate the front pins."""
SECRET_FILES = (
    API_KEYS_FILE,
    METRICS_KEYS_FILE,
    TLS_CERT,
    TLS_KEY,
    FRONT_SNIPPET,
    FRONT_TRUST,
)

# vLLM binds its port while the weights load but refuses connections until the engine is up
# (SPEC §3). On a private Docker network a healthy connect takes well under a millisecond, so a
# short connect timeout turns "loading" or "down" into a fast JSON 503 instead of a hanging client.
UPSTREAM_CONNECT_TIMEOUT_SECONDS = 2
HEALTH_READ_TIMEOUT_SECONDS = 5
UPSTREAM_MAX_FAILS = 2
UPSTREAM_FAIL_TIMEOUT_SECONDS = 30
"""A replica in rotation that refuses connections twice within 30 s is skipped for 30 s (A100
seed §6.2): the safety net for a crash between two probes. A roll never waits for it: the rotation
takes a replica out before it is replaced (components/docker/rotation.py)."""
NEXT_UPSTREAM_TRIES = 3
"""A request refused before an answer began is tried on at most this many replicas."""
NO_REPLICA_PLACEHOLDER = "127.0.0.1:9"
"""The ``down`` server that keeps ``upstream vllm`` valid while no replica is in rotation."""
WORKER_PROCESSES = 4
"""LLM traffic is a few hundred long-lived streams; ``auto`` would start one worker per host core."""
OLD_WORKER_GRACE_SECONDS = 900
"""``worker_shutdown_timeout``: after a reload, requests already in flight (a removed key's streams
included) may run this long on the old workers; longer ones are closed then."""
REPLICA_GROUP_PREFIX = "glm_replica_"
"""Prefix affinity: the upstream of replica ``NAME`` is ``glm_replica_NAME`` (meter_route.lua's PREFIX)."""
REPLICA_GROUP_KEEPALIVE = 16
"""Idle connections each replica's own upstream keeps (``glm:front.keepalive`` is the shared one's)."""
ROUTES_CONF = "routes.conf"
ROUTES_MAP = "routes.map"
"""What the rotation writes for prefix affinity: each replica's upstream, and the names in rotation."""
_UPSTREAM = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")


def upstream_server(
    address: str,
    *,
    max_fails: int | None = None,
    fail_timeout_seconds: int | None = None,
    down: bool = False,
    backup: bool = False,
) -> str:
    """One ``server`` line of ``upstream vllm``, from every renderer: nginx.conf's inline replicas,
    the rotation's file (templates/rotation.sh: ``address`` is the shell's ``$(cat "$f")``) and the
    Kubernetes front's Service (components/kubernetes/front.py).

    >>> upstream_server("10.0.0.2:8000", max_fails=0)
    'server 10.0.0.2:8000 max_fails=0;'
    >>> upstream_server(NO_REPLICA_PLACEHOLDER, down=True)
    'server 127.0.0.1:9 down;'
    """
    parameters = [f"max_fails={max_fails}"] if max_fails is not None else []
    parameters += [f"fail_timeout={fail_timeout_seconds}s"] if fail_timeout_seconds is not None else []
    parameters += ["down"] if down else []
    parameters += ["backup"] if backup else []
    return " ".join(["server", address, *parameters]) + ";"


def replica_server(address: str, *, backup: bool = False) -> str:
    """A replica in rotation, skipped for a while after it fails (``UPSTREAM_MAX_FAILS``).

    >>> replica_server("10.0.0.2:8000")
    'server 10.0.0.2:8000 max_fails=2 fail_timeout=30s;'
    """
    return upstream_server(
        address,
        max_fails=UPSTREAM_MAX_FAILS,
        fail_timeout_seconds=UPSTREAM_FAIL_TIMEOUT_SECONDS,
        backup=backup,
    )


def replica_group(name: str, address: str, backups: Sequence[str]) -> list[str]:
    """Prefix affinity: the upstream the meter names for replica ``name``: its own server, and the
    other replicas in rotation as backups, so a connect it refuses still goes on to one of them
    (``proxy_next_upstream``). Lines of nginx.conf, or of rotation.sh (the addresses are then the
    shell's ``$(cat ...)``; ``backups`` one line to repeat).

    >>> replica_group("box1", "10.0.0.2:8000", ["10.0.0.3:8000"])  # doctest: +NORMALIZE_WHITESPACE
    ['upstream glm_replica_box1 {', '    server 10.0.0.2:8000 max_fails=2 fail_timeout=30s;',
     '    server 10.0.0.3:8000 max_fails=2 fail_timeout=30s backup;', '    keepalive 16;',
     '    keepalive_timeout 4s;', '}']
    """
    return [
        f"upstream {REPLICA_GROUP_PREFIX}{name} {{",
        f"    {replica_server(address)}",
        *(f"    {replica_server(other, backup=True)}" for other in backups),
        f"    keepalive {REPLICA_GROUP_KEEPALIVE};",
        f"    keepalive_timeout {UPSTREAM_KEEPALIVE_TIMEOUT_SECONDS}s;",
        "}",
    ]


def _replica_groups(upstream: Sequence[str] | None, rotation_dir: str) -> str:
    """Prefix affinity's part of the http block: the replicas' own upstreams and the names of those in
    rotation (``$glm_routes``), from the rotation's files, or ``upstream`` inline (named ``replica1``...)."""
    if upstream is None:
        names, groups = "", f"    include {rotation_dir}/{ROUTES_CONF[:-1]}[{ROUTES_CONF[-1]}];"
        listed = f"\n        include {rotation_dir}/{ROUTES_MAP[:-1]}[{ROUTES_MAP[-1]}];"
    else:
        named = {f"replica{i}": address for i, address in enumerate(upstream, 1)}
        names, listed = " ".join(named), ""
        lines = [
            line
            for name, address in named.items()
            for line in replica_group(name, address, [a for a in upstream if a != address])
        ]
        groups = "\n".join(f"    {line}" for line in lines)
    return (
        "    # Prefix affinity (components/host/meter/meter_route.lua): each replica in rotation has an\n"
        "    # upstream of its own, which the meter names for a request; $glm_routes lists them.\n"
        f'    map glm $glm_routes {{\n        default "{names}";{listed}\n    }}\n{groups}'
    )


def _upstream_servers(upstream: Sequence[str] | None, rotation_dir: str) -> str:
    """The ``upstream vllm`` block's servers: ``upstream`` inline (a one-file harness), or the
    rotation's file, which lists only replicas whose gate passed (components/docker/rotation.py)."""
    if upstream is None:
        # A bracket makes the name a pattern, which may match nothing: before the first admission
        # the placeholder alone keeps the block valid, and nginx answers the rotation's 503.
        placeholder = upstream_server(NO_REPLICA_PLACEHOLDER, down=True)
        return f"        {placeholder}\n        include {rotation_dir}/upstream.con[f];"
    for server in upstream:
        if not _UPSTREAM.fullmatch(server):
            raise ValueError(f"upstream {server!r} is not host:port")
    if len(upstream) == 1:
        return f"        {upstream_server(upstream[0])}"
    return "\n".join(f"        {replica_server(server)}" for server in upstream)


def _render(
    front: FrontConfig,
    upstream: Sequence[str] | None,
    *,
    api_key_entries: str,
    metrics_key_entries: str,
    tls_paths: tuple[str, str] | None,
    listen: str,
    runtime_dir: str,
    rotation_dir: str = ROTATION_DIR,
    guarded: bool = False,
    status_listen: str = str(STATUS_PORT),
    meter: MeterRoute | None = None,
    prometheus: str | None = None,
) -> str:
    """``prometheus`` (host:port): the front serves the status page from it (components/render/status_page.py).
    ``guarded``: replicas sit behind guards (several hosts): send the replica key and, with TLS,
    speak TLS to them, pinning the stack's replica certificate. A release (``upstream`` None) also
    serves the rotation's state on ``status_listen``. ``meter``: the usage meter runs in the inference
    routes (components/render/nginx_meter.py), its counters on ``status_listen`` too."""
    scheme = "https" if guarded and tls_paths is not None else "http"
    meter_rotation = rotation_dir if upstream is None else None
    routes, meter_http, meter_metrics = _inference_routes(front, meter, scheme, meter_rotation)
    zones, limits = rate_limit_lines(front)
    status_maps, status_routes = _status_page(prometheus)
    values = {
        "worker_processes": str(WORKER_PROCESSES),
        "worker_shutdown_timeout": str(OLD_WORKER_GRACE_SECONDS),
        "runtime_dir": runtime_dir,
        "log_format": access_log_format(),
        "api_keys": api_key_entries.rstrip("\n"),
        "metrics_keys": metrics_key_entries.rstrip("\n"),
        "rate_limit_zones": zones,
        "rate_limits": limits,
        "upstream_servers": _upstream_servers(upstream, rotation_dir),
        "replica_groups": _replica_groups(upstream, rotation_dir) if routes_by_prefix(front, meter) else "",
        "upstream_scheme": scheme,
        "proxy_settings": _proxy_settings(front, guarded),
        "load_modules": f"include {LUA_MODULES_INCLUDE};" if meter is not None else "",
        "meter_http": meter_http,
        "no_replica_reason": f"        include {rotation_dir}/reason.ma[p];" if upstream is None else "",
        "keepalive": str(front.keepalive),
        "upstream_keepalive_timeout": str(UPSTREAM_KEEPALIVE_TIMEOUT_SECONDS),
        "listen": f"{listen} ssl" if tls_paths is not None else listen,
        "ssl": render_server_tls(*tls_paths) if tls_paths is not None else "",
        "max_body_size": front.max_body_size,
        "health_read_timeout": str(HEALTH_READ_TIMEOUT_SECONDS),
        "routes": routes,
        "status_page_maps": status_maps,
        "status_page_routes": status_routes,
        "status_server": render_file(
            "nginx-status.conf",
            {"status_listen": status_listen, "status_file": STATUS_FILE, "meter_metrics": meter_metrics},
        )
        if upstream is None or meter is not None
        else "",
        **{f"error_{code}": body for code, body in error_bodies(front).items()},
    }
    return render_file("nginx.conf", values)


def _proxy_settings(front: FrontConfig, guarded: bool) -> str:
    """What each inference route proxies with: the upstream's credential, timeouts, retries."""
    # A request a replica refused or reset before answering (docker-proxy while it loads, a crash)
    # goes to the next one, POSTs included (no token was sent yet). Replicas out of rotation are
    # `down`: never tried.
    next_upstream = (
        "\n        proxy_next_upstream error timeout non_idempotent;"
        f"\n        proxy_next_upstream_tries {NEXT_UPSTREAM_TRIES};"
    )
    proxy = {
        "upstream_credential": f"        include {FRONT_SNIPPET};"
        if guarded
        else '        proxy_set_header Authorization "";',
        "upstream_connect_timeout": str(UPSTREAM_CONNECT_TIMEOUT_SECONDS),
        "next_upstream": next_upstream,
        "read_timeout": str(front.read_timeout_seconds),
        "send_timeout": str(front.send_timeout_seconds),
    }
    return render_file("nginx-proxy.conf", proxy).rstrip("\n")


def _inference_routes(
    front: FrontConfig, meter: MeterRoute | None, scheme: str, rotation_dir: str | None
) -> tuple[str, str, str]:
    """(inference locations, the meter's ``http`` lines, its metrics location), metered with ``meter``."""
    if meter is not None:
        parts = meter_conf(front, meter, routes=INFERENCE_ROUTES, scheme=scheme, rotation_dir=rotation_dir)
        return parts.routes, parts.http, parts.metrics
    # Exact locations: with a URI in proxy_pass, vLLM receives exactly the listed path (nginx
    # normalizes first, so /v1/chat/../models is /v1/models and `..` tricks reach nothing else).
    routes = "".join(
        render_file("nginx-route.conf", {"route": route, "scheme": scheme}) for route in INFERENCE_ROUTES
    )
    return routes, "", ""


def _status_page(prometheus: str | None) -> tuple[str, str]:
    """(maps, locations) of the status page over ``prometheus`` (host:port); none without it."""
    if prometheus is None:
        return "", ""
    if not _UPSTREAM.fullmatch(prometheus):
        raise ValueError(f"prometheus {prometheus!r} is not host:port")
    maps, routes = render_status_page(prometheus, DOCKER_DNS)
    return maps.rstrip("\n"), routes.rstrip("\n")


def _indented(entries: str) -> str:
    return "".join(f"        {line}\n" for line in entries.splitlines())


def render_release_conf(
    front: FrontConfig,
    tls: bool = False,
    *,
    listen: str = str(CONTAINER_PORT),
    runtime_dir: str = "/tmp",
    rotation_dir: str = ROTATION_DIR,
    guarded: bool = False,
    status_listen: str = str(STATUS_PORT),
    meter: MeterRoute | None = None,
    prometheus: str | None = None,
) -> str:
    """A release's ``nginx.conf``: no secret in it, the keys and TLS pair are files beside it, and
    no replica either: the rotation (components/docker/rotation.py) lists those that passed their gate."""
    return _render(
        front,
        None,
        api_key_entries=f"        include {API_KEYS_FILE};",
        metrics_key_entries=f"        include {METRICS_KEYS_FILE};",
        tls_paths=(TLS_CERT, TLS_KEY) if tls else None,
        listen=listen,
        runtime_dir=runtime_dir,
        rotation_dir=rotation_dir,
        guarded=guarded,
        status_listen=status_listen,
        meter=meter,
        prometheus=prometheus,
    )


def render_front_files(
    front: FrontConfig,
    api_keys: Mapping[str, str],
    metrics_keys: Mapping[str, str] | None = None,
    tls_pair: tuple[str, str] | None = None,
    *,
    listen: str = str(CONTAINER_PORT),
    runtime_dir: str = "/tmp",
    rotation_dir: str = ROTATION_DIR,
    replica_files: Mapping[str, str] | None = None,
    status_listen: str = str(STATUS_PORT),
    meter: MeterRoute | None = None,
    prometheus: str | None = None,
) -> dict[str, str]:
    """Every file of one front release, by name: what ``NginxReload`` delivers.

    ``nginx.conf`` holds no secret: it includes ``api-keys.map``/``metrics-keys.map`` and names
    ``tls.crt``/``tls.key`` by relative path, which nginx resolves against the conf's directory.
    ``tls_pair`` is (certificate PEM, key PEM) and turns TLS on.
    """
    metrics_keys = metrics_keys or {}
    check_keys(api_keys, metrics_keys)
    files = {
        CONF_FILE: render_release_conf(
            front,
            tls=tls_pair is not None,
            listen=listen,
            runtime_dir=runtime_dir,
            rotation_dir=rotation_dir,
            guarded=replica_files is not None,
            status_listen=status_listen,
            meter=meter,
            prometheus=prometheus,
        ),
        API_KEYS_FILE: render_key_map(api_keys),
        METRICS_KEYS_FILE: render_key_map(metrics_keys),
    }
    if tls_pair is not None:
        files[TLS_CERT], files[TLS_KEY] = tls_pair
    files.update(replica_files or {})
    return files


def render_nginx_conf(
    front: FrontConfig,
    upstream: str | Sequence[str],
    api_keys: Mapping[str, str],
    tls: bool = False,
    *,
    metrics_keys: Mapping[str, str] | None = None,
    listen: str = str(CONTAINER_PORT),
    runtime_dir: str = "/tmp",
    tls_dir: str = "/etc/nginx/tls",
    meter: MeterRoute | None = None,
    status_listen: str = str(STATUS_PORT),
    prometheus: str | None = None,
    rotation_dir: str | None = None,
) -> str:
    """The same config as one self-contained file, keys inline (what nginx sees once it has read
    the includes): for harnesses that run one ``nginx -c`` file, such as the gate's tests.

    ``upstream`` is vLLM's ``host:port`` (``vllm:8000``); ``tls_dir`` holds ``tls.crt``/``tls.key``;
    ``meter``: the usage meter in the inference routes, its counters on ``status_listen``;
    ``rotation_dir``: the replicas are the rotation's there (templates/rotation.sh), not ``upstream``.
    """
    metrics_keys = metrics_keys or {}
    check_keys(api_keys, metrics_keys)
    listed = [upstream] if isinstance(upstream, str) else list(upstream)
    return _render(
        front,
        listed if rotation_dir is None else None,
        api_key_entries=_indented(render_key_map(api_keys)),
        metrics_key_entries=_indented(render_key_map(metrics_keys)),
        tls_paths=(f"{tls_dir}/{TLS_CERT}", f"{tls_dir}/{TLS_KEY}") if tls else None,
        listen=listen,
        runtime_dir=runtime_dir,
        meter=meter,
        status_listen=status_listen,
        prometheus=prometheus,
        rotation_dir=rotation_dir or ROTATION_DIR,
    )
