"""The replica guard's files: the nginx in front of every replica that is not the front's own
(a Docker host's ``ReplicaGuard``, components/docker/replica_guard.py) and beside vLLM in every serving
pod (``PodGuard``, components/kubernetes/guard.py), and the front's side of it.

The guard forwards to vLLM only requests that carry one of the stack's two guard keys, each on its
own routes: the replica key (the front's, and the semantic probe's for asking a replica directly) on
the front's inference routes and on ``/metrics``, ``/version``, ``/health``; the scrape key
(Prometheus', and the probe's ``/metrics`` reads) on those three read-only routes only (issue 33,
finding 3). With ``glm:front.tls`` it serves the stack's replica certificate
(components/serving/replica_credentials.py) under :data:`TLS_NAME`, which the front pins.

``render_guard_files`` is what the tests run through the real ``nginx``; ``render_front_snippet``
is what the front includes to talk to guarded replicas.
"""

from __future__ import annotations

import json

from components.config import ConfigError, FrontConfig, check_api_keys
from components.render.nginx_clients import INFERENCE_ROUTES, render_key_map, render_server_tls
from components.render.nginx_conf import (
    CONF_FILE,
    FRONT_SNIPPET,
    FRONT_TRUST,
    HEALTH_READ_TIMEOUT_SECONDS,
    OLD_WORKER_GRACE_SECONDS,
    TLS_CERT,
    TLS_KEY,
    UPSTREAM_CONNECT_TIMEOUT_SECONDS,
    UPSTREAM_KEEPALIVE_TIMEOUT_SECONDS,
)
from components.render.openai_errors import openai_error
from components.template import render_file

TLS_NAME = "glm-replica-guard.invalid"
"""The name the front verifies (``proxy_ssl_name``): one name for every replica, in the certificate
beside the replica addresses. ``.invalid`` never resolves (RFC 6761), so it names nothing else."""
CONTAINER_PORT = 8080
"""Port the guard listens on inside its container; the host port is ``serving.port``."""
KEY_FILE = "replica-key.map"
SCRAPE_KEY_FILE = "scrape-key.map"
SECRET_FILES = (KEY_FILE, SCRAPE_KEY_FILE, TLS_CERT, TLS_KEY)
KEY_PREFIX = "sk-replica-"
SCRAPE_KEY_PREFIX = "sk-scrape-"
CLIENT = "front"
"""The replica key's name in the guard's key map: the front's key (the probe asks replicas with it too)."""
SCRAPER = "scrape"
"""The scrape key's name: Prometheus' and the probe's ``/metrics`` reads, never inference."""
GUARD_ROUTES = (*INFERENCE_ROUTES, "/metrics", "/version", "/health")
READ_ONLY_ROUTES = ("/metrics", "/version", "/health")
WORKER_PROCESSES = 2

_LOG_FIELDS = {
    "time": "$time_iso8601",
    "remote_addr": "$remote_addr",
    # The front's X-Request-Id passes through: one id across the front's and the guard's logs.
    "request_id": "$http_x_request_id",
    "method": "$request_method",
    "uri": "$uri",
    "status": "$status",
    "bytes_sent": "$bytes_sent",
    "request_time": "$request_time",
    "upstream_status": "$upstream_status",
    "upstream_response_time": "$upstream_response_time",
}


def _check_key(key: str, name: str = CLIENT) -> None:
    problems = check_api_keys({name: key})
    if problems:
        raise ConfigError(f"the guards' {name} key: " + "\n".join(problems))


def _errors(front: FrontConfig) -> dict[str, str]:
    return {
        "invalid_replica_key": openai_error(
            "Invalid or missing replica key: this port answers only the front of its own stack.",
            "invalid_api_key",
        ),
        "not_found": openai_error(
            "Not found. This replica serves only " + ", ".join(GUARD_ROUTES) + ".", "not_found"
        ),
        "method_not_allowed": openai_error("Only GET is allowed here.", "method_not_allowed"),
        "request_too_large": openai_error(
            f"Request body is larger than the {front.max_body_size} this endpoint accepts.",
            "request_too_large",
        ),
        "query_string_not_allowed": openai_error(
            "Query strings are not accepted.", "query_string_not_allowed"
        ),
        "bad_request": openai_error("Bad request.", "bad_request"),
    }


