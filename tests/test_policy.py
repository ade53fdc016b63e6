"""The glm-serving policy pack (policy/).

Each rule on engine-shaped inputs (camelCase, numbers as floats, secrets and unknowns in the
engine's wire markers), one passing and one violating case at least; the pulumi-policy wiring
through pulumi-policy's own analyzer servicer; the pack as ``policy/__main__.py`` builds it; and
the committed stacks, rendered under mocks, against the rules.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import glm_policies as gp
import pulumi
import pytest
from glm_policies import CONTAINER, IMAGE, REMOTE_IMAGE, VOLUME, Resource, Undecidable

from tests.conftest import profile_stacks
from tests.policy_pack import UNKNOWN_STRING, resource

POLICY_DIR = Path(__file__).resolve().parent.parent / "policy"
# The pack's modules import each other as top-level modules, as they do when the engine runs
# policy/ as a program; the tests see them the same way.
sys.path.insert(0, str(POLICY_DIR))

SECRET = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"}
FRONT_LABELS = [{"label": "glm53.role", "value": "front"}]
SERVING_LABELS = [{"label": "glm53.served-model", "value": "glm-5.3-flash"}]
KEYED_CONF = """
http {
    map $http_authorization $api_client {
        default "";
        "~^Bearer sk-test-889f18c11959778d$" "ci";
    }
    server {
        location /v1/ {
            if ($api_client = "") {
                return 401;
            }
            proxy_pass http://vllm/v1/;
        }
    }
}
"""


def check(rule, res: Resource, config: dict[str, Any] | None = None) -> list[str]:
    return rule(res, config or {})


def vllm(**props: Any) -> Resource:
    base = {
        "command": ["/models/GLM-5.3-Flash", "--port=8000", "--tensor-parallel-size=8"],
        "labels": SERVING_LABELS,
        "shmSize": 65536.0,
        "mounts": [
            {"type": "bind", "source": "/data/models", "target": "/models", "readOnly": True},
            {"type": "volume", "source": "glm-jit-cache", "target": "/var/cache/glm53"},
        ],
    }
    return resource(CONTAINER, "a800-serving-vllm", **{**base, **props})


def front(**props: Any) -> Resource:
    base = {
        "labels": FRONT_LABELS,
        "ports": [{"internal": 8080.0, "external": 8008.0, "ip": "0.0.0.0"}],
        "uploads": {
            **SECRET,
            "value": [{"file": "/etc/nginx/nginx.conf", "content": KEYED_CONF, "permissions": "0600"}],
        },
    }
    return resource(CONTAINER, "a800-front-nginx", **{**base, **props})


# --- 1. no-public-serving-port ------------------------------------------------------------------


def test_the_labelled_front_may_publish_on_all_interfaces() -> None:
    assert check(gp.no_public_serving_port, front()) == []


def test_loopback_ports_and_a_portless_vllm_pass() -> None:
    prometheus = resource(
        CONTAINER,
        "a800-monitoring-prometheus",
        ports=[{"internal": 9090.0, "external": 9090.0, "ip": "127.0.0.1"}],
    )
    assert check(gp.no_public_serving_port, prometheus) == []
    assert check(gp.no_public_serving_port, vllm()) == []


@pytest.mark.parametrize("ip", [None, "", "0.0.0.0", "::", "[::]"])
def test_any_other_container_on_all_interfaces_is_refused(ip: str | None) -> None:
    prometheus = resource(
        CONTAINER,
        "a800-monitoring-prometheus",
        ports=[{"internal": 9090.0, "external": 9090.0, "ip": ip}],
    )
    [message] = check(gp.no_public_serving_port, prometheus)
    assert "a800-monitoring-prometheus publishes container port 9090 on host port 9090" in message
    assert "Fix: bind it to 127.0.0.1" in message


def test_the_nginx_suffix_alone_does_not_exempt_a_container() -> None:
    unlabelled = front(labels=[])
    [message] = check(gp.no_public_serving_port, unlabelled)
    assert "label glm53.role=front" in message


def test_a_port_without_external_is_published_on_a_random_host_port() -> None:
    sidecar = resource(CONTAINER, "a800-sidecar", ports=[{"internal": 9000.0}])
    [message] = check(gp.no_public_serving_port, sidecar)
    assert "on a random host port on all interfaces" in message


def test_vllm_may_not_publish_even_on_loopback() -> None:
    exposed = vllm(ports=[{"internal": 8000.0, "external": 8000.0, "ip": "127.0.0.1"}])
    [message] = check(gp.no_public_serving_port, exposed)
    assert "(the vLLM container) publishes container port 8000 on host port 8000 (127.0.0.1)" in message


def test_vllm_on_the_host_network_must_listen_on_loopback() -> None:
    argv = ["/models/GLM-5.3-Flash", "--tensor-parallel-size=8"]
    [message] = check(gp.no_public_serving_port, vllm(networkMode="host", command=argv))
    assert "uses the host network with vLLM listening on all interfaces" in message
    local_only = vllm(networkMode="host", command=[*argv, "--host=127.0.0.1"])
    assert check(gp.no_public_serving_port, local_only) == []


@pytest.mark.parametrize("host", ["0", "*"])
def test_vllm_on_the_host_network_on_short_all_interface_spellings_is_caught(host: str) -> None:
    """The seed's bridge-gateway --host, then an extra `--host=0` (argparse keeps the last one)."""
    argv = ["/models/GLM-5.3-Flash", "--host=172.17.0.1", f"--host={host}"]
    [message] = check(gp.no_public_serving_port, vllm(networkMode="host", command=argv))
    assert f"uses the host network with vLLM listening on {host}" in message


