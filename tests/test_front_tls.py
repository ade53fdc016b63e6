"""The TLS front as the gate and the probe verify it: the name and the trust the config gives them.

Certificates are made by the real ``openssl`` CLI (tests/tls_certs.py); the expected names are the
ones handed to openssl, not what the code under test reads back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.config import ConfigError, SecretInputs, build_stack_config, semantic_probe_runs
from components.front_tls import front_tls
from tests.tls_certs import TestCa

KEYS = {"ops": "sk-test-ops-cca224104c7a268a"}


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCa:
    return TestCa.create(tmp_path_factory.mktemp("ca"), "GLM front test CA")


def load(pem: str, **front: Any) -> Any:
    """The local stack with a TLS front serving ``pem``, as load_stack_config builds it."""
    secrets = SecretInputs(api_keys=KEYS, tls_certificate=True, tls_key=True, tls_certificate_pem=pem)
    return build_stack_config({"hardware": "local", "front": {"tls": True, **front}}, secrets)


def refused(pem: str, **front: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(pem, **front)
    return str(info.value)


def test_the_name_defaults_to_the_certificates_first_dns_name(ca: TestCa) -> None:
    cert, _ = ca.issue(["IP:10.1.2.3", "DNS:*.glm.test", "DNS:glm-front.test", "DNS:api.glm.test"])
    config = load(cert, tlsCaCertificate=ca.certificate)
    # A wildcard is no name to connect as; the first whole DNS name is.
    assert config.front.tls_name == "glm-front.test"
    tls = front_tls(config.front)
    assert tls is not None
    assert (tls.server_name, tls.ca, tls.trust) == (
        "glm-front.test",
        ca.certificate,
        "glm:front.tlsCaCertificate",
    )
    assert semantic_probe_runs(config)
    assert not [a for a in config.advisories() if "semanticProbe" in a]


def test_an_ip_only_certificate_names_its_address(ca: TestCa) -> None:
    cert, _ = ca.issue(["IP:10.1.2.3"], label="ip-only")
    assert load(cert).front.tls_name == "10.1.2.3"


def test_a_name_the_certificate_carries_is_kept_wildcards_included(ca: TestCa) -> None:
    cert, _ = ca.issue(["DNS:glm-front.test", "DNS:*.glm.test"], label="wild")
    assert load(cert, tlsName="api.glm.test").front.tls_name == "api.glm.test"
    assert load(cert, tlsName="GLM-front.test").front.tls_name == "GLM-front.test"


def test_a_name_the_certificate_does_not_carry_is_refused_with_its_names(ca: TestCa) -> None:
    cert, _ = ca.issue(["DNS:glm-front.test", "DNS:*.glm.test"], label="names")
    message = refused(cert, tlsName="a.b.glm.test")
    assert "glm:front.tlsName=a.b.glm.test is not a name glm:tlsCertificate carries" in message
    assert "(it names glm-front.test, *.glm.test)" in message
    assert "`scripts/pulumi.sh config rm --path 'glm:front.tlsName'" in message


def test_a_certificate_without_a_name_needs_one(ca: TestCa) -> None:
    cert, _ = ca.issue([], label="nameless")
    message = refused(cert)
    assert "glm:tlsCertificate carries no subjectAltName" in message
    assert "`scripts/pulumi.sh config set --path 'glm:front.tlsName'" in message


def test_what_is_not_a_certificate_is_refused_without_being_printed(ca: TestCa) -> None:
    message = refused("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    assert "glm:tlsCertificate is not a PEM certificate openssl can read" in message
    assert "bm90IGEgY2VydA" not in message
    cert, _ = ca.issue(["DNS:glm-front.test"], label="ok")
    message = refused(cert, tlsCaCertificate="not a certificate at all")
    assert "glm:front.tlsCaCertificate is not a PEM certificate" in message
    assert "`scripts/pulumi.sh config set --path 'glm:front.tlsCaCertificate'" in message


@pytest.mark.parametrize("name", ["*.glm.test", "two words", "-bad.example"])
def test_a_tls_name_must_be_a_host_name(name: str) -> None:
    with pytest.raises(ConfigError, match=r"glm:front\.tlsName=.* is not a host name or IP address"):
        build_stack_config({"hardware": "local", "front": {"tls": True, "tlsName": name}})


def test_without_tls_nothing_is_verified_and_nothing_read(tmp_path: Path) -> None:
    config = build_stack_config({"hardware": "local"}, SecretInputs(api_keys=KEYS, tls_certificate_pem="x"))
    assert config.front.tls_name is None and front_tls(config.front) is None