def render_guard_conf(
    front: FrontConfig,
    upstream: str,
    tls: bool = False,
    *,
    listen: str = str(CONTAINER_PORT),
    runtime_dir: str = "/tmp",
    verdict_file: str | None = None,
) -> str:
    """The guard's ``nginx.conf``, no secret in it: ``upstream`` is vLLM's ``address:port``.
    ``verdict_file``: while it exists the inference routes answer nothing (a Kubernetes pod's
    failed readiness check: components/kubernetes/readiness.py)."""
    log_format = json.dumps(_LOG_FIELDS, separators=(",", ":"))
    for numeric in ("status", "bytes_sent", "request_time"):
        log_format = log_format.replace(f'"${numeric}"', f"${numeric}")
    read_only = render_file("guard-read-only.conf", {"health_read_timeout": str(HEALTH_READ_TIMEOUT_SECONDS)})
    inference = render_file("guard-inference.conf", {"client": CLIENT})
    if verdict_file is not None:
        inference += render_file("guard-verdict.conf", {"verdict_file": verdict_file})
    routes = "".join(
        render_file(
            "guard-route.conf",
            {"route": r, "access": (read_only if r in READ_ONLY_ROUTES else inference).rstrip("\n")},
        )
        for r in GUARD_ROUTES
    )
    values = {
        "worker_processes": str(WORKER_PROCESSES),
        "runtime_dir": runtime_dir,
        "worker_shutdown_timeout": str(OLD_WORKER_GRACE_SECONDS),
        "log_format": log_format,
        "replica_key": f"        include {KEY_FILE};\n        include {SCRAPE_KEY_FILE};",
        "upstream": upstream,
        "keepalive": str(front.keepalive),
        "upstream_keepalive_timeout": str(UPSTREAM_KEEPALIVE_TIMEOUT_SECONDS),
        "listen": f"{listen} ssl" if tls else listen,
        "ssl": render_server_tls(TLS_CERT, TLS_KEY) if tls else "",
        "max_body_size": front.max_body_size,
        "upstream_connect_timeout": str(UPSTREAM_CONNECT_TIMEOUT_SECONDS),
        "read_timeout": str(front.read_timeout_seconds),
        "send_timeout": str(front.send_timeout_seconds),
        "routes": routes,
        **{f"error_{code}": body for code, body in _errors(front).items()},
    }
    return render_file("replica-guard.conf", values)


def render_guard_files(
    front: FrontConfig,
    upstream: str,
    key: str,
    scrape_key: str,
    tls_pair: tuple[str, str] | None = None,
    *,
    listen: str = str(CONTAINER_PORT),
    runtime_dir: str = "/tmp",
    verdict_file: str | None = None,
) -> dict[str, str]:
    """Every file of one guard release by name: ``nginx.conf``, ``replica-key.map`` (``key``),
    ``scrape-key.map`` (``scrape_key``) and, with ``tls_pair`` (certificate PEM, key PEM),
    ``tls.crt``/``tls.key``."""
    _check_key(key)
    _check_key(scrape_key, SCRAPER)
    if key == scrape_key:
        raise ConfigError("the guards' replica key and scrape key are one key: a scraper could run inference")
    files = {
        CONF_FILE: render_guard_conf(
            front,
            upstream,
            tls_pair is not None,
            listen=listen,
            runtime_dir=runtime_dir,
            verdict_file=verdict_file,
        ),
        KEY_FILE: render_key_map({CLIENT: key}),
        SCRAPE_KEY_FILE: render_key_map({SCRAPER: scrape_key}),
    }
    if tls_pair is not None:
        files[TLS_CERT], files[TLS_KEY] = tls_pair
    return files


def render_front_snippet(key: str, certificate: str | None = None) -> dict[str, str]:
    """The front's files for guarded replicas: ``replica-guard-auth.conf`` (include it in the
    ``server`` block in place of ``proxy_set_header Authorization "";``) and, with TLS, the pinned
    certificate ``replica-guard-ca.crt`` it names. With TLS the front's ``proxy_pass`` is ``https://``."""
    _check_key(key)
    lines = [
        # A resource input: the text as it was before the move (a changed comment re-delivers every front).
        "# Rendered by components/render/replica_guard.py: the front's credential for its replicas' guards.",
        f'proxy_set_header Authorization "Bearer {key}";',
    ]
    files = {}
    if certificate is not None:
        lines += [
            "proxy_ssl_verify on;",
            "proxy_ssl_verify_depth 1;",
            f"proxy_ssl_trusted_certificate {FRONT_TRUST};",
            f"proxy_ssl_name {TLS_NAME};",
            "proxy_ssl_protocols TLSv1.2 TLSv1.3;",
            "proxy_ssl_session_reuse on;",
        ]
        files[FRONT_TRUST] = certificate
    return {FRONT_SNIPPET: "\n".join(lines) + "\n", **files}