def test_an_unknown_bind_address_is_undecidable_except_on_vllm() -> None:
    pending = [{"internal": 80.0, "external": 80.0, "ip": UNKNOWN_STRING}]
    with pytest.raises(Undecidable, match="the address of port 80 is not known yet"):
        check(gp.no_public_serving_port, resource(CONTAINER, "x", ports=pending))
    [message] = check(gp.no_public_serving_port, vllm(ports=pending))
    assert "publishes container port 80 on host port 80 (?)" in message
    assert check(gp.no_public_serving_port, front(ports=pending)) == []


# --- 2. front-requires-api-key ------------------------------------------------------------------


def test_a_keyed_nginx_conf_passes_also_when_uploads_are_secret() -> None:
    assert check(gp.front_requires_api_key, front()) == []
    plain = front(uploads=[{"file": "/etc/nginx/nginx.conf", "content": KEYED_CONF}])
    assert check(gp.front_requires_api_key, plain) == []


@pytest.mark.parametrize(
    ("conf", "lacks"),
    [
        (
            KEYED_CONF.replace("map $http_authorization", "map $http_x_user"),
            "lacks `map $http_authorization $<client> { ... }` (API key -> client), so",
        ),
        (
            KEYED_CONF.replace("return 401;", "return 200;"),
            "lacks `return 401` for requests without a known key, so",
        ),
    ],
)
def test_a_conf_without_the_key_check_is_refused(conf: str, lacks: str) -> None:
    keyless = front(uploads={**SECRET, "value": [{"file": "/etc/nginx/nginx.conf", "content": conf}]})
    [message] = check(gp.front_requires_api_key, keyless)
    assert lacks in message
    assert "sk-test" not in message, "the message must never quote nginx.conf (it holds the keys)"


def test_a_front_without_nginx_conf_is_refused_and_found_by_its_suffix() -> None:
    bare = front(labels=[], uploads=[])
    [message] = check(gp.front_requires_api_key, bare)
    assert "uploads no /etc/nginx/nginx.conf and does not read" in message


def test_an_unknown_conf_is_skipped_with_a_note() -> None:
    pending = front(
        uploads={**SECRET, "value": [{"file": "/etc/nginx/nginx.conf", "content": UNKNOWN_STRING}]}
    )
    with pytest.raises(Undecidable, match="not known until the update runs"):
        check(gp.front_requires_api_key, pending)
    with pytest.raises(Undecidable, match="`uploads` is not known"):
        check(gp.front_requires_api_key, front(uploads=UNKNOWN_STRING))


def test_a_front_delivered_by_nginx_reload_is_checked_on_its_nginx_conf() -> None:
    from components.docker.nginx_reload import START_COMMAND
    from components.render.nginx_conf import render_release_conf
    from tests.front_rig import stack

    container = front(uploads=[], entrypoints=["/bin/sh", "-c"], command=[START_COMMAND])
    assert check(gp.front_requires_api_key, container) == []
    conf = render_release_conf(stack("a800").front)
    reload = resource(gp.DYNAMIC, "a800-front-config", nginx_conf=conf, api_key_names={"ci": True})
    assert check(gp.front_requires_api_key, reload) == []
    keyless = resource(gp.DYNAMIC, "a800-front-config", nginx_conf=conf.replace("return 401", "return 200"))
    [message] = check(gp.front_requires_api_key, keyless)
    assert "nginx_conf lacks `return 401`" in message
    # The gate's dynamic resource has no nginx_conf: not a front.
    assert check(gp.front_requires_api_key, resource(gp.DYNAMIC, "a800-smoke-gate", argv=[])) == []


