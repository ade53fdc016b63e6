"""The gate against the real Nginx front serving TLS with a certificate a test CA signed (openssl
CLI): it connects to 127.0.0.1, which the certificate does not name, and verifies the certificate's
own name against the stack's CA. A certificate from another CA, or another name, fails at once with
the config key to fix, not after the readiness deadline."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from components.config import SecretInputs, build_stack_config
from components.front_tls import front_tls
from components.gate.checks import run_gate
from components.gate.settings import ALL_SMOKE_STEPS
from components.gate.tls import EndpointTls
from tests.gate.support import KEY, Sim, needs_nginx, params, start_front, stop
from tests.tls_certs import TestCa

pytestmark = needs_nginx
NAME = "glm-front.test"
"""The certificate's only name: not the address the gate connects to."""


@pytest.fixture(scope="module")
def cas(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestCa, TestCa]:
    """The stack's CA, and another one."""
    root = tmp_path_factory.mktemp("cas")
    return TestCa.create(root / "stack", "GLM stack CA"), TestCa.create(root / "other", "Some other CA")


@pytest.fixture
def tls_front(tmp_path: Path) -> Iterator[Callable[[Sim, tuple[str, str]], str]]:
    procs = []

    def start(sim: Sim, pair: tuple[str, str]) -> str:
        proc, port = start_front(sim.port, {"ci": KEY}, tmp_path / f"nginx-{len(procs)}", tls_pair=pair)
        procs.append(proc)
        return f"https://127.0.0.1:{port}/v1"

    yield start
    for proc in procs:
        stop(proc)


def stack_tls(pem: str, ca: str | None, **front: str) -> EndpointTls:
    """What the program gives the gate: from the stack config, as load_stack_config builds it."""
    secrets = SecretInputs(api_keys={"ci": KEY}, tls_certificate=True, tls_key=True, tls_certificate_pem=pem)
    tls_ca = {"tlsCaCertificate": ca} if ca else {}
    config = build_stack_config({"hardware": "local", "front": {"tls": True, **tls_ca, **front}}, secrets)
    tls = front_tls(config.front)
    assert tls is not None
    return tls


def test_the_gate_passes_a_tls_front_by_the_certificates_name(sims, tls_front, cas) -> None:
    stack_ca, _ = cas
    pair = stack_ca.issue([f"DNS:{NAME}"])
    sim = sims()
    p = params(tls_front(sim, pair), sim)
    p["tls"] = stack_tls(pair[0], stack_ca.certificate).params()
    assert p["tls"]["server_name"] == NAME and p["tls"]["ca"] == stack_ca.certificate
    results = run_gate(p, KEY, lambda _line: None)
    assert results["steps_run"] == ALL_SMOKE_STEPS  # front_auth and streaming over TLS too


def test_another_cas_certificate_fails_at_once_naming_the_key(sims, tls_front, cas) -> None:
    stack_ca, other_ca = cas
    pair = other_ca.issue([f"DNS:{NAME}"], label="other")
    sim = sims()
    p = params(tls_front(sim, pair), sim, deadline_seconds=60)
    p["tls"] = stack_tls(pair[0], stack_ca.certificate).params()
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        run_gate(p, KEY, lambda _line: None)
    assert time.monotonic() - started < 10  # not the 60 s readiness deadline
    message = str(info.value)
    assert message.startswith("smoke gate failed at step 'readiness'")
    assert f"does not verify for the name '{NAME}' against glm:front.tlsCaCertificate" in message
    assert "unable to get local issuer certificate" in message  # OpenSSL's own words
    assert "Fix: set glm:front.tlsCaCertificate to the CA that signed it" in message
    assert "BEGIN" not in message


def test_without_a_ca_the_system_cas_decide_and_the_message_says_so(sims, tls_front, cas) -> None:
    stack_ca, _ = cas
    pair = stack_ca.issue([f"DNS:{NAME}"], label="no-ca")
    sim = sims()
    p = params(tls_front(sim, pair), sim)
    p["tls"] = stack_tls(pair[0], None).params()
    with pytest.raises(Exception) as info:
        run_gate(p, KEY, lambda _line: None)
    assert "against the system's CAs (glm:front.tlsCaCertificate is not set)" in str(info.value)


def test_another_name_fails_the_hostname_check(sims, tls_front, cas) -> None:
    stack_ca, _ = cas
    pair = stack_ca.issue([f"DNS:{NAME}"], label="named")
    sim = sims()
    p = params(tls_front(sim, pair), sim)
    p["tls"] = EndpointTls("not-the-name.test", stack_ca.certificate, "glm:front.tlsCaCertificate").params()
    with pytest.raises(Exception) as info:
        run_gate(p, KEY, lambda _line: None)
    assert "Hostname mismatch" in str(info.value)


def test_the_command_line_takes_the_name_and_the_ca_file(sims, tls_front, cas, tmp_path) -> None:
    """What `ops smoke` runs against a TLS stack (ops/__main__.py passes the stack's name and CA)."""
    from tests.gate.cli_rig import gate_cli

    stack_ca, other_ca = cas
    pair = stack_ca.issue([f"DNS:{NAME}"], label="cli")
    sim = sims()
    endpoint = tls_front(sim, pair)
    served = ("--served-name", "glm-5.3-flash", "--max-model-len", "32768", "--deadline-seconds", "30")
    done = gate_cli(
        "--endpoint", endpoint, "--tls-name", NAME, "--tls-ca-file", str(stack_ca.folder / "ca.crt"), *served
    )
    assert done.returncode == 0, done.stderr
    assert "[smoke-gate] streaming: ok in" in done.stderr
    other = gate_cli(
        "--endpoint", endpoint, "--tls-name", NAME, "--tls-ca-file", str(other_ca.folder / "ca.crt"), *served
    )
    assert other.returncode == 1
    assert (
        f"against the certificates in {other_ca.folder / 'ca.crt'} (unable to get local issuer certificate)"
        in other.stderr
    )


def test_a_self_signed_certificate_is_trusted_as_its_own_ca(sims, tls_front, tmp_path) -> None:
    """glm:front.tlsCaCertificate set to the front's self-signed certificate itself."""
    from tests.tls_certs import self_signed

    pair = self_signed(tmp_path / "self", [f"DNS:{NAME}"])
    sim = sims()
    p = params(tls_front(sim, pair), sim, steps=["models"])
    p["tls"] = stack_tls(pair[0], pair[0]).params()
    assert run_gate(p, KEY, lambda _line: None)["steps_run"] == ["models"]
