"""The replica guard, proven with the real ``nginx`` and ``openssl``.

A real nginx runs the rendered guard config on loopback in front of a recording upstream (what
reached "vLLM", headers included) or the vLLM-protocol simulator (streaming); with TLS, the
certificate is the one ``openssl`` made for the stack and the client that verifies it is a second
real nginx configured with the front snippet, as the front will be. Then the component under mocks.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pulumi
import pytest
from pulumi.runtime import rpc

from components.config import ConfigError, build_stack_config
from components.docker.nginx_reload import START_COMMAND
from components.docker.replica_guard import ReplicaGuard, ReplicaGuardArgs
from components.render.nginx_conf import FRONT_SNIPPET, FRONT_TRUST
from components.render.replica_guard import (
    KEY_FILE,
    SCRAPE_KEY_FILE,
    TLS_NAME,
    render_front_snippet,
    render_guard_files,
)
from components.serving.replica_credentials import (
    GuardCredentials,
    ReplicaCertificate,
    _ReplicaCertificateProvider,
    self_signed,
)
from components.serving.spec import render_serving
from tests.conftest import (
    GATE_METRICS_TEST_KEY,
    PROJECT,
    REPLICA_SCRAPE_TEST_KEY,
    TEST_HOST_KEY,
    RecordingMocks,
    redacted,
)
from tests.engine import free_port
from tests.front_rig import (
    SERVED,
    RecordingUpstream,
    assert_forward_secret_tls,
    recording_upstream,
    spread_over_time,
    vllm_sim,
)
from tests.guard_rig import FRONT, KEY, SCRAPE_KEY, guard_files, nginx, request

AUTH = {"Authorization": f"Bearer {KEY}"}
SCRAPE_AUTH = {"Authorization": f"Bearer {SCRAPE_KEY}"}


@pytest.fixture(scope="module")
def guarded() -> Iterator[int]:
    """The guard's port, before a recording upstream (``RecordingUpstream.seen``)."""
    with recording_upstream() as upstream, nginx(guard_files(f"127.0.0.1:{upstream}")) as (port, _):
        yield port


@pytest.fixture(autouse=True)
def _fresh_recording() -> None:
    RecordingUpstream.seen.clear()


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer sk-replica-wrong"}, {"Authorization": f"Bearer {KEY.upper()}"},
     {"Authorization": f"bearer {KEY}"}, {"Authorization": KEY},
     {"Authorization": f"Bearer {KEY}x"}],
    ids=["none", "wrong", "other-case", "scheme-case", "no-scheme", "longer"],
)  # fmt: skip
@pytest.mark.parametrize("path", ["/v1/models", "/metrics", "/health", "/tokenize", "/nowhere"])
def test_without_the_key_every_path_gets_the_json_401(
    guarded: int, headers: dict[str, str], path: str
) -> None:
    status, body, response_headers = request(guarded, "GET", path, headers)
    assert status == 401
    assert json.loads(body)["error"]["code"] == "invalid_api_key"
    assert response_headers["content-type"] == "application/json"
    assert response_headers["www-authenticate"] == 'Bearer realm="glm-replica"'
    assert RecordingUpstream.seen == []


ALLOWED = [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
           ("POST", "/v1/responses"), ("GET", "/metrics"), ("GET", "/version"), ("GET", "/health")]  # fmt: skip


def test_with_the_key_the_allowed_routes_reach_vllm_without_the_key(guarded: int) -> None:
    for method, path in ALLOWED:
        assert request(guarded, method, path, {**AUTH, "X-Request-Id": "r1"})[0] == 200, path
    assert [(method, path) for method, path, _ in RecordingUpstream.seen] == ALLOWED
    for _, _, headers in RecordingUpstream.seen:
        assert "authorization" not in headers
        assert headers["x-request-id"] == "r1"  # the front's id passes through


@pytest.mark.parametrize("method,path", [(m, p) for m, p in ALLOWED if p.startswith("/v1/")])
def test_the_scrape_key_opens_no_inference_route(guarded: int, method: str, path: str) -> None:
    """Issue 33 finding 3: the key Prometheus and the probe's metrics reads hold runs no inference."""
    status, body, headers = request(guarded, method, path, SCRAPE_AUTH)
    assert (status, json.loads(body)["error"]["code"]) == (401, "invalid_api_key")
    assert headers["www-authenticate"] == 'Bearer realm="glm-replica"'
    assert RecordingUpstream.seen == []