def test_other_containers_are_not_fronts() -> None:
    assert check(gp.front_requires_api_key, vllm()) == []


# --- 3. images-pinned ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("nginx:1.27", None),
        ("quay.io/ascend/vllm-ascend:glm-5.3-flash", None),
        ("vllm/vllm-openai:nightly-385dce36b", None),
        ("glm53-flash-sm80:735fc1ee33797212", None),
        ("sha256:" + "ab" * 32, None),
        ("vllm/vllm-openai:nightly@sha256:" + "cd" * 32, None),
        ("localhost:5000/glm:v1", None),
        ("nginx:latest", "uses the :latest tag"),
        ("nginx", "has no tag (Docker pulls :latest)"),
        ("localhost:5000/glm", "has no tag (Docker pulls :latest)"),
        ("vllm/vllm-openai:nightly", "uses the floating :nightly tag"),
        ("vllm/vllm-openai:cu130-nightly", "uses the floating :cu130-nightly tag"),
    ],
)
def test_unpinned_reason(ref: str, reason: str | None) -> None:
    assert gp.unpinned_reason(ref) == reason


def test_pinned_images_pass() -> None:
    pulled = resource(REMOTE_IMAGE, "a800-front-image", name="nginx:1.27")
    built = resource(
        IMAGE,
        "a800-image-build",
        imageName="glm53-flash-sm80:735fc1ee33797212",
        build={"args": {"BASE_IMAGE": "vllm/vllm-openai:v0.33.0"}},
    )
    by_id = resource(CONTAINER, "a800-front-nginx", image="sha256:" + "ab" * 32)
    for res in (pulled, built, by_id):
        assert check(gp.images_pinned, res) == []


def test_floating_images_are_refused_wherever_they_appear() -> None:
    [pulled] = check(gp.images_pinned, resource(REMOTE_IMAGE, "f", name="nginx:latest"))
    assert "f: name 'nginx:latest' uses the :latest tag" in pulled
    [base] = check(
        gp.images_pinned,
        resource(
            IMAGE, "b", imageName="glm:abc123", build={"args": {"BASE_IMAGE": "vllm/vllm-openai:nightly"}}
        ),
    )
    assert "build.args.BASE_IMAGE 'vllm/vllm-openai:nightly' uses the floating :nightly tag" in base
    [run] = check(gp.images_pinned, resource(CONTAINER, "c", image="glm53-vllm-sim"))
    assert "image 'glm53-vllm-sim' has no tag" in run


def test_a_computed_container_image_is_left_to_its_source() -> None:
    with pytest.raises(Undecidable, match="RemoteImage/Image it comes from is checked instead"):
        check(gp.images_pinned, resource(CONTAINER, "c", image=UNKNOWN_STRING))


@pytest.mark.parametrize(
    ("stack", "config", "relaxed"),
    [
        ("a800", {}, False),
        ("a800-staging", {}, True),
        ("rtx5090-dev", {}, True),
        ("local", {}, True),
        ("local", {"relaxedStacks": []}, False),
        ("a800-canary", {"relaxedStackSuffixes": ["-canary"]}, True),
    ],
)
def test_relaxed_stacks(stack: str, config: dict[str, Any], relaxed: bool) -> None:
    assert gp.is_relaxed_stack(stack, config) is relaxed


def test_the_stack_comes_from_the_urn() -> None:
    assert gp.stack_of("urn:pulumi:a800-staging::glm::docker:index/volume:Volume::v") == "a800-staging"
    assert gp.stack_of("not-a-urn") is None


# --- 4. shm-for-tensor-parallel -----------------------------------------------------------------


def test_tensor_parallel_with_a_large_shm_or_host_ipc_passes() -> None:
    assert check(gp.shm_for_tensor_parallel, vllm()) == []
    assert check(gp.shm_for_tensor_parallel, vllm(shmSize=None, ipcMode="host")) == []
    single = vllm(command=["/models/m", "--tensor-parallel-size=1"], shmSize=None)
    assert check(gp.shm_for_tensor_parallel, single) == []


