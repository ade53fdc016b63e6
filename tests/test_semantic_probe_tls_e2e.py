"""A TLS front on the real engine and the local Docker engine (issue 23, "TLS fronts too").

The local stack with ``glm:front.tls`` and a certificate a test CA signed (the real openssl CLI) for
``glm-front.test`` only: a name that is neither the address the gate connects to (127.0.0.1) nor
the probe's (the front's container name). ``pulumi up`` passes the gate, the probe's front path and
its replica path pass every step in the stack's real Prometheus, a preview right after shows no
change; then the front is given a certificate from another CA and ``pulumi up`` stops at the gate
with the config key to fix. The stack is destroyed at the end.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from components.semantic_probe import PROBE_STEPS
from tests.e2e_weights import WEIGHTS
from tests.engine import PulumiProject, engine_missing
from tests.semantic_probe_tls import NAME, set_pem
from tests.tls_certs import TestCa

pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))
KEY = "sk-tls-e2e-5c0e8a91d27b4f36"


def query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/query?query={urllib.parse.quote(promql)}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return list(json.loads(resp.read())["data"]["result"])


def probe_results(prometheus: str) -> dict[tuple[str, str, str], float]:
    """(path, host, step) -> glm_semantic_probe_step_success, as the stack's Prometheus has it."""
    return {
        (s["metric"]["path"], s["metric"]["host"], s["metric"]["step"]): float(s["value"][1])
        for s in query(prometheus, "glm_semantic_probe_step_success")
    }


def test_a_tls_front_passes_the_gate_and_is_probed_by_its_certificates_name(tmp_path: Path) -> None:
    if not (WEIGHTS / "config.json").exists():
        pytest.skip(f"the local weights fixture is missing: {WEIGHTS} (make test writes it)")
    stack_ca = TestCa.create(tmp_path / "stack-ca", "GLM e2e stack CA")
    other_ca = TestCa.create(tmp_path / "other-ca", "GLM e2e other CA")
    cert, key = stack_ca.issue([f"DNS:{NAME}"])
    foreign_cert, foreign_key = other_ca.issue([f"DNS:{NAME}"], label="foreign")
    project = PulumiProject.copy_of_repo(tmp_path / "glm")
    local = project.init_local_stack(
        "glm53-tls",
        secrets={"glm:apiKeys.e2e": KEY},
        config={
            "glm:front.tls": "true",
            "glm:monitoring.scrapeInterval": "1s",
            "glm:semanticProbe.intervalSeconds": "6",
            "glm:semanticProbe.failuresBeforeAlert": "2",
            "glm:semanticProbe.timeoutSeconds": "3",
        },
    )
    set_pem(project, "glm:front.tlsCaCertificate", stack_ca.certificate)
    set_pem(project, "glm:tlsCertificate", cert, secret=True)
    set_pem(project, "glm:tlsKey", key, secret=True)
    try:
        up = project.run("up", "--yes", "--skip-preview", "-s", "local", label="up")
        outputs = project.outputs("local")
        assert outputs["endpoint"] == f"https://127.0.0.1:{local.front_port}/v1"
        assert outputs["smoke"]["steps_run"] == [
            "models", "arithmetic", "tool_call", "kv_pool", "front_auth", "streaming",
        ]  # fmt: skip
        assert "glm:semanticProbe is not deployed" not in up
        prometheus = outputs["prometheusUrl"]
        want = {
            (p, h, s): 1.0 for p, h in (("front", "front"), ("replica", "localhost")) for s in PROBE_STEPS
        }
        deadline, seen = time.monotonic() + 90, {}
        while time.monotonic() < deadline and seen != want:
            time.sleep(1)
            seen = probe_results(prometheus)
        print(f"up {project.timings['up']:.0f} s; probe results in Prometheus: {seen}")
        assert seen == want
        runs = query(prometheus, 'glm_semantic_probe_runs_total{result="ok"}')
        assert {r["metric"]["path"] for r in runs if float(r["value"][1]) > 0} == {"front", "replica"}
        assert project.preview_steps("local") == []  # nothing changes right after up

        # A certificate from another CA than the stack trusts: the gate stops `up`, naming the key.
        set_pem(project, "glm:tlsCertificate", foreign_cert, secret=True)
        set_pem(project, "glm:tlsKey", foreign_key, secret=True)
        started = time.monotonic()
        failed = project.run("up", "--yes", "--skip-preview", "-s", "local", check=False)
        print(f"up with another CA's certificate failed after {time.monotonic() - started:.0f} s")
        assert "smoke gate failed at step 'readiness'" in failed, failed[-3000:]
        assert f"does not verify for the name '{NAME}' against glm:front.tlsCaCertificate" in failed
        assert "unable to get local issuer certificate" in failed
        assert "Fix: set glm:front.tlsCaCertificate to the CA that signed" in failed
        assert foreign_key.splitlines()[1] not in failed  # no secret in the output
    finally:
        project.run("destroy", "--yes", "-s", "local", label="destroy", check=False)
        subprocess.run(["docker", "volume", "rm", f"{local.container}-jit-cache"], capture_output=True)
