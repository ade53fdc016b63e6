"""The Nginx front: the stack's one published port.

vLLM listens only on the private Docker network; this container is the only thing clients reach.
It checks API keys, streams SSE unbuffered, bounds request bodies, rates and requests in flight
(per key, and per client address for everything without an API key),
answers in OpenAI's error shape, and exposes nothing of vLLM but ``/v1/`` (plus ``/healthz``, and
``/metrics`` for metrics keys only). The A100 seed's vLLM port was scanned within a day of being
left open (SPEC §2, cross-cutting).

``render_front_files`` is pure (``nginx.conf`` from ``components/templates/nginx.conf``, plus the key
maps and TLS pair) and is what the tests run through the real ``nginx``. ``NginxFront`` wires it into
Docker: a container whose definition does not depend on the config, and an ``NginxReload`` that
delivers each config as files and reloads nginx gracefully (components/nginx_reload.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence

import pulumi
import pulumi_docker as docker

from components.config import (
    ConfigError,
    ContainerConfig,
    FrontConfig,
    HostConfig,
    check_api_keys,
    check_metrics_keys,
)
from components.nginx_reload import ROTATION_DIR, STATUS_DIR, NginxReload, secrets_digest
from components.target import exec_ssh
from components.template import render_file
from components.vllm_server import upstream_hosts

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
SECRET_FILES = (API_KEYS_FILE, METRICS_KEYS_FILE, TLS_CERT, TLS_KEY, FRONT_SNIPPET, FRONT_TRUST)

# vLLM binds its port while the weights load but refuses connections until the engine is up
# (SPEC §3). On a private Docker network a healthy connect takes well under a millisecond, so a
# short connect timeout turns "loading" or "down" into a fast JSON 503 instead of a hanging client.
UPSTREAM_CONNECT_TIMEOUT_SECONDS = 2
# vLLM's uvicorn drops idle keep-alive connections after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE). Nginx
# must give them up first, or it may send a POST on a socket uvicorn is closing and answer 502.
UPSTREAM_KEEPALIVE_TIMEOUT_SECONDS = 4
HEALTH_READ_TIMEOUT_SECONDS = 5
UPSTREAM_MAX_FAILS = 2
UPSTREAM_FAIL_TIMEOUT_SECONDS = 30
"""A replica in rotation that refuses connections twice within 30 s is skipped for 30 s (A100
seed §6.2): the safety net for a crash between two probes. A roll never waits for it: the rotation
takes a replica out before it is replaced (components/rotation.py)."""
NEXT_UPSTREAM_TRIES = 3
"""A request refused before an answer began is tried on at most this many replicas."""
NO_REPLICA_PLACEHOLDER = "127.0.0.1:9"
"""The ``down`` server that keeps ``upstream vllm`` valid while no replica is in rotation."""
WORKER_PROCESSES = 4
"""LLM traffic is a few hundred long-lived streams; ``auto`` would start one worker per host core."""
OLD_WORKER_GRACE_SECONDS = 900
"""``worker_shutdown_timeout``: after a reload, requests already in flight (a removed key's streams
included) may run this long on the old workers; longer ones are closed then."""
STOP_GRACE_SECONDS = 30
"""When the front container itself is replaced (image, port): SIGQUIT, then this long to drain."""
INFERENCE_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/responses")
"""The only paths the front forwards (exact matches). vLLM also serves LoRA loading, scoring,
tokenizing, dev and profiler routes, some of them without its own key check (SPEC §6)."""

_UPSTREAM = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")

_ACCESS_LOG_FIELDS = {
    "time": "$time_iso8601",
    "client": "$api_client$metrics_log_client",
    "remote_addr": "$remote_addr",
    "request_id": "$request_id",
    "method": "$request_method",
    "uri": "$uri",
    "status": "$status",
    "request_length": "$request_length",
    "bytes_sent": "$bytes_sent",
    "request_time": "$request_time",
    "upstream_addr": "$upstream_addr",
    "upstream_status": "$upstream_status",
    "upstream_connect_time": "$upstream_connect_time",
    "upstream_header_time": "$upstream_header_time",
    "upstream_response_time": "$upstream_response_time",
    "user_agent": "$http_user_agent",
}
"""One JSON object per request. ``$uri`` (not ``$request``) keeps query strings out; the key never
appears, only the client name it maps to."""


def openai_error(message: str, code: str, error_type: str = "invalid_request_error") -> str:
    """OpenAI's error body, compact, for an nginx ``return``.

    >>> openai_error("No.", "nope")
    '{"error":{"message":"No.","type":"invalid_request_error","param":null,"code":"nope"}}'
    """
    body = json.dumps(
        {"error": {"message": message, "type": error_type, "param": None, "code": code}},
        separators=(",", ":"),
        ensure_ascii=False,
    )
    # The body sits in a single-quoted nginx string, where `$` starts a variable.
    if any(ch in body for ch in "'\\$"):
        raise ValueError(f"error body cannot be written into nginx.conf: {body}")
    return body


def _key_regex(key: str) -> str:
    """A case-sensitive, anchored PCRE for ``Authorization: Bearer <key>``.

    Nginx ``map`` matches plain strings case-insensitively, which would accept ``SK-ABC`` for
    ``sk-abc``; a ``~`` regex is case-sensitive. Of the b64token characters only ``.`` and ``+``
    mean something in a regex; they become one-character classes (no backslashes in nginx.conf).
    """
    escaped = key.replace(".", "[.]").replace("+", "[+]")
    return f"~^Bearer {escaped}$"


def render_key_map(keys: Mapping[str, str]) -> str:
    r"""The ``map`` entries of ``api-keys.map`` / ``metrics-keys.map``, sorted by name.

    >>> render_key_map({"b": "sk-b", "a": "sk.a"})
    '"~^Bearer sk[.]a$" "a";\n"~^Bearer sk-b$" "b";\n'
    """
    return "".join(f'"{_key_regex(keys[name])}" "{name}";\n' for name in sorted(keys))


def _log_format() -> str:
    log_format = json.dumps(_ACCESS_LOG_FIELDS, separators=(",", ":"))
    for numeric in ("status", "request_length", "bytes_sent", "request_time"):
        log_format = log_format.replace(f'"${numeric}"', f"${numeric}")
    return log_format


def _errors(front: FrontConfig) -> dict[str, str]:
    rate = front.rate_limit
    return {
        "invalid_api_key": openai_error(
            "Invalid or missing API key. Send the header `Authorization: Bearer <your key>`.",
            "invalid_api_key",
        ),
        "method_not_allowed": openai_error("Only GET is allowed here.", "method_not_allowed"),
        "request_too_large": openai_error(
            f"Request body is larger than the {front.max_body_size} this endpoint accepts.",
            "request_too_large",
        ),
        "rate_limited": openai_error(
            f"Rate limit exceeded: {rate.requests_per_second} requests/s (burst {rate.burst}) and "
            f"{rate.connections_per_key} at once per API key; {rate.unauthenticated_requests_per_second} "
            f"requests/s and {rate.connections_per_address} at once per address without one. Retry shortly.",
            "rate_limit_exceeded",
            "requests",
        ),
        "upstream_unavailable": openai_error(
            "The model server is not reachable: it is starting (loading weights takes minutes) "
            "or down. Retry later.",
            "upstream_unavailable",
            "server_error",
        ),
        "upstream_timeout": openai_error(
            "The model server did not answer in time.", "upstream_timeout", "server_error"
        ),
        "not_found": openai_error(
            "Not found. This endpoint serves only " + ", ".join(INFERENCE_ROUTES) + ".",
            "not_found",
        ),
        "query_string_not_allowed": openai_error(
            "Query strings are not accepted: the OpenAI API takes its parameters in the JSON body.",
            "query_string_not_allowed",
        ),
        "bad_request": openai_error(
            "Bad request: malformed HTTP, or a header (such as Authorization) sent twice.", "bad_request"
        ),
        "header_too_large": openai_error("Request header or cookie too large.", "request_header_too_large"),
    }


TLS12_CIPHERS = ":".join(
    [
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    ]
)
"""Mozilla's "intermediate" TLS 1.2 suites (ssl-config.mozilla.org, guideline 5.7) less the DHE
ones, which need a dhparam file: forward secrecy and AEAD only, no SHA-1 or CBC suite. TLS 1.3's
suites are all modern and not set by ``ssl_ciphers``."""


def _upstream_servers(upstream: Sequence[str] | None, rotation_dir: str) -> str:
    """The ``upstream vllm`` block's servers: ``upstream`` inline (a one-file harness), or the
    rotation's file, which lists only replicas whose gate passed (components/rotation.py)."""
    if upstream is None:
        # A bracket makes the name a pattern, which may match nothing: before the first admission
        # the placeholder alone keeps the block valid, and nginx answers the rotation's 503.
        return (
            f"        server {NO_REPLICA_PLACEHOLDER} down;\n        include {rotation_dir}/upstream.con[f];"
        )
    for server in upstream:
        if not _UPSTREAM.fullmatch(server):
            raise ValueError(f"upstream {server!r} is not host:port")
    if len(upstream) == 1:
        return f"        server {upstream[0]};"
    return "\n".join(
        f"        server {server} max_fails={UPSTREAM_MAX_FAILS} fail_timeout={UPSTREAM_FAIL_TIMEOUT_SECONDS}s;"
        for server in upstream
    )


