"""The front's certificate as the stack's own clients check it: which name, trusting what.

The smoke gate reaches the front by its own address (``localhost``, the host's SSH address) and the
semantic probe by its container name on the private network; the certificate names neither, it
names what clients use. So both connect to their address and verify the certificate for
``glm:front.tlsName`` (default: the certificate's first name, components/config/certificate.py),
trusting ``glm:front.tlsCaCertificate`` and nothing else when it is set, else the system's CAs
(components/gate/tls.py does the client side).
"""

from __future__ import annotations

from components.config.certificate import CA_KEY, NAME_KEY, SET_CA
from components.config.edge import FrontConfig
from components.config.values import named
from components.gate.tls import EndpointTls


def front_tls(front: FrontConfig, stack: str | None = None) -> EndpointTls | None:
    """What the gate and the probe verify at the front; None without TLS, or when the name is not
    known (a config built without its certificate, as unit tests do): they verify the URL's host.
    ``stack`` names the stack in the fix's command."""
    if not front.tls or front.tls_name is None:
        return None
    ca = front.tls_ca_certificate
    return EndpointTls(
        server_name=front.tls_name,
        ca=ca,
        trust=CA_KEY if ca is not None else f"the system's CAs ({CA_KEY} is not set)",
        fix=named(
            f"The front serves glm:tlsCertificate. Fix: set {CA_KEY} to the CA that signed it ({SET_CA}), "
            "or set glm:tlsCertificate and glm:tlsKey to a pair "
            + (f"the CA in {CA_KEY} signed" if ca is not None else "a public CA signed")
            + f" ({NAME_KEY}, if set, must be a name it carries).",
            stack,
        ),
    )