@pytest.mark.parametrize(
    ("command", "shm", "shown"),
    [
        (["/models/m", "--tensor-parallel-size=8"], 64.0, "64 MB"),
        (["/models/m", "--tensor-parallel-size=8"], None, "unset (Docker's 64 MB)"),
        (["/models/m", "-tp", "2"], None, "unset (Docker's 64 MB)"),
    ],
)
def test_tensor_parallel_on_docker_default_shm_is_refused(
    command: list[str], shm: float | None, shown: str
) -> None:
    [message] = check(gp.shm_for_tensor_parallel, vllm(command=command, shmSize=shm))
    assert f"with shmSize {shown} and ipcMode unset" in message
    assert "Fix: glm:container.shmSize (e.g. 64g) or glm:container.ipcMode host." in message


@pytest.mark.parametrize(
    ("tp", "shm", "ipc"),  # an unset shmSize is the config's 64g
    [
        (8, "64m", None),
        (8, "65m", None),
        (8, "64m", "host"),
        (1, "64m", None),
        (2, "64m", None),
        (8, "1g", None),
    ],
)
def test_the_config_refuses_what_the_pack_refuses(tp: int, shm: str, ipc: str | None) -> None:
    """Config and pack agree on shm: a stack the pack would refuse never reaches it."""
    from components.config import ConfigError, build_stack_config

    raw = {
        "hardware": "local",
        "serving": {"tensorParallelSize": tp},
        "container": {"accelerators": list(range(tp)), "shmSize": shm, "ipcMode": ipc},
    }
    try:
        build_stack_config(raw)
        refused_by_config = False
    except ConfigError as err:
        assert "glm:container.shmSize" in str(err)
        refused_by_config = True
    units = {"m": 1.0, "g": 1024.0}
    container = vllm(
        command=["/models/m", f"--tensor-parallel-size={tp}"],
        shmSize=float(shm[:-1]) * units[shm[-1]],
        ipcMode=ipc,
    )
    assert bool(check(gp.shm_for_tensor_parallel, container)) is refused_by_config


# --- 5. weights-read-only -----------------------------------------------------------------------


def test_read_only_weights_pass_with_other_writable_binds() -> None:
    ascend = vllm(
        command=["/root/.cache/GLM-5.3-Flash-w8a8", "--tensor-parallel-size=8"],
        mounts=[
            {"type": "bind", "source": "/mnt/sdb", "target": "/root/.cache", "readOnly": True},
            {"type": "volume", "source": "cache", "target": "/var/cache/glm53"},
            {"type": "bind", "source": "/usr/local/Ascend/driver", "target": "/usr/local/Ascend/driver"},
        ],
    )
    assert check(gp.weights_read_only, ascend) == []


def test_writable_weights_are_refused() -> None:
    writable = vllm(mounts=[{"type": "bind", "source": "/data/models", "target": "/models"}])
    [message] = check(gp.weights_read_only, writable)
    assert "mounts the weights /data/models -> /models writable" in message


def test_the_bind_holding_the_model_path_counts_even_when_not_first() -> None:
    mounts = [
        {"type": "bind", "source": "/etc/hccn.conf", "target": "/etc/hccn.conf", "readOnly": True},
        {"type": "bind", "source": "/data/models", "target": "/models", "readOnly": False},
    ]
    [message] = check(gp.weights_read_only, vllm(mounts=mounts))
    assert "/data/models -> /models writable" in message


def test_other_containers_may_bind_writable() -> None:
    sidecar = resource(CONTAINER, "a800-sidecar", mounts=[{"type": "bind", "source": "/d", "target": "/d"}])
    assert check(gp.weights_read_only, sidecar) == []


# --- 6. volumes-retained ------------------------------------------------------------------------


def volume(name: str, **opts: Any) -> Resource:
    return Resource(VOLUME, name, {"name": f"glm53-{name}"}, **opts)


def test_protected_retained_or_declared_volumes_pass() -> None:
    assert check(gp.volumes_retained, volume("a800-monitoring-data", protect=True)) == []
    assert check(gp.volumes_retained, volume("a800-monitoring-data", retain_on_delete=True)) == []
    assert check(gp.volumes_retained, volume("a800-model-jit-cache")) == []
    declared = {"retainedVolumeSuffixes": ["-data"]}
    assert check(gp.volumes_retained, volume("a800-monitoring-data"), declared) == []


