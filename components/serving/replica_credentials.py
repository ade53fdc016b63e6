"""What every replica guard of a stack accepts and serves, on either target: the replica key, the
scrape key and, with ``glm:front.tls``, ``ReplicaCertificate``, the TLS pair every guard serves and
the front pins.

The pair is generated once with the ``openssl`` CLI (no new Python dependency in the program) and
kept in the state, the private key as a secret output, like ``GeneratedKey``: a certificate made in
the program would differ on every preview. Rotation is ``pulumi up --replace <urn>``; new replica
addresses replace it too (the subjectAltName lists them).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic

from components.gate.tls import EndpointTls
from components.render.replica_guard import KEY_PREFIX, SCRAPE_KEY_PREFIX, TLS_NAME, render_front_snippet
from components.secrets import GeneratedKey

CERT_DAYS = 3650
"""The certificate is pinned, not issued by a CA: it lives until ``pulumi up --replace`` rotates it."""


def guard_tls(certificate: str) -> EndpointTls:
    """How the stack's own clients (the semantic probe) verify a guard: by :data:`TLS_NAME`,
    trusting the pinned certificate and nothing else, as the front does."""
    return EndpointTls(
        server_name=TLS_NAME,
        ca=certificate,
        trust="the stack's pinned replica certificate",
        fix="The guard serves another certificate than the stack pins: run `pulumi up` to deliver it "
        "again (a rotation is `pulumi up --replace` of the ReplicaCertificate, which re-delivers both ends).",
    )


def subject_alt_names(addresses: Sequence[str]) -> str:
    """OpenSSL's ``subjectAltName`` value: the fixed name, then each address as IP or DNS.

    >>> subject_alt_names(["10.0.0.2", "gpu02", "fd00::2"])
    'DNS:glm-replica-guard.invalid,IP:10.0.0.2,DNS:gpu02,IP:fd00::2'
    """
    names = [f"DNS:{TLS_NAME}"]
    for address in addresses:
        bare = address.strip("[]")
        try:
            names.append(f"IP:{ipaddress.ip_address(bare)}")
        except ValueError:
            names.append(f"DNS:{bare}")
    return ",".join(names)


def self_signed(addresses: Sequence[str], days: int = CERT_DAYS) -> tuple[str, str]:
    """(certificate PEM, key PEM) made by the ``openssl`` CLI: a P-256 key and a self-signed
    server certificate for :data:`TLS_NAME` and ``addresses``. No config file of the host is read."""
    import subprocess
    import tempfile

    config = (
        "[req]\ndistinguished_name = dn\nx509_extensions = ext\nprompt = no\n"
        f"[dn]\nCN = {TLS_NAME}\n"
        f"[ext]\nsubjectAltName = {subject_alt_names(addresses)}\n"
        "basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\n"
        "extendedKeyUsage = serverAuth\nsubjectKeyIdentifier = hash\n"
    )
    with tempfile.TemporaryDirectory(prefix="glm-replica-tls-") as tmp:
        Path(tmp, "req.cnf").write_text(config)
        subprocess.run(
            ["openssl", "req", "-x509", "-config", "req.cnf", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-nodes", "-keyout", "key.pem", "-out", "cert.pem",
             "-days", str(days)],
            cwd=tmp, capture_output=True, check=True, timeout=60,
        )  # fmt: skip
        return Path(tmp, "cert.pem").read_text(), Path(tmp, "key.pem").read_text()


class _ReplicaCertificateProvider(pulumi.dynamic.ResourceProvider):
    """Generates the pair on create and never again; new addresses replace it (a new SAN list)."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        import hashlib
        import uuid

        certificate, key = self_signed(props["addresses"])
        sha = hashlib.sha256(certificate.encode()).hexdigest()
        outs = {**props, "certificate": certificate, "certificate_sha256": sha, "private_key": key}
        return pulumi.dynamic.CreateResult(f"replica-tls-{uuid.uuid4().hex[:12]}", outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        changed = list(olds.get("addresses") or []) != list(news.get("addresses") or [])
        return pulumi.dynamic.DiffResult(
            changes=changed, replaces=["addresses"] if changed else [], delete_before_replace=False
        )

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Nothing to remove: the pair lives only in the state and the guards' and front's files."""


class ReplicaCertificate(pulumi.dynamic.Resource):
    """The guards' TLS pair, one per stack: ``private_key`` is a secret output; the certificate is
    public (the front pins it) and its sha256 is safe to show in a diff."""

    certificate: pulumi.Output[str]
    certificate_sha256: pulumi.Output[str]
    private_key: pulumi.Output[str]

    def __init__(
        self, name: str, addresses: Sequence[str], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        secret = pulumi.ResourceOptions(additional_secret_outputs=["private_key"])
        super().__init__(
            _ReplicaCertificateProvider(),
            name,
            {
                "addresses": sorted(addresses),
                "certificate": None,
                "certificate_sha256": None,
                "private_key": None,
            },
            pulumi.ResourceOptions.merge(opts, secret),
        )


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
