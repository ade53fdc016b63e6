"""The front's certificate as the config reads it (``glm:tlsCertificate``, ``glm:front.tlsName``,
``glm:front.tlsCaCertificate``): the names it carries, and what is wrong with it for the stack's own
clients (the gate and the semantic probe verify the front by one of those names; components/front_tls.py).

The names are read with the ``openssl`` CLI (no new Python dependency in the program, like
components/serving/replica_credentials.py), once, when the config is loaded.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import ssl
import subprocess

from components.config.values import fix_command

CA_KEY = "glm:front.tlsCaCertificate"
NAME_KEY = "glm:front.tlsName"
SET_CA = fix_command(f"config set --path '{CA_KEY}' -- \"$(cat ca.crt)\"")
"""The command that names the stack's CA (``ca.crt``: the CA that signed the front's certificate)."""

_SAN_ENTRY = re.compile(r"(DNS|IP Address):([^,\s]+)")
_HOSTNAME = re.compile(r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+")


@functools.cache
def certificate_names(pem: str) -> tuple[str, ...]:
    """The subjectAltName entries of the first certificate of ``pem`` (the server's, in a chain):
    DNS names first, then IP addresses, each in the certificate's order. ValueError when openssl
    cannot read a certificate there."""
    done = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName"],
        input=pem, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if done.returncode != 0:
        raise ValueError(done.stderr.strip().splitlines()[0] if done.stderr.strip() else "not a certificate")
    found = _SAN_ENTRY.findall(done.stdout)
    dns = [value for kind, value in found if kind == "DNS"]
    ips = [str(ipaddress.ip_address(value)) for kind, value in found if kind == "IP Address"]
    return (*dns, *ips)


def name_matches(name: str, pattern: str) -> bool:
    """Whether a certificate entry ``pattern`` covers ``name`` (RFC 6125: a wildcard covers one
    whole left-most label; IP addresses compare as addresses).

    >>> name_matches("api.example.test", "*.example.test"), name_matches("a.b.example.test", "*.example.test")
    (True, False)
    >>> name_matches("fd00::1", "fd00:0::1"), name_matches("API.example.test", "api.example.test")
    (True, True)
    """
    try:
        return ipaddress.ip_address(name) == ipaddress.ip_address(pattern)
    except ValueError:
        pass
    name, pattern = name.lower().rstrip("."), pattern.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _, rest = name.partition(".")
        return bool(head) and rest == pattern[2:]
    return name == pattern


def certificate_problems(pem: str, tls_name: str | None) -> list[str]:
    """What is wrong with ``glm:tlsCertificate`` for the gate and the probe (never its contents)."""
    try:
        names = certificate_names(pem)
    except ValueError as err:
        return [
            f"glm:tlsCertificate is not a PEM certificate openssl can read ({err}). Fix: "
            + fix_command('config set glm:tlsCertificate -- "$(cat fullchain.pem)"')
            + " (the server's certificate first)."
        ]
    if not [n for n in names if not n.startswith("*.")] and tls_name is None:
        listed = f"only {', '.join(names)}" if names else "no subjectAltName"
        return [
            f"glm:tlsCertificate carries {listed}: the gate and the semantic probe verify the front by "
            f"a name in its subjectAltName. Fix: set {NAME_KEY} to the name clients use (e.g. "
            + fix_command(f"config set --path '{NAME_KEY}' api.example.com")
            + "), or use a certificate that names the server."
        ]
    if tls_name is not None and not any(name_matches(tls_name, n) for n in names):
        return [
            f"{NAME_KEY}={tls_name} is not a name glm:tlsCertificate carries (it names "
            f"{', '.join(names) or 'nothing'}). Fix: set {NAME_KEY} to one of them, or remove it "
            "(" + fix_command(f"config rm --path '{NAME_KEY}'") + ") to take the certificate's first name."
        ]
    return []


def default_name(pem: str) -> str:
    """The certificate's first name that is not a wildcard (a DNS name, else an IP address)."""
    return next(n for n in certificate_names(pem) if not n.startswith("*."))


def check_tls_name(value: str) -> str:
    """``glm:front.tlsName``: a host name (a wildcard is not a name to connect as) or an IP address."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    if value.startswith("*") or not _HOSTNAME.fullmatch(value):
        raise ValueError(
            f"{NAME_KEY}={value!r} is not a host name or IP address. Fix: the name clients use, one "
            "the certificate carries (e.g. api.example.com; a wildcard entry covers it, but is none)."
        )
    return value


def check_ca_certificate(value: str) -> str:
    """``glm:front.tlsCaCertificate``: PEM certificates Python's ssl module loads as trust."""
    try:
        ssl.create_default_context(cadata=value)
    except (ssl.SSLError, ValueError) as err:
        raise ValueError(
            f"{CA_KEY} is not a PEM certificate ({err}). Fix: {SET_CA}, with the certificate of the CA "
            "that signed glm:tlsCertificate (or a self-signed certificate itself)."
        ) from None
    return value
