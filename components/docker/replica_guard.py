"""ReplicaGuard: the only way into a replica on a host other than the front's.

Such a replica must be reachable from the front's host, so something listens on the host's private
address; vLLM itself checks no key (or, with ``--api-key``, only on ``/v1``; SPEC §6), and an open
vLLM port was scanned and used within a day (A100 seed §6.4). The guard is an nginx on the replica's
private Docker network that publishes ``publish_address:serving.port`` and forwards to vLLM's fixed
address only requests that carry one of the stack's two guard keys, each on its own routes:

- the replica key (the front's, and the semantic probe's for asking a replica directly) on the
  front's inference routes and on ``/metrics``, ``/version``, ``/health``, which the front proxies
  for its metrics keys;
- the scrape key (Prometheus', and the probe's for its ``/metrics`` reads) on those three read-only
  routes only: whoever reads Prometheus' files cannot run inference on a replica (issue 33,
  finding 3).

With ``glm:front.tls`` it serves TLS with a per-stack self-signed certificate that the front pins, so
keys and prompts never cross the network in clear.

``render_guard_files`` is pure and is what the tests run through the real ``nginx``;
``render_front_snippet`` is what the front includes to talk to guarded replicas. ``ReplicaGuard``
wires the files into Docker the way ``NginxFront`` does: a container whose definition does not
depend on the config, and an ``NginxReload`` that delivers each config with a graceful reload.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi.dynamic
import pulumi_docker as docker

from components.config import (
    ConfigError,
    ContainerConfig,
    FrontConfig,
    HostConfig,
    binds_all_interfaces,
    check_api_keys,
)
from components.docker.nginx_front import STOP_GRACE_SECONDS, front_fingerprint, shown_keys
from components.docker.nginx_reload import START_COMMAND, NginxReload, secrets_digest
from components.docker.replica_tls import TLS_NAME, ReplicaCertificate
from components.docker.target import exec_ssh
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
from components.secrets import GeneratedKey
from components.serving.spec import ServingSpec
from components.template import render_file

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
        "# Rendered by components/replica_guard.py: the front's credential for its replicas' guards.",
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


@dataclass(frozen=True)
class GuardCredentials:
    """What every guard of a stack accepts and serves, and what the front sends and trusts."""

    key: pulumi.Output[str]
    """The replica key (secret): ``Authorization: Bearer <key>`` on every route. The front sends
    it; the probe asks replicas directly with it."""
    scrape_key: pulumi.Output[str]
    """The scrape key (secret): ``/metrics``, ``/version``, ``/health`` only. Prometheus scrapes
    with it, the probe reads ``/metrics`` with it."""
    certificate: ReplicaCertificate | None
    """The TLS pair with ``glm:front.tls``; None without."""

    def front_files(self) -> pulumi.Output[dict[str, str]]:
        """:func:`render_front_snippet`'s files as one secret, for the front's ``secret_files``."""
        cert = self.certificate.certificate if self.certificate is not None else None
        files = pulumi.Output.all(self.key, cert).apply(lambda a: render_front_snippet(str(a[0]), a[1]))
        return pulumi.Output.secret(files)


def guard_credentials(
    name: str, addresses: Sequence[str], tls: bool, opts: pulumi.ResourceOptions | None = None
) -> GuardCredentials:
    """The stack's replica key, its scrape key and, with ``tls``, one certificate for every replica
    address."""
    key = GeneratedKey(f"{name}-replica-key", client_name="replica-guard", prefix=KEY_PREFIX, opts=opts)
    scrape = GeneratedKey(
        f"{name}-replica-scrape-key", client_name="replica-scrape", prefix=SCRAPE_KEY_PREFIX, opts=opts
    )
    cert = ReplicaCertificate(f"{name}-replica-tls", addresses, opts=opts) if tls else None
    return GuardCredentials(key.key, scrape.key, cert)


def guard_address(container: ContainerConfig) -> str:
    """The guard's fixed address on the replica's private network, beside vLLM's (``.10``)."""
    return str(container.subnet.network_address + 11)


def _one_address(name: str, address: str) -> str:
    """The address without brackets; a wildcard (every interface) is refused."""
    if binds_all_interfaces(address):
        raise ValueError(f"{name}: the guard publishes on one address, not {address!r}")
    return address.strip("[]")


@dataclass(frozen=True)
class ReplicaGuardArgs:
    """The replica a guard stands in front of, where it publishes, and what it accepts."""

    serving: ServingSpec
    """The replica's serving container: vLLM's fixed address and port, the guard's name and logs."""
    front: FrontConfig
    """``glm:front``: the nginx image, limits and timeouts the guard shares with the front, and TLS."""
    host: HostConfig
    """The replica's host (pass its Docker provider in ``opts``)."""
    publish_address: str | None
    """The host's private address the guard publishes ``serving.port`` on; None publishes nothing:
    the replica on the front's own host, guarded all the same so that every server of the front's
    upstream speaks the same scheme (with TLS a ``proxy_pass https://`` cannot mix in a plain-HTTP vLLM)."""
    network_name: pulumi.Input[str]
    """The replica's private network, where vLLM keeps ``serving.container.vllm_address``."""
    credentials: GuardCredentials
    """The stack's replica and scrape keys and, with ``glm:front.tls``, the certificate the guard serves."""


