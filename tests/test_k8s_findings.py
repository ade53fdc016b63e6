"""Issue 34's findings 1-3 as the issue states them: the secure behaviour, asserted only on what the
program renders under the mocks, whatever the mechanism (tests/test_k8s_guard.py,
test_k8s_exposure.py and test_policy_k8s.py test the mechanisms). The file runs unchanged on the
commits before the fixes: on d607adf (before any) all three fail for their finding's reason, on
1a36d00 (the guard in, TLS and NodePorts not yet) findings 2 and 3 fail."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pulumi

from components.config import ConfigError
from tests.conftest import Deployment, run_program, stack_config, unwrap
from tests.k8s_rendered import DEPLOYMENT, SERVICE, k8s_target
from tests.tls_certs import TestCa

try:  # a refused config is ProgramRefused; before 4be945b: pulumi.RunError (or ConfigError)
    from tests.conftest import ProgramRefused

    REFUSED: tuple[type[BaseException], ...] = (ProgramRefused, pulumi.RunError, ConfigError)
except ImportError:
    REFUSED = (pulumi.RunError, ConfigError)

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def local_with(**sections: dict[str, Any]) -> dict[str, Any]:
    """The local stack's glm:<section> values with ``sections``' keys merged in (the twin of
    tests/test_k8s_exposure.py's, which the commits before the fixes have not got)."""
    values = stack_config("local")
    return {f"glm:{name}": {**(values.get(f"glm:{name}") or {}), **keys} for name, keys in sections.items()}


def render(overrides: dict[str, Any], secrets: dict[str, Any] | None = None) -> Deployment | str:
    """The deployment the program renders, or the message of its refusal."""
    try:
        return run_program("local", overrides, secrets)
    except REFUSED as refused:
        return str(refused)


def option(argv: list[str], name: str) -> str | None:
    """``--name=value`` or ``--name value`` in ``argv``; None when absent."""
    for i, arg in enumerate(argv):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name:
            return argv[i + 1] if i + 1 < len(argv) else ""
    return None


# ---- finding 1: no pod reaches vLLM without a key ----------------------------------------------


def test_finding_1_vllm_is_not_reachable_without_a_key_from_other_pods() -> None:
    deployment = render({"glm:target": k8s_target()})
    assert not isinstance(deployment, str), deployment
    pod = unwrap(deployment.one(DEPLOYMENT, "-vllm").inputs)["spec"]["template"]["spec"]
    vllm = next(c for c in pod["containers"] if c["name"] == "vllm")
    argv = [*vllm.get("command", []), *vllm.get("args", [])]
    env = {e["name"] for e in vllm.get("env", [])}
    keyed = option(argv, "--api-key") is not None or "VLLM_API_KEY" in env
    host = option(argv, "--host")
    assert keyed or host in LOOPBACK, f"vLLM listens on {host or 'every interface'} without --api-key: {argv}"

    # The Service selecting the serving pods: the container whose port it targets.
    labels = unwrap(deployment.one(DEPLOYMENT, "-vllm").inputs)["spec"]["selector"]["matchLabels"]
    services = [unwrap(s.inputs) for s in deployment.of_type(SERVICE)]
    selecting = [s for s in services if s["spec"].get("selector") == labels]
    assert selecting, "no Service selects the serving pods"
    for service in selecting:
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            number = int(target) if str(target).replace(".", "", 1).isdigit() else None
            owners = [
                c["name"]
                for c in pod["containers"]
                for p in c.get("ports", [])
                if target == p.get("name") or number == int(p["containerPort"])
            ]
            if not owners and number == int(option(argv, "--port") or 8000):
                owners = ["vllm"]  # a bare number on vLLM's port, declared by no container
            assert keyed or "vllm" not in owners, (
                f"Service {service['metadata']['name']} port {port.get('name')} targets {target!r}, "
                f"vLLM's own port (containers {owners}), with no key in front of it"
            )


# ---- finding 2: glm:front.tls true on Kubernetes ----------------------------------------------


def test_finding_2_front_tls_on_kubernetes_is_served_tls_or_refused(tmp_path: Path) -> None:
    ca = TestCa.create(tmp_path / "ca", "GLM findings test CA")
    cert, key = ca.issue(["DNS:api.glm.test", "IP:127.0.0.1"])
    rendered = render(
        {
            "glm:target": k8s_target(frontNodePort=30443, frontUrl="https://127.0.0.1:30443/v1"),
            **local_with(front={"tls": True, "tlsCaCertificate": ca.certificate}),
        },
        {"glm:tlsCertificate": cert, "glm:tlsKey": key},
    )
    if isinstance(rendered, str):  # refused: it must be for TLS, never leaking the pair
        assert "glm:front.tls" in rendered and "BEGIN" not in rendered, rendered
        return
    config_map = rendered.one("kubernetes:core/v1:ConfigMap", "-front-config")
    conf = unwrap(config_map.inputs)["data"]["nginx.conf"]
    listens = [line.strip() for line in conf.splitlines() if line.strip().startswith("listen ")]
    assert any(re.fullmatch(r"listen\s+\S+(\s+\S+)*\s+ssl(\s+\S+)*;", line) for line in listens), (
        f"glm:front.tls=true accepted, but the front's nginx.conf listens {listens} (no ssl)"
    )


# ---- finding 3: NodePorts without the opt-ins -------------------------------------------------


def test_finding_3_node_ports_without_the_opt_ins_are_not_published() -> None:
    rendered = render(
        {
            "glm:target": k8s_target(frontNodePort=30080, prometheusNodePort=30090),
            **local_with(
                front={"bindAddress": "127.0.0.1", "tls": False, "allowPlainHttp": False},
                monitoring={"bindAddress": "127.0.0.1", "allowPublicBind": False},
            ),
        }
    )
    if isinstance(rendered, str):  # refused: naming both NodePorts
        assert "frontNodePort" in rendered and "prometheusNodePort" in rendered, rendered
        return
    services = rendered.of_type(SERVICE)
    types = {s.name: unwrap(s.inputs)["spec"].get("type", "ClusterIP") for s in services}
    published = {name: t for name, t in types.items() if t in ("NodePort", "LoadBalancer")}
    assert not published, (
        f"accepted without glm:front.allowPlainHttp / glm:monitoring.allowPublicBind: {published}"
    )
