"""The rules of ``glm:target.kubernetes`` across sections (``KUBERNETES_CHECKS``, run with
``rules.CHECKS``): what the Docker path checks on its binds, checked on the cluster's own forms.
"""

from __future__ import annotations

from components.config.sections import StackSections

K8S = "glm:target.kubernetes"


def _check_front_tls(c: StackSections) -> str | None:
    """The Kubernetes front serves no TLS: a stack that says TLS is refused, never served in clear."""
    if c.target.kubernetes is None or not c.front.tls:
        return None
    return (
        f"glm:front.tls=true with {K8S}: the front on Kubernetes does not serve TLS (its nginx would "
        "answer plain HTTP on the Service while this stack says TLS). Fix: terminate TLS in front of "
        "the front's Service (an ingress or load balancer holding your certificate, with "
        f"{K8S}.frontUrl https://…/v1) and set glm:front.tls false (pulumi config set --path "
        "'glm:front.tls' false); or run on Docker hosts (remove glm:target.kubernetes), where "
        "glm:front.tls is served end to end."
    )


KUBERNETES_CHECKS = [_check_front_tls]
