"""TLS for the gate's and the probe's client: an endpoint whose certificate names another host.

The front's certificate names what clients use (``api.example.com``), but the gate reaches the
front by its own address (``localhost``, the host's SSH address) and the semantic probe by its
container name on the private network: names the certificate does not carry. So the client
connects to the URL's address, and sends and verifies the certificate's name instead (httpcore's
``sni_hostname`` request extension), trusting only the certificates the stack names (``ca``), or
the system's CAs (certifi) when it names none. A replica's guard is reached the same way, by its
address, with the stack's pinned replica certificate as the only trust.

Plain Python (the standard library and httpx): it runs in the probe container too.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class EndpointTls:
    """How to verify one endpoint's certificate (the gate's and the probe's ``tls`` parameter)."""

    server_name: str
    """The name sent (SNI) and verified in the certificate, instead of the URL's host."""
    ca: str | None = None
    """PEM certificates to trust, and no others; None: the system's CAs."""
    trust: str = "the system's CAs"
    """Where ``ca`` comes from, in a failure message (``glm:front.tlsCaCertificate``)."""
    fix: str = ""
    """What to change when the certificate does not verify (config keys and commands)."""

    @classmethod
    def from_params(cls, value: Mapping[str, Any] | None) -> EndpointTls | None:
        """The parameter as the program rendered it (``None`` or ``{}``: no TLS override).

        >>> EndpointTls.from_params({"server_name": "api.example.test"}).server_name
        'api.example.test'
        """
        if not value:
            return None
        return cls(**{k: value[k] for k in cls.__dataclass_fields__ if value.get(k) is not None})

    def params(self) -> dict[str, Any]:
        """Plain, sorted values: the same settings render the same resource inputs (no diff)."""
        return dict(sorted(asdict(self).items()))

    def verify(self) -> ssl.SSLContext | bool:
        """httpx's ``verify``: a context that trusts ``ca`` alone, else the default (certifi)."""
        if self.ca is None:
            return True
        return ssl.create_default_context(cadata=self.ca)

    def extensions(self, url: str, endpoint: str) -> dict[str, str]:
        """``{"sni_hostname": …}`` for an ``https`` URL on ``endpoint``'s origin, else nothing.

        >>> tls = EndpointTls("api.example.test")
        >>> tls.extensions("https://localhost:8443/metrics", "https://localhost:8443/v1")
        {'sni_hostname': 'api.example.test'}
        >>> tls.extensions("http://prometheus:9090/federate", "https://localhost:8443/v1")
        {}
        """
        here, there = urlsplit(url), urlsplit(endpoint)
        if here.scheme != "https" or (here.scheme, here.netloc) != (there.scheme, there.netloc):
            return {}
        return {"sni_hostname": self.server_name}

    def failure(self, url: str, err: BaseException) -> str | None:
        """The message for a certificate that did not verify, or None for any other error."""
        reason = verification_error(err)
        if reason is None:
            return None
        return (
            f"{url}: the TLS certificate the server presented does not verify for the name "
            f"{self.server_name!r} against {self.trust} ({reason}). {self.fix}".rstrip()
        )


def verification_error(err: BaseException) -> str | None:
    """OpenSSL's reason when ``err`` (or what caused it) is a failed certificate verification.

    >>> verification_error(ValueError("x")) is None
    True
    """
    seen: BaseException | None = err
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLCertVerificationError):
            return str(seen.verify_message or seen.reason or seen)
        seen = seen.__cause__ or seen.__context__
    return None