def _rate_limits(front: FrontConfig) -> tuple[str, str]:
    """The ``limit_*_zone`` lines (http) and the ``limit_*`` lines (server) of ``glm:front.rateLimit``.

    Set once for the whole server, so every location counts: keyed requests per client name (one
    key's burst cannot starve another), all others per client address (``$unauthenticated_address``
    is empty for a valid API key, and a zone skips an empty key).
    """
    rate = front.rate_limit
    if not rate.enabled:
        return "", ""
    zones = [
        f"limit_req_zone $api_client zone=per_api_key:10m rate={rate.requests_per_second}r/s;",
        "limit_req_zone $unauthenticated_address zone=per_address:10m "
        f"rate={rate.unauthenticated_requests_per_second}r/s;",
        "limit_conn_zone $api_client zone=connections_per_key:10m;",
        "limit_conn_zone $unauthenticated_address zone=connections_per_address:10m;",
    ]
    limits = [
        f"limit_req zone=per_api_key burst={rate.burst} nodelay;",
        f"limit_req zone=per_address burst={rate.unauthenticated_burst} nodelay;",
        "limit_req_status 429;",
        f"limit_conn connections_per_key {rate.connections_per_key};",
        f"limit_conn connections_per_address {rate.connections_per_address};",
        "limit_conn_status 429;",
    ]
    return "\n".join(f"    {z}" for z in zones), "\n".join(f"        {line}" for line in limits)


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
) -> str:
    """``guarded``: replicas sit behind guards (several hosts): send the replica key and, with TLS,
    speak TLS to them, pinning the stack's replica certificate. A release (``upstream`` None) also
    serves the rotation's state on ``status_listen``."""
    # A request a replica refused or reset before answering (docker-proxy while it loads, a crash)
    # goes to the next one, POSTs included (no token was sent yet). Replicas out of rotation are
    # `down`: never tried.
    next_upstream = (
        "\n        proxy_next_upstream error timeout non_idempotent;"
        f"\n        proxy_next_upstream_tries {NEXT_UPSTREAM_TRIES};"
    )
    zones, limits = _rate_limits(front)
    # Exact locations: with a URI in proxy_pass, vLLM receives exactly the listed path (nginx
    # normalizes first, so /v1/chat/../models is /v1/models and `..` tricks reach nothing else).
    scheme = "https" if guarded and tls_paths is not None else "http"
    routes = "".join(
        render_file("nginx-route.conf", {"route": route, "scheme": scheme}) for route in INFERENCE_ROUTES
    )
    ssl = ""
    if tls_paths is not None:
        ssl = render_file(
            "nginx-ssl.conf", {"certificate": tls_paths[0], "key": tls_paths[1], "ciphers": TLS12_CIPHERS}
        ).rstrip("\n")
    values = {
        "worker_processes": str(WORKER_PROCESSES),
        "worker_shutdown_timeout": str(OLD_WORKER_GRACE_SECONDS),
        "runtime_dir": runtime_dir,
        "log_format": _log_format(),
        "api_keys": api_key_entries.rstrip("\n"),
        "metrics_keys": metrics_key_entries.rstrip("\n"),
        "rate_limit_zones": zones,
        "rate_limits": limits,
        "upstream_servers": _upstream_servers(upstream, rotation_dir),
        "upstream_scheme": scheme,
        "upstream_credential": f"        include {FRONT_SNIPPET};"
        if guarded
        else '        proxy_set_header Authorization "";',
        "no_replica_reason": f"        include {rotation_dir}/reason.ma[p];" if upstream is None else "",
        "keepalive": str(front.keepalive),
        "upstream_keepalive_timeout": str(UPSTREAM_KEEPALIVE_TIMEOUT_SECONDS),
        "listen": f"{listen} ssl" if tls_paths is not None else listen,
        "ssl": ssl,
        "max_body_size": front.max_body_size,
        "upstream_connect_timeout": str(UPSTREAM_CONNECT_TIMEOUT_SECONDS),
        "next_upstream": next_upstream,
        "read_timeout": str(front.read_timeout_seconds),
        "send_timeout": str(front.send_timeout_seconds),
        "health_read_timeout": str(HEALTH_READ_TIMEOUT_SECONDS),
        "routes": routes,
        "status_server": render_file(
            "nginx-status.conf", {"status_listen": status_listen, "status_file": STATUS_FILE}
        )
        if upstream is None
        else "",
        **{f"error_{code}": body for code, body in _errors(front).items()},
    }
    return render_file("nginx.conf", values)


