"""The probe behind TLS, on real nginx: the front by its certificate's name (a test CA signed it,
openssl CLI) at an address the certificate does not name, and a replica through its real guard
serving the stack's pinned replica certificate, asked with the replica key. Another CA, or another
pinned certificate, fails the run's first step with what to fix."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from components.config import SecretInputs, build_stack_config
from components.front_tls import front_tls
from components.render.replica_guard import TLS_NAME
from components.semantic_probe import PROBE_STEPS
from components.semantic_probe.saturation import saturation
from components.semantic_probe.service import ProbeMetrics, run_once
from components.semantic_probe.settings import ProbeSettings, ReplicaKeys
from components.serving.replica_credentials import guard_tls, self_signed
from components.verification.semantic_probe_spec import ProbeReplica, SemanticProbeSpec, probe_settings
from tests.front_rig import SERVED, vllm_sim
from tests.gate.support import KEY, Sim, needs_nginx, start_front, stop
from tests.guard_rig import KEY as REPLICA_KEY
from tests.guard_rig import SCRAPE_KEY, guard_files, nginx
from tests.tls_certs import TestCa

pytestmark = needs_nginx
NAME = "glm-front.test"


def spec_for(pem: str, ca: str) -> SemanticProbeSpec:
    """The probe's spec of a local stack whose front serves ``pem`` and trusts ``ca``."""
    secrets = SecretInputs(api_keys={"ci": KEY}, tls_certificate=True, tls_key=True, tls_certificate_pem=pem)
    config = build_stack_config(
        {"hardware": "local", "front": {"tls": True, "tlsCaCertificate": ca}}, secrets
    )
    return SemanticProbeSpec(
        probe=config.semantic_probe,
        smoke=config.smoke,
        served_name=config.model.served_name,
        max_model_len=config.serving.max_model_len,
        max_num_seqs=config.serving.max_num_seqs,
        container=config.container,
        front_tls=front_tls(config.front),
    )


def front_run(settings: ProbeSettings, port: int) -> list[tuple[str, bool, str | None]]:
    # The probe reaches the front by its container name on port 8080; here it is 127.0.0.1:<port>.
    moved = dataclasses.replace(settings, endpoint=f"https://127.0.0.1:{port}/v1")
    return [(o.step, o.ok, o.failure) for o in run_once(moved, KEY, ProbeMetrics(moved))]


def test_the_front_path_is_probed_by_the_certificates_name(sims: Callable[..., Sim], tmp_path: Path) -> None:
    stack_ca = TestCa.create(tmp_path / "ca", "GLM stack CA")
    other_ca = TestCa.create(tmp_path / "other", "Some other CA")
    good, foreign = stack_ca.issue([f"DNS:{NAME}"]), other_ca.issue([f"DNS:{NAME}"], label="foreign")
    sim = sims()
    settings = probe_settings(
        spec_for(good[0], stack_ca.certificate), "glm53-flash-local-nginx", f"127.0.0.1:{sim.port}"
    )
    assert settings.endpoint == "https://glm53-flash-local-nginx:8080/v1"
    assert settings.tls is not None and settings.tls["server_name"] == NAME
    assert settings.tls["ca"] == stack_ca.certificate
    procs = []
    try:
        proc, port = start_front(sim.port, {"ci": KEY}, tmp_path / "front", tls_pair=good)
        procs.append(proc)
        assert front_run(settings, port) == [(step, True, None) for step in PROBE_STEPS]
        # The same stack trust before a front serving another CA's certificate: the first step fails.
        proc, port = start_front(sim.port, {"ci": KEY}, tmp_path / "foreign", tls_pair=foreign)
        procs.append(proc)
        steps = front_run(settings, port)
        readiness = steps[0]
        assert readiness[:2] == ("readiness", False), steps
        assert "against glm:front.tlsCaCertificate (unable to get local issuer certificate)" in (
            readiness[2] or ""
        )
    finally:
        for proc in procs:
            stop(proc)


def test_a_guard_serving_tls_is_probed_with_the_pinned_certificate_and_the_replica_key(
    tmp_path: Path,
) -> None:
    stack_ca = TestCa.create(tmp_path / "ca", "GLM stack CA")
    pem = stack_ca.issue([f"DNS:{NAME}"])[0]
    pinned = self_signed(["127.0.0.1"])  # what ReplicaCertificate makes: the real openssl CLI
    with vllm_sim() as sim, nginx(guard_files(f"127.0.0.1:{sim}", pinned)) as (guard, _):
        replica = ProbeReplica("box2", f"127.0.0.1:{guard}", guarded=True)
        settings = probe_settings(
            spec_for(pem, stack_ca.certificate), "unused", "unused:8000", (replica,), guard_tls(pinned[0])
        )
        target = settings.targets[1]
        assert (target.host, target.replica_key) == ("box2", True)
        assert (target.endpoint, target.metrics_url) == (
            f"https://127.0.0.1:{guard}/v1",
            f"https://127.0.0.1:{guard}/metrics",
        )
        assert target.tls is not None and (target.tls["server_name"], target.tls["ca"]) == (
            TLS_NAME,
            pinned[0],
        )
        settings = dataclasses.replace(settings, served_name=SERVED, max_model_len=32768)
        outcomes = run_once(
            settings,
            "sk-the-probe-api-key-not-for-guards",
            ProbeMetrics(settings),
            target,
            ReplicaKeys(REPLICA_KEY, SCRAPE_KEY),
        )
        assert [(o.step, o.ok) for o in outcomes] == [(step, True) for step in PROBE_STEPS], outcomes
        # The saturation check reads the guard's /metrics over TLS too (None: read, not busy).
        assert saturation(settings, target, SCRAPE_KEY, {}) is None
        # Another pinned certificate than the guard serves: the run fails and says what to do.
        stale = probe_settings(
            spec_for(pem, stack_ca.certificate),
            "unused",
            "unused:8000",
            (replica,),
            guard_tls(self_signed(["127.0.0.1"])[0]),
        )
        stale = dataclasses.replace(stale, served_name=SERVED, max_model_len=32768)
        wrong = run_once(
            stale, "x", ProbeMetrics(stale), stale.targets[1], ReplicaKeys(REPLICA_KEY, SCRAPE_KEY)
        )
        assert not wrong[0].ok and "against the stack's pinned replica certificate" in (
            wrong[0].failure or ""
        )
