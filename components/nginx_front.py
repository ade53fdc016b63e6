"""The Nginx front: the stack's one published port.

vLLM listens only on the private Docker network; this container is the only thing clients reach.
It checks API keys, streams SSE unbuffered, bounds request bodies and (optionally) per-key rates,
answers in OpenAI's error shape, and exposes nothing of vLLM but ``/v1/`` (plus ``/healthz``).
The A100 seed's vLLM port was scanned within a day of being left open (SPEC §2, cross-cutting).

``render_nginx_conf`` is pure and is what the tests run through the real ``nginx``; ``NginxFront``
only wires it into Docker resources.
"""

from __future__ import annotations

import json
import re

import pulumi
import pulumi_docker as docker

from components.config import ConfigError, FrontConfig, StackConfig, check_api_keys
from components.vllm_server import upstream_hosts

CONTAINER_PORT = 8080
"""Port Nginx listens on inside its container; the host port is ``glm:front.port``."""
CONF_PATH = "/etc/nginx/nginx.conf"
TLS_DIR = "/etc/nginx/tls"
"""Where the certificate (``tls.crt``) and key (``tls.key``) are uploaded in the container."""

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
"""Several replicas (A100 seed §6.2): one that fails twice within 30 s is left out for 30 s."""
WORKER_PROCESSES = 4
"""LLM traffic is a few hundred long-lived streams; ``auto`` would start one worker per host core."""
INFERENCE_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/responses")
"""The only paths the front forwards (exact matches). vLLM also serves LoRA loading, scoring,
tokenizing, dev and profiler routes, some of them without its own key check (SPEC §6)."""

_UPSTREAM = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")