def test_an_unprotected_volume_is_refused() -> None:
    [message] = check(gp.volumes_retained, volume("a800-monitoring-data"))
    assert "a800-monitoring-data (Docker volume glm53-a800-monitoring-data) is neither protected" in message
    # Where retain_on_delete can be seen, it beats the declaration.
    assert check(gp.volumes_retained, volume("a800-model-jit-cache", retain_on_delete=False))


def test_a_violation_is_reported_as_mandatory(analyze) -> None:
    diagnostics, _ = analyze(
        CONTAINER,
        "a800-monitoring-prometheus",
        {
            "ports": [{"internal": 9090, "external": 9090, "ip": "0.0.0.0"}],
            "image": "prom/prometheus:v2.53.0",
        },
    )
    assert list(diagnostics) == [("no-public-serving-port", "MANDATORY")]
    assert "publishes container port 9090 on host port 9090 on all interfaces" in next(
        iter(diagnostics.values())
    )


def test_an_unknown_secret_conf_is_not_applicable_not_a_crash(analyze) -> None:
    conf = {"file": "/etc/nginx/nginx.conf", "content": UNKNOWN_STRING}
    props = {
        "labels": [*FRONT_LABELS, {"label": "glm53.tls", "value": "on"}],
        "image": UNKNOWN_STRING,
        "ports": [{"internal": 8080, "external": 8008, "ip": "0.0.0.0"}],
        "uploads": {**SECRET, "value": [conf]},
    }
    diagnostics, not_applicable = analyze(CONTAINER, "a800-front-nginx", props)
    assert diagnostics == {}
    assert not_applicable["front-requires-api-key"].startswith(
        "skipped: a800-front-nginx: the /etc/nginx/nginx.conf"
    )
    assert "images-pinned" in not_applicable


def test_a_keyed_secret_conf_passes_through_the_analyzer(analyze) -> None:
    conf = {"file": "/etc/nginx/nginx.conf", "content": KEYED_CONF}
    props = {"labels": FRONT_LABELS, "uploads": {**SECRET, "value": [conf]}}
    assert analyze(CONTAINER, "a800-front-nginx", props) == ({}, {})


def test_unpinned_images_are_advisory_on_relaxed_stacks(analyze, capsys) -> None:
    diagnostics, not_applicable = analyze(REMOTE_IMAGE, "local-front-image", {"name": "nginx"}, stack="local")
    assert diagnostics == {}
    assert not_applicable["images-pinned"].startswith(
        "advisory on stack local: local-front-image: name 'nginx'"
    )
    assert "advisory [images-pinned] on stack local: local-front-image" in capsys.readouterr().err
    diagnostics, _ = analyze(REMOTE_IMAGE, "a800-front-image", {"name": "nginx"}, stack="a800")
    assert list(diagnostics) == [("images-pinned", "MANDATORY")]


def test_protect_reaches_the_volume_rule(analyze) -> None:
    assert analyze(VOLUME, "a800-monitoring-data", {"name": "d"}, protect=True) == ({}, {})
    diagnostics, _ = analyze(VOLUME, "a800-monitoring-data", {"name": "d"})
    assert list(diagnostics) == [("volumes-retained", "MANDATORY")]