class ReplicaGuard(pulumi.ComponentResource):
    """Nginx on a replica's host: the replica's one published port, answering only the guard keys."""

    upstream: str
    """``host:port`` the front lists for this replica (known at preview): the published address, or
    on the front's own host the guard's container name on the shared private network."""
    container: docker.Container
    reload: NginxReload
    fingerprint: pulumi.Output[str]
    """Changes whenever the guard's behaviour can: config, image, key or TLS pair (no value in it)."""

    def __init__(self, name: str, args: ReplicaGuardArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        """TLS follows ``args.front.tls``, with ``args.credentials.certificate``."""
        super().__init__("glm:serving:ReplicaGuard", name, None, opts)
        serving, front, credentials = args.serving, args.front, args.credentials
        text = None if args.publish_address is None else _one_address(name, args.publish_address)
        tls = credentials.certificate if front.tls else None
        if front.tls and tls is None:
            raise ValueError(f"{name}: glm:front.tls is on but the guard credentials carry no certificate")
        c = serving.container
        container_name = f"{c.name}-guard"
        if text is None:
            # A fixed address, as vLLM's: the front loads its rotation without a name lookup.
            self.upstream = f"{guard_address(c)}:{CONTAINER_PORT}"
        else:
            self.upstream = f"[{text}]:{serving.port}" if ":" in text else f"{text}:{serving.port}"

        image = docker.RemoteImage(
            f"{name}-image", name=front.image, keep_locally=True, opts=pulumi.ResourceOptions(parent=self)
        )
        # Nothing here depends on the key, the TLS pair or nginx.conf: those reach nginx as a reload.
        self.container = docker.Container(
            f"{name}-nginx",
            name=container_name,
            image=image.image_id,
            entrypoints=["/bin/sh", "-c"],
            command=[START_COMMAND],
            networks_advanced=[
                docker.ContainerNetworksAdvancedArgs(name=args.network_name, ipv4_address=guard_address(c))
            ],
            ports=[docker.ContainerPortArgs(internal=CONTAINER_PORT, external=serving.port, ip=text)]
            if text is not None
            else None,
            labels=[
                docker.ContainerLabelArgs(label="glm53.role", value="replica-guard"),
                docker.ContainerLabelArgs(label="glm53.tls", value="on" if tls else "off"),
                # Plain HTTP between hosts only where the stack accepted it for its front too:
                # the policy pack (front-tls-on-public-bind) reads this as it does on the front.
                *(
                    [docker.ContainerLabelArgs(label="glm53.plain-http", value="accepted")]
                    if front.allow_plain_http and not tls
                    else []
                ),
            ],
            restart="unless-stopped",
            log_driver="json-file",
            log_opts=c.log_opts,
            destroy_grace_seconds=STOP_GRACE_SECONDS,
            # A fixed container name and host port cannot exist twice: remove the old one first.
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )

        nginx_conf = render_guard_conf(front, f"{c.vllm_address}:{serving.port}", tls is not None)

        def secret_files(args: list[Any]) -> dict[str, str]:
            pair = (args[2], args[3]) if tls else None
            files = render_guard_files(front, "vllm:0", str(args[0]), str(args[1]), pair)
            return {k: v for k, v in files.items() if k in SECRET_FILES}

        inputs: list[pulumi.Input[Any]] = [credentials.key, credentials.scrape_key]
        if tls is not None:
            inputs += [tls.certificate, tls.private_key]
        files: pulumi.Output[dict[str, str]] = pulumi.Output.secret(
            pulumi.Output.all(*inputs).apply(secret_files)
        )
        digest = pulumi.Output.unsecret(files.apply(secrets_digest))
        self.fingerprint = pulumi.Output.all(image.image_id, digest).apply(
            lambda a: front_fingerprint(nginx_conf, str(a[0]), [CLIENT], [SCRAPER], str(a[1]))
        )
        ssh = exec_ssh(args.host)
        self.reload = NginxReload(
            f"{name}-config",
            {
                "docker_host": args.host.docker_host,
                "ssh": ssh,
                "container": self.container.name,
                "container_id": self.container.id,
                "nginx_conf": nginx_conf,
                "api_key_names": shown_keys([CLIENT]),
                "metrics_key_names": shown_keys([SCRAPER]),
                "tls_certificate_sha256": tls.certificate_sha256 if tls is not None else None,
                "secrets_digest": digest,
                "secret_files": files,
                "fingerprint": self.fingerprint,
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container]),
        )
        self.register_outputs({"upstream": self.upstream, "fingerprint": self.fingerprint})