def test_the_scrape_key_reads_metrics_version_and_health(guarded: int) -> None:
    for path in ("/metrics", "/version", "/health"):
        assert request(guarded, "GET", path, SCRAPE_AUTH)[0] == 200, path
    assert [path for _, path, _ in RecordingUpstream.seen] == ["/metrics", "/version", "/health"]
    assert all("authorization" not in headers for _, _, headers in RecordingUpstream.seen)
    assert request(guarded, "POST", "/metrics", SCRAPE_AUTH)[0] == 405  # still GET only


def test_one_key_for_both_is_refused() -> None:
    with pytest.raises(ConfigError, match="one key"):
        render_guard_files(FRONT, "vllm:0", KEY, KEY)


@pytest.mark.parametrize(
    "method,path",
    [("POST", "/tokenize"), ("POST", "/detokenize"), ("GET", "/ping"), ("POST", "/v1/embeddings"),
     ("POST", "/v1/load_lora_adapter"), ("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/v1"),
     ("POST", "/v1/score"), ("GET", "/metrics/../tokenize")],
)  # fmt: skip
def test_other_vllm_routes_get_the_json_404(guarded: int, method: str, path: str) -> None:
    status, body, _ = request(guarded, method, path, AUTH)
    assert (status, json.loads(body)["error"]["code"]) == (404, "not_found")
    assert RecordingUpstream.seen == []


def test_read_only_routes_take_get_only(guarded: int) -> None:
    status, body, headers = request(guarded, "POST", "/metrics", AUTH)
    assert (status, json.loads(body)["error"]["code"], headers["allow"]) == (405, "method_not_allowed", "GET")
    assert RecordingUpstream.seen == []


def test_streams_pass_unbuffered() -> None:
    with vllm_sim() as sim, nginx(guard_files(f"127.0.0.1:{sim}")) as (port, _):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=30)
        start, arrivals = time.monotonic(), []
        stream = client.chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": "A long story."}], max_tokens=40, stream=True
        )
        for _ in stream:
            arrivals.append(time.monotonic() - start)
        total = time.monotonic() - start
    assert total >= 1.5, f"the stream took {total:.2f} s; the simulator paces 40 tokens at 0.05 s"
    assert spread_over_time(arrivals, total), f"chunks arrived at {arrivals} of {total:.2f} s"


def test_engine_down_closes_the_connection_so_the_front_tries_another_replica() -> None:
    with nginx(guard_files(f"127.0.0.1:{free_port()}")) as (port, _):
        with pytest.raises(http.client.RemoteDisconnected):
            request(port, "GET", "/v1/models", AUTH)
        assert request(port, "GET", "/v1/models", {})[0] == 401  # still no answer without the key


# ---- TLS: the stack's certificate, verified as the front verifies it ---------------------------


@pytest.fixture(scope="module")
def pair() -> tuple[str, str]:
    return self_signed(["127.0.0.1", "gpu02"])


