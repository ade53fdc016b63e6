"""How the front meets its clients: which paths it serves, who may call (the key maps), how often
(the rate limits), over what (TLS), what it answers when it refuses (OpenAI-shaped errors), and
what it logs of each request. Pure pieces of ``nginx.conf``, which components/render/nginx_conf.py
puts together; the replica guards (components/docker/replica_guard.py) take the key map and the TLS
lines too, their client being the front.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from components.config import ConfigError, FrontConfig, check_api_keys, check_metrics_keys
from components.render.openai_errors import openai_error
from components.template import render_file

INFERENCE_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/responses")
"""The only paths the front forwards (exact matches). vLLM also serves LoRA loading, scoring,
tokenizing, dev and profiler routes, some of them without its own key check (SPEC §6)."""


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


def check_keys(api_keys: Mapping[str, str], metrics_keys: Mapping[str, str]) -> None:
    """Checked at config load too; a render never writes a key nginx.conf cannot hold."""
    problems = check_api_keys(api_keys) + check_metrics_keys(metrics_keys, api_keys)
    if problems:
        raise ConfigError("\n".join(problems))


def rate_limit_lines(front: FrontConfig) -> tuple[str, str]:
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


def render_server_tls(certificate: str, key: str) -> str:
    """The ``server`` block's TLS lines, the front's and the guards' alike: TLS 1.2+ with
    ``TLS12_CIPHERS`` only and no session tickets (forward secrecy for resumed sessions too)."""
    values = {"certificate": certificate, "key": key, "ciphers": TLS12_CIPHERS}
    return render_file("nginx-ssl.conf", values).rstrip("\n")


def error_bodies(front: FrontConfig) -> dict[str, str]:
    """The JSON body of each answer nginx gives a client itself, by the name nginx.conf's
    ``error_<name>`` placeholders use: OpenAI's error shape, each naming the limit or the fix."""
    rate = front.rate_limit
    return {
        "invalid_api_key": openai_error(
            "Invalid or missing API key. Send the header `Authorization: Bearer <your key>`.",
            "invalid_api_key",
        ),
        # /metrics, /version and the status page's queries: an inference key holder is told which
        # key they need, and how to make one (no `$` or quote: the body is one nginx string).
        "invalid_metrics_key": openai_error(
            "Invalid or missing metrics key: /metrics, /version and the status page (/status/) take a "
            "metrics key (glm:metricsKeys), not an inference key (glm:apiKeys). Send the header "
            "`Authorization: Bearer <metrics key>`. The local stack makes one: `scripts/status_page.sh url` "
            "prints the page with it. Another stack adds one with `scripts/pulumi.sh config set --secret "
            "--path glm:metricsKeys.<name> -s <stack>` (it asks for the key: e.g. the output of "
            "`openssl rand -hex 24`), then `make up STACK=<stack>` (docs/front-and-alerts.md).",
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


def access_log_format() -> str:
    """``log_format``'s JSON: :data:`_ACCESS_LOG_FIELDS`, the numbers unquoted."""
    log_format = json.dumps(_ACCESS_LOG_FIELDS, separators=(",", ":"))
    for numeric in ("status", "request_length", "bytes_sent", "request_time"):
        log_format = log_format.replace(f'"${numeric}"', f"${numeric}")
    return log_format