def test_the_pack_serves_exactly_the_twelve_policies(monkeypatch, capfd) -> None:
    """Run policy/ as the engine does; stop the server at its first idle sleep; ask it what it serves."""
    pytest.importorskip("pulumi_policy", reason="pip install -r policy/requirements.txt")
    import pulumi_policy.policy as sdk

    servicers = []

    class Recording(sdk._PolicyAnalyzerServicer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            servicers.append(self)

    def stop(_seconds: float) -> None:
        raise KeyboardInterrupt  # PolicyPack's serve loop stops the server on this

    monkeypatch.setattr(sdk, "_PolicyAnalyzerServicer", Recording)
    monkeypatch.setattr(sdk.time, "sleep", stop)
    runpy.run_path(str(POLICY_DIR), run_name="__main__")

    assert capfd.readouterr().out.strip().isdigit(), "the pack prints its gRPC port for the engine"
    info = servicers[0].GetAnalyzerInfo(None, None)
    assert info.name == "glm-serving"
    assert [p.name for p in info.policies] == [
        "no-public-serving-port",
        "front-requires-api-key",
        "images-pinned",
        "shm-for-tensor-parallel",
        "weights-read-only",
        "volumes-retained",
        "front-tls-on-public-bind",
        "published-port-needs-credential",
        "k8s-serving-service-private",
        "k8s-node-port-opted-in",
        "k8s-pod-not-privileged",
        "k8s-gpu-requests",
        "k8s-pod-least-privilege",
    ]
    assert {p.enforcementLevel for p in info.policies} == {sdk.proto.MANDATORY}


def test_the_pack_answers_the_engine_over_grpc(tmp_path: Path) -> None:
    """As a language host starts it: ``python policy/ <engine address>``, port on stdout, then RPCs."""
    pytest.importorskip("pulumi_policy", reason="pip install -r policy/requirements.txt")
    import grpc
    from google.protobuf import empty_pb2, struct_pb2
    from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

    pack = subprocess.Popen(
        [sys.executable, "-u", str(POLICY_DIR), "127.0.0.1:1"],
        cwd=tmp_path,  # not the repo: the pack must find its own modules
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert pack.stdout is not None
        port = int(pack.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = analyzer_pb2_grpc.AnalyzerStub(channel)
            info = stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
            assert (info.name, len(info.policies)) == ("glm-serving", 13)
            properties = struct_pb2.Struct()
            properties.update({"ports": [{"internal": 8000, "external": 8000, "ip": "127.0.0.1"}]})
            request = analyzer_pb2.AnalyzeRequest(
                type=CONTAINER,
                name="a800-serving-vllm",
                urn=f"urn:pulumi:a800::glm::{CONTAINER}::a800-serving-vllm",
                properties=properties,
            )
            response = stub.Analyze(request, timeout=30)
        assert [d.policyName for d in response.diagnostics] == ["no-public-serving-port"]
    finally:
        pack.kill()
        pack.wait(timeout=10)


def test_the_yaml_declares_a_python_pack() -> None:
    import yaml

    pack = yaml.safe_load((POLICY_DIR / "PulumiPolicy.yaml").read_text())
    assert pack["runtime"] == "python" and pack["description"]
    assert "pulumi-policy==1.21.0" in (POLICY_DIR / "requirements.txt").read_text().splitlines()


# --- 7. front-tls-on-public-bind ----------------------------------------------------------------


def test_a_plain_http_front_on_a_public_bind_is_refused() -> None:
    [message] = check(gp.front_tls_on_public_bind, front())
    assert "a800-front-nginx (the Nginx front) serves plain HTTP on 0.0.0.0:8008" in message
    assert "glm:front.tls" in message and "glm:front.allowPlainHttp" in message


@pytest.mark.parametrize(
    "props",
    [
        {"labels": [*FRONT_LABELS, {"label": "glm53.tls", "value": "on"}]},
        {"labels": [*FRONT_LABELS, {"label": "glm53.plain-http", "value": "accepted"}]},
        {"ports": [{"internal": 8080.0, "external": 8080.0, "ip": "127.0.0.1"}]},
    ],
    ids=["tls", "opted-in", "loopback"],
)
def test_tls_an_explicit_opt_in_or_loopback_pass(props: dict[str, Any]) -> None:
    assert check(gp.front_tls_on_public_bind, front(**props)) == []


def test_an_unknown_front_bind_is_undecidable() -> None:
    with pytest.raises(Undecidable):
        check(gp.front_tls_on_public_bind, front(ports=[{"internal": 8080.0, "ip": UNKNOWN_STRING}]))


# --- 8. published-port-needs-credential ---------------------------------------------------------

PRIVATE_PORT = [{"internal": 9090.0, "external": 9090.0, "ip": "10.0.0.5"}]
MONITORING_LABELS = [{"label": "glm53.role", "value": "monitoring"}]


def prometheus(**props: Any) -> Resource:
    base = {"labels": MONITORING_LABELS, "ports": PRIVATE_PORT}
    return resource(CONTAINER, "a800-monitoring-prometheus", **{**base, **props})


def test_a_port_on_a_private_address_without_a_credential_is_refused() -> None:
    """Rule 1 lets a specific address through; Prometheus checks no key, so anyone on that network
    reads every metric and queries the API."""
    assert check(gp.no_public_serving_port, prometheus()) == []
    [message] = check(gp.published_port_needs_credential, prometheus())
    assert "a800-monitoring-prometheus publishes 10.0.0.5:9090 with no credential in front of it" in message
    assert "glm:monitoring.allowPublicBind: true (label glm53.public-bind=accepted)" in message


@pytest.mark.parametrize(
    "res",
    [
        prometheus(labels=[*MONITORING_LABELS, {"label": "glm53.public-bind", "value": "accepted"}]),
        prometheus(ports=[{"internal": 9090.0, "external": 9090.0, "ip": "127.0.0.1"}]),
        prometheus(ports=[{"internal": 9090.0, "external": 9090.0, "ip": "0.0.0.0"}]),  # rule 1's
        prometheus(ports=None),
        front(ports=PRIVATE_PORT),
        resource(CONTAINER, "a800-gpu02-guard-nginx", ports=PRIVATE_PORT,
                 labels=[{"label": "glm53.role", "value": "replica-guard"}]),
        vllm(ports=PRIVATE_PORT),  # rule 1's: vLLM may publish nothing at all
    ],
    ids=["opted-in", "loopback", "all-interfaces", "no-port", "front", "guard", "vllm"],
)  # fmt: skip
def test_a_keyed_container_an_opt_in_or_loopback_pass(res: Resource) -> None:
    assert check(gp.published_port_needs_credential, res) == []


def test_an_unknown_bind_address_is_undecidable() -> None:
    with pytest.raises(Undecidable):
        check(
            gp.published_port_needs_credential, prometheus(ports=[{"internal": 9090.0, "ip": UNKNOWN_STRING}])
        )


def test_a_stack_that_opted_in_to_a_public_prometheus_passes() -> None:
    """The program labels Prometheus from glm:monitoring.allowPublicBind, so the pack sees the choice."""
    from tests.conftest import run_program

    deployment = run_program(
        "a800", overrides={"glm:monitoring": {"bindAddress": "10.0.0.5", "allowPublicBind": True}}
    )
    [container] = [r for r in deployment.of_type(CONTAINER) if r.name.endswith("-prometheus")]
    res = Resource(
        CONTAINER, container.name, gp.normalize(container.inputs), urn="urn:pulumi:a800::glm::c::p"
    )
    assert [p["ip"] for p in res.known("ports")] == ["10.0.0.5"]
    assert check(gp.published_port_needs_credential, res) == []


# --- the committed stacks -----------------------------------------------------------------------

SERVING_RULES = [r for r in gp.RULES if r.name != "volumes-retained"]


@pytest.mark.parametrize("stack", profile_stacks())
def test_every_stack_passes_the_serving_rules(deployed, stack: str) -> None:
    resources = [
        Resource(r.type, r.name, gp.normalize(r.inputs), urn=f"urn:pulumi:{stack}::glm::{r.type}::{r.name}")
        for r in deployed[stack].resources
    ]
    findings = [(rule.name, m) for res in resources for rule in SERVING_RULES for m in rule.check(res, {})]
    assert findings == []
    # Not vacuous: the rules found the resources they are about.
    containers = [r for r in resources if r.type == CONTAINER]
    assert [r.name for r in containers if gp.is_labelled_front(r)] == [f"{stack}-front-nginx"]
    [serving] = [r for r in containers if gp.is_serving(r)]
    assert [m["readOnly"] for m in gp.weights_mounts(serving)] == [True]


@pytest.mark.parametrize("stack", ["a800", "local"])
def test_volumes_declared_retained_are_retained_by_the_program(monkeypatch, stack: str) -> None:
    """The pack trusts ``retainedVolumeSuffixes`` because analyzers cannot see retain_on_delete."""
    from tests.conftest import run_program

    options: dict[str, pulumi.ResourceOptions] = {}
    original = pulumi.CustomResource.__init__

    def record(self, t, name, props=None, opts=None, *args, **kwargs):
        if t == VOLUME:
            options[name] = opts or pulumi.ResourceOptions()
        original(self, t, name, props, opts, *args, **kwargs)

    monkeypatch.setattr(pulumi.CustomResource, "__init__", record)
    run_program(stack)
    declared = [n for n in options if n.endswith(gp.DEFAULT_RETAINED_VOLUME_SUFFIXES)]
    assert declared == [f"{stack}-model-jit-cache"]
    assert all(options[n].retain_on_delete for n in declared)


def test_docs_describe_each_policy_in_pack_order() -> None:
    doc = (POLICY_DIR.parent / "docs" / "policy.md").read_text()
    headings = [line.split("`")[1] for line in doc.splitlines() if line.startswith("### ")]
    assert headings == [rule.name for rule in gp.RULES]