def test_the_certificate_names_the_replicas_and_the_pinned_name(
    pair: tuple[str, str], tmp_path: Path
) -> None:
    (tmp_path / "c.pem").write_text(pair[0])
    shown = subprocess.run(
        ["openssl", "x509", "-in", str(tmp_path / "c.pem"), "-noout", "-ext", "subjectAltName,basicConstraints"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"DNS:{TLS_NAME}, IP Address:127.0.0.1, DNS:gpu02" in shown and "CA:FALSE" in shown
    assert "PRIVATE KEY" in pair[1]


def front_files(guard_port: int, trusted: str) -> dict[str, str]:
    """A minimal front: one location that includes the snippet and proxies over https."""
    snippet = render_front_snippet(KEY, trusted)
    conf = f"""pid {{dir}}/nginx.pid;
error_log stderr warn;
events {{}}
http {{
    client_body_temp_path {{dir}}/cb; proxy_temp_path {{dir}}/px; fastcgi_temp_path {{dir}}/fc;
    uwsgi_temp_path {{dir}}/uw; scgi_temp_path {{dir}}/sc;
    server {{
        listen 127.0.0.1:{{port}};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        include {FRONT_SNIPPET};
        location / {{
            proxy_pass https://127.0.0.1:{guard_port};
        }}
    }}
}}
"""
    return {"nginx.conf": conf, **snippet}


def test_tls_guard_is_verified_by_a_front_that_pins_its_certificate(pair: tuple[str, str]) -> None:
    with (
        recording_upstream() as upstream,
        nginx(guard_files(f"127.0.0.1:{upstream}", pair)) as (guard, _),
        nginx(front_files(guard, pair[0])) as (front, _),
    ):
        for path in ("/v1/models", "/metrics"):
            assert request(front, "GET", path, {})[0] == 200
        assert [path for _, path, _ in RecordingUpstream.seen] == ["/v1/models", "/metrics"]
        assert all("authorization" not in headers for _, _, headers in RecordingUpstream.seen)
        # Python's ssl (OpenSSL) trusting only this certificate: the address is in the SAN too.
        context = ssl.create_default_context(cadata=pair[0])
        assert httpx.get(f"https://127.0.0.1:{guard}/health", headers=AUTH, verify=context).status_code == 200
        # Plain HTTP to the TLS port: closed without an answer (nginx's 497), nothing proxied.
        seen = len(RecordingUpstream.seen)
        with pytest.raises(http.client.RemoteDisconnected):
            request(guard, "GET", "/v1/models", AUTH)
        assert len(RecordingUpstream.seen) == seen


def test_tls_guard_is_as_strict_as_the_front(pair: tuple[str, str]) -> None:
    """Issue 33 finding 4: no CBC or non-forward-secret TLS 1.2 suite, no session tickets."""
    with recording_upstream() as upstream, nginx(guard_files(f"127.0.0.1:{upstream}", pair)) as (guard, _):
        assert_forward_secret_tls(guard)


def test_a_front_trusting_another_certificate_refuses_the_guard(pair: tuple[str, str]) -> None:
    other = self_signed(["127.0.0.1"])[0]
    with (
        recording_upstream() as upstream,
        nginx(guard_files(f"127.0.0.1:{upstream}", pair)) as (guard, _),
        nginx(front_files(guard, other)) as (front, directory),
    ):
        assert request(front, "GET", "/v1/models", {})[0] == 502
        assert RecordingUpstream.seen == []
        assert "upstream SSL certificate verify error" in (directory / "nginx.log").read_text()


def test_the_plain_snippet_sends_only_the_key() -> None:
    assert render_front_snippet(KEY) == {
        FRONT_SNIPPET: "# Rendered by components/render/replica_guard.py: the front's credential for its "
        f'replicas\' guards.\nproxy_set_header Authorization "Bearer {KEY}";\n'
    }
    assert FRONT_TRUST in render_front_snippet(KEY, "PEM")


# ---- the component under Pulumi mocks ----------------------------------------------------------

CERT, PRIVATE = "-----BEGIN CERTIFICATE-----\nc\n", "-----BEGIN PRIVATE KEY-----\nk\n"


class CertificateMocks(RecordingMocks):
    """What ReplicaCertificate's create would return, without running openssl."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        name, outputs = super().new_resource(args)
        if "addresses" in args.inputs:
            outputs.update(certificate=CERT, certificate_sha256="ab" * 32, private_key=PRIVATE)
        return name, outputs


def build_guard(tls: bool, publish: str | None = "10.1.2.3") -> tuple[RecordingMocks, Any]:
    raw = {"hardware": "a800", "front": {"tls": tls, "allowPlainHttp": not tls},
           "target": {"hosts": [{"name": "gpu02", "dockerHost": "ssh://deploy@gpu02", "hostKey": TEST_HOST_KEY}]}}  # fmt: skip
    config = build_stack_config(raw)
    mocks = CertificateMocks()
    pulumi.runtime.set_mocks(mocks, project="glm", stack="test", preview=False)
    seen: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[None]:
        key = pulumi.Output.secret(GATE_METRICS_TEST_KEY)
        scrape = pulumi.Output.secret(REPLICA_SCRAPE_TEST_KEY)
        cert = ReplicaCertificate("stack-replica-tls", [publish or "gpu01"]) if tls else None
        guard = ReplicaGuard(
            "gpu02-guard",
            ReplicaGuardArgs(
                render_serving(config), config.front, config.target.host, publish, "glm-net",
                GuardCredentials(key, scrape, cert),
            ),
        )  # fmt: skip
        seen["upstream"] = guard.upstream
        return GuardCredentials(key, scrape, cert).front_files().apply(lambda f: seen.update(front_files=f))

    program()
    return mocks, (config, seen)


@pytest.mark.parametrize("tls", [False, True], ids=["http", "tls"])
def test_guard_under_mocks_publishes_on_one_address_with_the_key_secret(tls: bool) -> None:
    mocks, (config, seen) = build_guard(tls)
    registered = mocks.registered
    inputs = registered["gpu02-guard-nginx"][1]
    assert inputs["name"] == f"{config.container.name}-guard"
    assert [{k: p[k] for k in ("internal", "external", "ip")} for p in inputs["ports"]] == [
        {"internal": 8080, "external": config.serving.port, "ip": "10.1.2.3"}
    ]
    # Beside vLLM (.10) on the private network, at a fixed address: the front's rotation needs no DNS.
    vllm = config.container.vllm_address
    assert inputs["networksAdvanced"] == [{"name": "glm-net", "ipv4Address": vllm.rsplit(".", 1)[0] + ".11"}]
    assert inputs["command"] == [START_COMMAND] and "uploads" not in inputs
    assert {"label": "glm53.role", "value": "replica-guard"} in inputs["labels"]
    assert seen["upstream"] == f"10.1.2.3:{config.serving.port}"
    reload = registered["gpu02-guard-config"][1]
    assert f"server {config.container.vllm_address}:{config.serving.port};" in reload["nginx_conf"]
    assert rpc.is_rpc_secret(reload["secret_files"])
    files = rpc.unwrap_rpc_secret(reload["secret_files"])
    assert GATE_METRICS_TEST_KEY in files[KEY_FILE] and REPLICA_SCRAPE_TEST_KEY not in files[KEY_FILE]
    assert (
        REPLICA_SCRAPE_TEST_KEY in files[SCRAPE_KEY_FILE]
        and GATE_METRICS_TEST_KEY not in files[SCRAPE_KEY_FILE]
    )
    assert ("listen 8080 ssl;" in reload["nginx_conf"]) is tls
    assert (files.get("tls.key") == PRIVATE) is tls
    assert (reload["api_key_names"], reload["metrics_key_names"]) == ({"front": True}, {"scrape": True})
    assert len(reload["fingerprint"]) == 64
    # The front sends the replica key, never the scrape key.
    assert f'"Bearer {GATE_METRICS_TEST_KEY}"' in seen["front_files"][FRONT_SNIPPET]
    assert REPLICA_SCRAPE_TEST_KEY not in json.dumps(seen["front_files"])
    visible = json.dumps(redacted(registered), default=str)
    assert GATE_METRICS_TEST_KEY not in visible and REPLICA_SCRAPE_TEST_KEY not in visible
    assert "PRIVATE KEY" not in visible


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "[::]", "", "0"])
def test_guard_refuses_to_publish_on_every_interface(address: str) -> None:
    with pytest.raises(Exception, match="publishes on one address"):
        build_guard(False, address)


def test_on_the_front_host_the_guard_publishes_nothing() -> None:
    """The front reaches it on the shared private network, by its fixed address, in the same scheme."""
    mocks, (config, seen) = build_guard(True, None)
    inputs = mocks.registered["gpu02-guard-nginx"][1]
    assert "ports" not in inputs or not inputs["ports"]
    assert seen["upstream"] == f"{config.container.vllm_address.rsplit('.', 1)[0]}.11:8080"


def test_guard_passes_the_policy_pack() -> None:
    sys.path.insert(0, str(PROJECT / "policy"))  # the pack's modules import each other top-level
    import glm_policies as gp

    mocks, _ = build_guard(True)
    resources = [
        gp.Resource(r.type, r.name, gp.normalize(r.inputs), urn=f"urn:pulumi:a800::glm::{r.type}::{r.name}")
        for r in mocks.deployment.resources
    ]
    assert [r.name for r in resources if r.type == gp.CONTAINER] == ["gpu02-guard-nginx"]
    rules = [r for r in gp.RULES if r.name != "volumes-retained"]
    assert [(rule.name, m) for res in resources for rule in rules for m in rule.check(res, {})] == []


def test_the_certificate_is_made_once_and_replaced_for_new_addresses(tmp_path: Path) -> None:
    provider = _ReplicaCertificateProvider()
    created = provider.create({"addresses": ["10.0.0.2"]})
    outs = created.outs
    assert outs["certificate_sha256"] == hashlib.sha256(outs["certificate"].encode()).hexdigest()
    # The key belongs to the certificate: openssl derives the same public key from both.
    (tmp_path / "c.pem").write_text(outs["certificate"])
    (tmp_path / "k.pem").write_text(outs["private_key"])
    public = [
        subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        for argv in (["openssl", "x509", "-in", str(tmp_path / "c.pem"), "-noout", "-pubkey"],
                     ["openssl", "pkey", "-in", str(tmp_path / "k.pem"), "-pubout"])
    ]  # fmt: skip
    assert public[0] == public[1] and "PUBLIC KEY" in public[0]
    same = provider.diff(created.id, outs, {"addresses": ["10.0.0.2"]})
    assert not same.changes
    moved = provider.diff(created.id, outs, {"addresses": ["10.0.0.2", "10.0.0.3"]})
    assert moved.changes and moved.replaces == ["addresses"]