_ACCESS_LOG_FIELDS = {
    "time": "$time_iso8601",
    "client": "$api_client",
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


def render_nginx_conf(
    front: FrontConfig,
    upstream: str | list[str],
    api_keys: dict[str, str],
    tls: bool = False,
    *,
    listen: str = str(CONTAINER_PORT),
    runtime_dir: str = "/tmp",
    tls_dir: str = TLS_DIR,
) -> str:
    """The whole ``nginx.conf`` of the front (valid on nginx 1.22 and newer).

    ``upstream`` is vLLM's ``host:port`` on the private network (``vllm:8000``), or a list of
    several replicas' (balanced, A100 seed §6.2); ``api_keys`` maps
    client names to keys. ``listen``, ``runtime_dir`` (pid and temp files) and ``tls_dir`` keep
    their container defaults in production; tests point them at loopback and a temp dir.
    """
    problems = check_api_keys(api_keys)  # checked at load too; render never writes a bad key
    if problems:
        raise ConfigError("\n".join(problems))
    upstreams = [upstream] if isinstance(upstream, str) else list(upstream)
    for server in upstreams:
        if not _UPSTREAM.fullmatch(server):
            raise ValueError(f"upstream {server!r} is not host:port")
    servers = f"        server {upstream};" if isinstance(upstream, str) else _servers(upstreams)
    # Several replicas: a request a replica refused or reset before answering (stopping, or
    # docker-proxy while it loads) goes to the next one, POSTs included (no token was sent yet).
    next_upstream = (
        ""
        if isinstance(upstream, str)
        else "\n        proxy_next_upstream error timeout non_idempotent;"
        f"\n        proxy_next_upstream_tries {len(upstreams)};"
    )
    rate = front.rate_limit
    q = "'"  # nginx single quotes around JSON bodies

    key_map = "\n".join(f'        "{_key_regex(api_keys[name])}" "{name}";' for name in sorted(api_keys))
    log_format = json.dumps(_ACCESS_LOG_FIELDS, separators=(",", ":")).replace('"$status"', "$status")
    for numeric in ("request_length", "bytes_sent", "request_time"):
        log_format = log_format.replace(f'"${numeric}"', f"${numeric}")
    temp_paths = "\n".join(
        f"    {kind}_temp_path {runtime_dir}/nginx-{kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )

    rate_zone = rate_limit = ""
    if rate.enabled:
        # Keyed on the client name, so one key's burst cannot starve another. Requests without a
        # key have an empty name, are not counted, and are refused with 401 before this phase.
        rate_zone = (
            f"\n    limit_req_zone $api_client zone=per_api_key:10m rate={rate.requests_per_second}r/s;\n"
        )
        rate_limit = (
            f"\n            limit_req zone=per_api_key burst={rate.burst} nodelay;"
            "\n            limit_req_status 429;"
        )

    ssl = ""
    if tls:
        ssl = f"""
        ssl_certificate {tls_dir}/tls.crt;
        ssl_certificate_key {tls_dir}/tls.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_prefer_server_ciphers off;
        ssl_session_cache shared:tls:10m;
        ssl_session_timeout 1d;
"""

    errors = {
        "invalid_api_key": openai_error(
            "Invalid or missing API key. Send the header `Authorization: Bearer <your key>`.",
            "invalid_api_key",
        ),
        "request_too_large": openai_error(
            f"Request body is larger than the {front.max_body_size} this endpoint accepts.",
            "request_too_large",
        ),
        "rate_limited": openai_error(
            f"Rate limit exceeded for this API key ({rate.requests_per_second} requests/s, "
            f"burst {rate.burst}). Retry shortly.",
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
    }

    # Exact locations: with a URI in proxy_pass, vLLM receives exactly the listed path (nginx
    # normalizes first, so /v1/chat/../models is /v1/models and `..` tricks reach nothing else).
    routes = "\n".join(
        f"""        location = {route} {{
            if ($api_client = "") {{
                return 401;
            }}{rate_limit}
            proxy_pass http://vllm{route};
        }}
"""
        for route in INFERENCE_ROUTES
    )

    return f"""# Rendered by components/nginx_front.py from the stack config; edit the stack, not this file.
worker_processes {WORKER_PROCESSES};
pid {runtime_dir}/nginx.pid;
error_log /dev/stderr warn;

events {{
    worker_connections 4096;
}}

http {{
    server_tokens off;
    default_type application/json;
{temp_paths}

    log_format glm_json escape=json {q}{log_format}{q};
    access_log /dev/stdout glm_json;

    # API key -> client name (sorted by name). Anything else maps to "" and is refused with 401.
    map $http_authorization $api_client {{
        default "";
{key_map}
    }}
{rate_zone}
    upstream vllm {{
{servers}
        keepalive {front.keepalive};
        keepalive_timeout {UPSTREAM_KEEPALIVE_TIMEOUT_SECONDS}s;
    }}

    server {{
        listen {listen}{" ssl" if tls else ""};
{ssl}
        client_max_body_size {front.max_body_size};

        # The error log writes the request line, query string included (the access log writes $uri):
        # refuse queries here, before a 413, a rate limit or an upstream error could log one.
        if ($args != "") {{
            return 400 {q}{errors["query_string_not_allowed"]}{q};
        }}

        error_page 400 = @bad_request;
        error_page 401 = @invalid_api_key;
        error_page 413 = @request_too_large;
        error_page 429 = @rate_limited;
        error_page 502 503 = @upstream_unavailable;
        error_page 504 = @upstream_timeout;

        # Streaming: HTTP/1.1 keep-alive to vLLM, and every SSE chunk forwarded as it arrives.
        proxy_http_version 1.1;
        proxy_buffering off;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_set_header X-Request-Id $request_id;
        # The key stops here: vLLM runs without --api-key on the private network, so passing it on
        # would only spread the secret to another process and its logs.
        proxy_set_header Authorization "";
        proxy_connect_timeout {UPSTREAM_CONNECT_TIMEOUT_SECONDS}s;{next_upstream}
        proxy_read_timeout {front.read_timeout_seconds}s;
        proxy_send_timeout {front.send_timeout_seconds}s;

{routes}
        # Any other /v1 path: 401 without a key (as for every /v1 route), else the JSON 404.
        location /v1/ {{
            if ($api_client = "") {{
                return 401;
            }}
            return 404 {q}{errors["not_found"]}{q};
        }}

        location = /healthz {{
            access_log off;
            proxy_read_timeout {HEALTH_READ_TIMEOUT_SECONDS}s;
            proxy_intercept_errors on;
            proxy_pass http://vllm/health;
        }}

        # /metrics, /tokenize, /detokenize, /version, /health, /ping, ...: not through the front.
        location / {{
            return 404 {q}{errors["not_found"]}{q};
        }}

        # Without this, nginx answers /v1 with an HTML redirect to /v1/.
        location = /v1 {{
            return 404 {q}{errors["not_found"]}{q};
        }}

        location @bad_request {{
            return 400 {q}{errors["bad_request"]}{q};
        }}

        location @invalid_api_key {{
            add_header WWW-Authenticate 'Bearer realm="glm"' always;
            return 401 {q}{errors["invalid_api_key"]}{q};
        }}

        location @request_too_large {{
            return 413 {q}{errors["request_too_large"]}{q};
        }}

        location @rate_limited {{
            add_header Retry-After 1 always;
            return 429 {q}{errors["rate_limited"]}{q};
        }}

        location @upstream_unavailable {{
            add_header Retry-After 10 always;
            return 503 {q}{errors["upstream_unavailable"]}{q};
        }}

        location @upstream_timeout {{
            return 504 {q}{errors["upstream_timeout"]}{q};
        }}
    }}
}}
"""


def _servers(upstreams: list[str]) -> str:
    return "\n".join(
        f"        server {server} max_fails={UPSTREAM_MAX_FAILS} fail_timeout={UPSTREAM_FAIL_TIMEOUT_SECONDS}s;"
        for server in upstreams
    )


def public_url(config: StackConfig, public_host: str | None = None) -> str:
    """The OpenAI base URL of the front: ``http(s)://<host>:<front.port>/v1``.

    Without ``public_host``: the bind address, or for a wildcard bind the target host's address
    (``localhost`` for the local Docker engine).
    """
    front = config.front
    host = public_host
    if host is None:
        if front.bind_address not in ("0.0.0.0", "::", ""):
            host = front.bind_address
        elif config.target.host.is_local:
            host = "localhost"
        else:
            host = config.target.host.ssh_address
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{'https' if front.tls else 'http'}://{host}:{front.port}/v1"


class NginxFront(pulumi.ComponentResource):
    """Nginx in front of vLLM: the only published port of the stack."""

    url: pulumi.Output[str]
    """The OpenAI base URL clients use (``.../v1``)."""
    container_name: pulumi.Output[str]
    """Docker name of the front container."""

    def __init__(
        self,
        name: str,
        config: StackConfig,
        network_name: pulumi.Input[str],
        upstream: str | list[str],
        api_keys: pulumi.Output[dict[str, str]],
        tls_files: tuple[pulumi.Output[str], pulumi.Output[str]] | None,
        opts: pulumi.ResourceOptions | None = None,
        *,
        public_host: str | None = None,
    ) -> None:
        """``tls_files`` is (certificate PEM, key PEM); config loading refuses ``glm:front.tls``
        without them.

        Nginx resolves ``upstream`` once, at start; vLLM keeps a fixed address on the private
        network (``glm:container.networkSubnet``), so a replaced vLLM does not strand the front.
        """
        super().__init__("glm:front:NginxFront", name, None, opts)
        front = config.front
        child = pulumi.ResourceOptions(parent=self)

        image = docker.RemoteImage(f"{name}-image", name=front.image, keep_locally=True, opts=child)

        # Built from the secret keys with apply, so the rendered file is a secret too; secret()
        # makes that explicit (and holds even if a caller passes plain keys).
        rendered: pulumi.Output[str] = pulumi.Output.from_input(api_keys).apply(
            lambda keys: render_nginx_conf(front, upstream, dict(keys), tls=front.tls)
        )
        conf: pulumi.Output[str] = pulumi.Output.secret(rendered)
        # 0600: nginx's master (root) reads the file; the workers and anything else in the
        # container have no business reading the keys.
        uploads = [docker.ContainerUploadArgs(file=CONF_PATH, content=conf, permissions="0600")]
        if front.tls and tls_files is not None:
            cert, key = tls_files
            uploads += [
                docker.ContainerUploadArgs(file=f"{TLS_DIR}/tls.crt", content=cert, permissions="0644"),
                docker.ContainerUploadArgs(
                    file=f"{TLS_DIR}/tls.key", content=pulumi.Output.secret(key), permissions="0600"
                ),
            ]

        # Read by the policy pack (front-tls-on-public-bind): TLS, or the stack's plain-HTTP opt-in.
        labels = [
            docker.ContainerLabelArgs(label="glm.role", value="front"),
            docker.ContainerLabelArgs(label="glm.tls", value="on" if front.tls else "off"),
        ]
        if front.allow_plain_http and not front.tls:
            labels.append(docker.ContainerLabelArgs(label="glm.plain-http", value="accepted"))

        container = docker.Container(
            f"{name}-nginx",
            name=f"{config.container.name}-nginx",
            image=image.image_id,
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=network_name)],
            ports=[
                docker.ContainerPortArgs(internal=CONTAINER_PORT, external=front.port, ip=front.bind_address)
            ],
            uploads=uploads,
            labels=labels,
            hosts=upstream_hosts(config),
            restart="unless-stopped",
            log_driver="json-file",
            log_opts=config.container.log_opts,
            # A fixed container name and host port cannot exist twice: remove the old one first.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )

        self.url = pulumi.Output.from_input(public_url(config, public_host))
        self.container_name = container.name
        self.register_outputs({"url": self.url, "container_name": self.container_name})