def _indented(entries: str) -> str:
    return "".join(f"        {line}\n" for line in entries.splitlines())


def _check_keys(api_keys: Mapping[str, str], metrics_keys: Mapping[str, str]) -> None:
    """Checked at config load too; a render never writes a key nginx.conf cannot hold."""
    problems = check_api_keys(api_keys) + check_metrics_keys(metrics_keys, api_keys)
    if problems:
        raise ConfigError("\n".join(problems))


def render_release_conf(
    front: FrontConfig,
    tls: bool = False,
    *,
    listen: str = str(CONTAINER_PORT),
    runtime_dir: str = "/tmp",
    rotation_dir: str = ROTATION_DIR,
    guarded: bool = False,
    status_listen: str = str(STATUS_PORT),
) -> str:
    """A release's ``nginx.conf``: no secret in it, the keys and TLS pair are files beside it, and
    no replica either: the rotation (components/rotation.py) lists those that passed their gate."""
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
) -> dict[str, str]:
    """Every file of one front release, by name: what ``NginxReload`` delivers.

    ``nginx.conf`` holds no secret: it includes ``api-keys.map``/``metrics-keys.map`` and names
    ``tls.crt``/``tls.key`` by relative path, which nginx resolves against the conf's directory.
    ``tls_pair`` is (certificate PEM, key PEM) and turns TLS on.
    """
    metrics_keys = metrics_keys or {}
    _check_keys(api_keys, metrics_keys)
    files = {
        CONF_FILE: render_release_conf(
            front,
            tls=tls_pair is not None,
            listen=listen,
            runtime_dir=runtime_dir,
            rotation_dir=rotation_dir,
            guarded=replica_files is not None,
            status_listen=status_listen,
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
) -> str:
    """The same config as one self-contained file, keys inline (what nginx sees once it has read
    the includes): for harnesses that run one ``nginx -c`` file, such as the gate's tests.

    ``upstream`` is vLLM's ``host:port`` (``vllm:8000``); ``tls_dir`` holds ``tls.crt``/``tls.key``.
    """
    metrics_keys = metrics_keys or {}
    _check_keys(api_keys, metrics_keys)
    return _render(
        front,
        [upstream] if isinstance(upstream, str) else list(upstream),
        api_key_entries=_indented(render_key_map(api_keys)),
        metrics_key_entries=_indented(render_key_map(metrics_keys)),
        tls_paths=(f"{tls_dir}/{TLS_CERT}", f"{tls_dir}/{TLS_KEY}") if tls else None,
        listen=listen,
        runtime_dir=runtime_dir,
    )


def front_container_name(container: ContainerConfig) -> str:
    """The front's Docker name, from the serving container's (``glm:container.name``)."""
    return f"{container.name}-nginx"


def public_base(front: FrontConfig, host: HostConfig) -> str:
    """``http(s)://<host>:<front.port>``: the bind address, or for a wildcard bind the address of
    ``host``, the one the front runs on (``localhost`` for the local Docker engine)."""
    if front.bind_address not in ("0.0.0.0", "::", ""):
        address = front.bind_address
    elif host.is_local:
        address = "localhost"
    else:
        address = host.ssh_address
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"{'https' if front.tls else 'http'}://{address}:{front.port}"


def public_url(front: FrontConfig, host: HostConfig) -> str:
    """The OpenAI base URL of the front: ``http(s)://<host>:<front.port>/v1``."""
    return f"{public_base(front, host)}/v1"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def front_fingerprint(
    nginx_conf: str, image: str, key_names: list[str], metrics_key_names: list[str], secrets: str
) -> str:
    """One hash of everything between a client and the model at the front, no secret value in it:
    the rendered nginx.conf, the image, the key names and the secret files' digest."""
    parts = {"conf": nginx_conf, "image": image, "keys": key_names, "metrics": metrics_key_names}
    return _sha256(json.dumps({**parts, "secrets": secrets}, sort_keys=True))


def _secret_files(
    front: FrontConfig,
    api_keys: pulumi.Output[dict[str, str]],
    metrics_keys: pulumi.Output[dict[str, str]],
    tls_files: tuple[pulumi.Output[str], pulumi.Output[str]] | None,
    replica_files: pulumi.Output[dict[str, str]] | None,
) -> pulumi.Output[dict[str, str]]:
    """The front's files that hold keys or TLS material, as one secret (delivered on stdin)."""
    tls_pair = pulumi.Output.all(*tls_files) if front.tls and tls_files is not None else None

    def secret_files(args: list[object]) -> dict[str, str]:
        keys, scrapers, guards, *pair = args
        files = render_front_files(
            front,
            dict(keys),  # type: ignore[call-overload]
            dict(scrapers),  # type: ignore[call-overload]
            (str(pair[0][0]), str(pair[0][1])) if pair else None,  # type: ignore[index]
            replica_files=dict(guards) if guards is not None else None,  # type: ignore[call-overload]
        )
        return {k: v for k, v in files.items() if k in SECRET_FILES}

    inputs: list[pulumi.Input[object]] = [api_keys, metrics_keys, replica_files]
    if tls_pair is not None:
        inputs.append(tls_pair)
    return pulumi.Output.secret(pulumi.Output.all(*inputs).apply(secret_files))


class NginxFront(pulumi.ComponentResource):
    """Nginx in front of vLLM: the only published port of the stack."""

    url: pulumi.Output[str]
    """The OpenAI base URL clients use (``.../v1``)."""
    metrics_url: pulumi.Output[str]
    """vLLM's ``/metrics`` through the front; answers only with a ``glm:metricsKeys`` bearer token."""
    container_name: pulumi.Output[str]
    """Docker name of the front container, resolved once its config is live."""
    hostname: str
    """The same name, known at preview: how containers on the private network reach the front."""
    container: docker.Container
    fingerprint: pulumi.Output[str]
    """Changes whenever the front's behaviour can: config, TLS material, image, key names (no values)."""

    def __init__(
        self,
        name: str,
        front: FrontConfig,
        host: HostConfig,
        container: ContainerConfig,
        network_name: pulumi.Input[str],
        api_keys: pulumi.Output[dict[str, str]],
        tls_files: tuple[pulumi.Output[str], pulumi.Output[str]] | None,
        opts: pulumi.ResourceOptions | None = None,
        *,
        metrics_keys: pulumi.Output[dict[str, str]] | None = None,
        replica_files: pulumi.Output[dict[str, str]] | None = None,
    ) -> None:
        """``host`` is the one the front runs on; ``container`` is the serving container's config,
        which names the front (``<name>-nginx``), its log rotation and how it reaches vLLM.
        ``tls_files`` is (certificate PEM, key PEM); config loading refuses ``glm:front.tls``
        without them.

        The front lists no replica in its config: each replica's gate puts it in the rotation
        (components/rotation.py) by its fixed address, so the front's config loads, and a key can be
        revoked, whether or not any engine is up.
        """
        super().__init__("glm:front:NginxFront", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        container_name = front_container_name(container)

        image = docker.RemoteImage(f"{name}-image", name=front.image, keep_locally=True, opts=child)

        # Read by the policy pack (front-tls-on-public-bind): TLS, or the stack's plain-HTTP opt-in.
        labels = [
            docker.ContainerLabelArgs(label="glm53.role", value="front"),
            docker.ContainerLabelArgs(label="glm53.tls", value="on" if front.tls else "off"),
        ]
        if front.allow_plain_http and not front.tls:
            labels.append(docker.ContainerLabelArgs(label="glm53.plain-http", value="accepted"))

        # Nothing here depends on keys, TLS material or nginx.conf: those changes reach nginx as a
        # reload (NginxReload below), never as a new container (every `uploads` change replaces one).
        # Imported here: rotation_requests reads the rotation script, whose module imports this one.
        from components.rotation_requests import FRONT_COMMAND, FRONT_REQUESTS_DIR, volume_name

        # The probe's only way into the front: eject/readmit requests (components/rotation_requests.py).
        requests = docker.Volume(f"{name}-rotation-requests", name=volume_name(container.name), opts=child)
        self.requests_volume = requests.name
        """The volume the semantic probe writes its eject/readmit requests to."""
        self.container = nginx = docker.Container(
            f"{name}-nginx",
            name=container_name,
            image=image.image_id,
            entrypoints=["/bin/sh", "-c"],
            # START_COMMAND (nginx as PID 1) with the request loop started before it.
            command=[FRONT_COMMAND],
            volumes=[
                docker.ContainerVolumeArgs(volume_name=requests.name, container_path=FRONT_REQUESTS_DIR)
            ],
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=network_name)],
            ports=[
                docker.ContainerPortArgs(internal=CONTAINER_PORT, external=front.port, ip=front.bind_address)
            ],
            labels=labels,
            hosts=upstream_hosts(container),
            restart="unless-stopped",
            log_driver="json-file",
            log_opts=container.log_opts,
            # docker stop sends the image's STOPSIGNAL (SIGQUIT: nginx's graceful shutdown).
            destroy_grace_seconds=STOP_GRACE_SECONDS,
            # A fixed container name and host port cannot exist twice: remove the old one first.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )

        nginx_conf = render_release_conf(front, tls=front.tls, guarded=replica_files is not None)
        # The names are config keys, not secrets: a reviewer sees which clients change.
        key_names = pulumi.Output.unsecret(pulumi.Output.from_input(api_keys).apply(sorted))
        metrics = pulumi.Output.from_input(metrics_keys if metrics_keys is not None else {})
        metrics_names = pulumi.Output.unsecret(metrics.apply(sorted))
        files = _secret_files(front, api_keys, metrics, tls_files, replica_files)
        # Hashes, not values: shown in the diff and fed to the gate, so they are safe in plain.
        digest = pulumi.Output.unsecret(files.apply(secrets_digest))
        cert_sha = (
            pulumi.Output.unsecret(tls_files[0].apply(_sha256))
            if front.tls and tls_files is not None
            else None
        )
        self.fingerprint = pulumi.Output.all(image.image_id, key_names, metrics_names, digest).apply(
            lambda args: front_fingerprint(nginx_conf, str(args[0]), args[1], args[2], str(args[3]))
        )
        ssh = exec_ssh(host)
        self.reload = NginxReload(
            f"{name}-config",
            {
                "docker_host": host.docker_host,
                "ssh": ssh,
                "container": nginx.name,
                # The releases live in the container (removed with it, keys included): a new
                # container (image, port) waits in START_COMMAND until this delivers them again.
                "container_id": nginx.id,
                "nginx_conf": nginx_conf,
                "api_key_names": key_names,
                "metrics_key_names": metrics_names,
                "tls_certificate_sha256": cert_sha,
                "secrets_digest": digest,
                "secret_files": files,
                "fingerprint": self.fingerprint,
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[nginx]),
        )

        self.url = pulumi.Output.from_input(public_url(front, host))
        self.metrics_url = pulumi.Output.from_input(f"{public_base(front, host)}/metrics")
        # Known at preview, so a config reload never shows as a change of what only needs the name.
        self.hostname = container_name
        # Outputs resolve once the new config is live, so dependents (the gate) see the new front.
        self.container_name = pulumi.Output.all(nginx.name, self.reload.release).apply(lambda a: str(a[0]))
        self.register_outputs(
            {
                "url": self.url,
                "metrics_url": self.metrics_url,
                "container_name": self.container_name,
                "fingerprint": self.fingerprint,
            }
        )
