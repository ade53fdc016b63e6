"""A TLS stack over two stand-in hosts on the real engine: the probe asks every replica through its
guard over TLS (the stack's pinned replica certificate, the replica key) and the front by its
certificate's name (a test CA's, openssl CLI), and every result is a pass in the stack's real
Prometheus (skipped, with the reason, where stand-in hosts cannot run)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.semantic_probe import PROBE_STEPS
from tests.engine import PulumiProject, engine_missing
from tests.multihost import init_stack, standin_fleet
from tests.semantic_probe_tls import NAME, set_pem
from tests.standin_host import StandinHost, unavailable_reason
from tests.tls_certs import TestCa

pytestmark = pytest.mark.skipif(
    engine_missing() is not None or unavailable_reason() is not None,
    reason=str(engine_missing() or unavailable_reason()),
)
KEY = "sk-tls-multihost-0b7d3e92c4a1f865"
FRONT_PORT = 18490


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[StandinHost]]:
    with standin_fleet(2, tmp_path_factory.mktemp("images"), lifetime_s=3600) as made:
        yield made


def probe_results(front_host: StandinHost, prometheus: str) -> dict[tuple[str, str, str], float]:
    """glm_semantic_probe_step_success by (path, host, step), read inside the front host's network
    (its Prometheus binds the host's loopback)."""
    code = (
        "import json, sys, urllib.parse, urllib.request\n"
        "url = sys.argv[1] + '/api/v1/query?query=' + urllib.parse.quote('glm_semantic_probe_step_success')\n"
        "print(urllib.request.urlopen(url, timeout=5).read().decode())\n"
    )
    argv = ["nsenter", f"--net=/var/run/netns/{front_host.name}", sys.executable, "-c", code, prometheus]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return {}
    return {
        (s["metric"]["path"], s["metric"]["host"], s["metric"]["step"]): float(s["value"][1])
        for s in json.loads(done.stdout)["data"]["result"]
    }


def test_every_replica_is_probed_through_its_tls_guard(hosts: list[StandinHost], tmp_path: Path) -> None:
    ca = TestCa.create(tmp_path / "ca", "GLM multihost CA")
    cert, key = ca.issue([f"DNS:{NAME}"])
    project = PulumiProject.copy_of_repo(tmp_path / "glm")
    init_stack(project, "local", hosts, KEY, FRONT_PORT)
    for path, value in {
        "glm:front.tls": "true",
        "glm:monitoring.scrapeInterval": "1s",
        "glm:semanticProbe.intervalSeconds": "6",
        "glm:semanticProbe.failuresBeforeAlert": "2",
        "glm:semanticProbe.timeoutSeconds": "3",
    }.items():
        project.run("config", "set", "--path", path, value, "-s", "local")
    set_pem(project, "glm:front.tlsCaCertificate", ca.certificate)
    set_pem(project, "glm:tlsCertificate", cert, secret=True)
    set_pem(project, "glm:tlsKey", key, secret=True)
    try:
        project.run("up", "--yes", "--skip-preview", "-s", "local", label="up", timeout=2400)
        outputs = project.outputs("local")
        assert outputs["endpoint"] == f"https://{hosts[0].address}:{FRONT_PORT}/v1"
        want = {("front", "front", s): 1.0 for s in PROBE_STEPS}
        want |= {("replica", h.name, s): 1.0 for h in hosts for s in PROBE_STEPS}
        deadline, seen = time.monotonic() + 120, {}
        while time.monotonic() < deadline and seen != want:
            time.sleep(2)
            seen = probe_results(hosts[0], outputs["prometheusUrl"])
        print(f"up {project.timings['up']:.0f} s; probe results in Prometheus: {seen}")
        assert seen == want
        assert project.preview_steps("local") == []
    finally:
        project.run("destroy", "--yes", "-s", "local", label="destroy", check=False, timeout=1200)
