"""Shared fixtures: run the Pulumi program under mocks for a stack file and record what it renders."""

from __future__ import annotations

import json
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from components.profiles import PROFILES
from tests.k8s_cluster import cluster, folders  # noqa: F401 (fixtures: k8s_cluster, k8s_folders)

PROJECT = Path(__file__).resolve().parent.parent
CONTAINER = "docker:index/container:Container"
_SIG_KEY, _SECRET_SIG = "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"

# Fixtures more than one test module uses live in these support modules (issue 51).
pytest_plugins = ["tests.k8s_look_at_cases", "tests.local_clone", "tests.policy_pack"]


def is_secret(value: Any) -> bool:
    """A registered input that the engine would store encrypted."""
    return isinstance(value, dict) and value.get(_SIG_KEY) == _SECRET_SIG


def redacted(value: Any) -> Any:
    """A registered input as a preview shows it: every secret-wrapped value is ``[secret]``."""
    if is_secret(value):
        return "[secret]"
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(v) for v in value]
    return value


def unwrap(value: Any) -> Any:
    """The plain value of a registered input, secrets unwrapped (for assertions on content)."""
    if is_secret(value):
        return unwrap(value["value"])
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


# A host key for ssh:// test hosts (an ed25519 public key whose private half was thrown away).
TEST_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHnMCdx2tAklQakPlTKN7xOAsSF/GaYw9A6F9p6B/Z0C"

PROBE_TEST_KEY = "sk-probe-6f1d0c3b9e4a27d58c0b1e9f4a6d2c7e5b8a3f0d9c1e4b72"
GATE_METRICS_TEST_KEY = "sk-gate-metrics-2b7e9a4c1f0d8e3b6a5c9d2f7e1b4a0c8d3f6e9b2a5c1d74"
GATE_API_TEST_KEY = "sk-gate-7c1e4b9a2d6f0c3e8b5a1d7f4c2e9b6a0d3f8c5e1b7a4d92"
"""The gate's own API key under mocks (client name smoke-gate, as its metrics key's)."""
REPLICA_TEST_KEY = "sk-replica-5c8e1a3f7b2d9e4c0a6f1b8d3e7c2a9f4b0d6e1c8a3f5b7d"
"""The guards' replica key under mocks: the front's (and the probe's) inference credential."""
REPLICA_SCRAPE_TEST_KEY = "sk-scrape-9d2b6f0a4e8c1d7b3f5a9e2c6d0b8f4a1e7c3d9b5f2a6e0c"
"""The guards' scrape key under mocks: Prometheus' and the probe's /metrics reads."""
_MOCK_KEYS = {
    "semantic-probe": PROBE_TEST_KEY,
    "replica-guard": REPLICA_TEST_KEY,
    "replica-scrape": REPLICA_SCRAPE_TEST_KEY,
}
REPLICA_TEST_CERTIFICATE = (
    "-----BEGIN CERTIFICATE-----\nmocks: the replica guards' pinned certificate\n-----END CERTIFICATE-----\n"
)
"""What the mocks give ReplicaCertificate's ``certificate`` (its create runs openssl)."""
TEST_API_KEYS = {"ci": "sk-test-ci-0a6e93030124c2b3", "ops": "sk-test-ops-cca224104c7a268a"}


@dataclass
class Registered:
    type: str
    name: str
    inputs: dict[str, Any]


@dataclass
class Deployment:
    resources: list[Registered] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, pulumi.ResourceOptions] = field(default_factory=dict)
    """Resource options by resource name (mocks do not see them; a stack transformation does)."""

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, suffix: str = "") -> Registered:
        found = [r for r in self.of_type(type_) if r.name.endswith(suffix)]
        assert len(found) == 1, f"expected one {type_} ending {suffix!r}, got {[r.name for r in found]}"
        return found[0]


def serving_container(deployment: Deployment) -> dict[str, Any]:
    """The inputs of the vLLM container."""
    return deployment.one(CONTAINER, "-vllm").inputs


class GlmMocks(pulumi.runtime.Mocks):
    """Echo inputs back as outputs, plus the computed outputs the program reads."""

    def __init__(self, deployment: Deployment, stack_outputs: dict[str, dict[str, Any]]) -> None:
        self.deployment = deployment
        self.stack_outputs = stack_outputs

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.deployment.resources.append(Registered(args.typ, args.name, dict(args.inputs)))
        outputs = dict(args.inputs)
        if args.typ == "pulumi:pulumi:StackReference":
            outputs["outputs"] = self.stack_outputs.get(args.inputs["name"], {})
            outputs["secretOutputNames"] = []
        if args.typ == "docker:index/remoteImage:RemoteImage":
            outputs["imageId"] = f"sha256:{'ab' * 32}"
            outputs["repoDigest"] = f"{args.inputs['name']}@sha256:{'cd' * 32}"
        if args.typ.startswith("command:"):
            outputs.setdefault("stdout", "")
        if args.typ == "pulumi-python:dynamic:Resource" and "client_name" in args.inputs:
            # What GeneratedKey's create would make: one key per client.
            if args.inputs.get("prefix") == "sk-gate-":
                outputs["key"] = GATE_API_TEST_KEY
            else:
                outputs["key"] = _MOCK_KEYS.get(args.inputs["client_name"], GATE_METRICS_TEST_KEY)
        if args.typ == "pulumi-python:dynamic:Resource" and "addresses" in args.inputs:
            outputs["certificate"] = REPLICA_TEST_CERTIFICATE
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


class RecordingMocks(GlmMocks):
    """The program's mocks for one component: ``registered`` is (type, inputs) by name."""

    def __init__(self) -> None:
        super().__init__(Deployment(), {})

    @property
    def registered(self) -> dict[str, tuple[str, dict[str, Any]]]:
        return {r.name: (r.type, r.inputs) for r in self.deployment.resources}


def construct(build: Any) -> tuple[RecordingMocks, dict[str, Any]]:
    """Build one component (``build()``) under mocks; returns its ``url`` and ``container_name``."""
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, project="glm", stack="test", preview=False)
    seen: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[None]:
        component = build()
        return pulumi.Output.all(url=component.url, container_name=component.container_name).apply(
            seen.update
        )

    program()
    return mocks, seen


def stack_config(stack: str) -> dict[str, Any]:
    """The glm:* values of Pulumi.<stack>.yaml, as the engine hands them to the program."""
    data = yaml.safe_load((PROJECT / f"Pulumi.{stack}.yaml").read_text())
    return dict(data.get("config") or {})


class ProgramRefused(Exception):
    """The program refused its config: it logged the message and exited 32 (``__main__.py``: the
    language host's "the program said why"), which under the mocks reads as this, the message."""


def run_main() -> dict[str, Any]:
    """``__main__.py``'s namespace; a refusal is ``ProgramRefused`` with the error it logged."""
    said: list[str] = []
    error = pulumi.log.error
    pulumi.log.error = lambda message, *_, **__: said.append(str(message))  # type: ignore[assignment]
    try:
        return runpy.run_path(str(PROJECT / "__main__.py"), run_name="__pulumi_program__")
    except SystemExit as refused:
        raise ProgramRefused("\n".join(said) or f"exit {refused.code}") from None
    finally:
        pulumi.log.error = error  # type: ignore[method-assign]


def run_program(
    stack: str,
    overrides: dict[str, Any] | None = None,
    secrets: dict[str, Any] | None = None,
    stack_outputs: dict[str, dict[str, Any]] | None = None,
) -> Deployment:
    """Run __main__.py for ``stack`` under mocks; ``overrides`` replace whole glm:* keys and
    ``stack_outputs`` are what StackReferences to other stacks see."""
    values = {**stack_config(stack), **(overrides or {})}
    # A glm:apiKeys in ``overrides`` is written in plain text (refused: the test of that rule).
    default_keys = {} if "glm:apiKeys" in (overrides or {}) else {"glm:apiKeys": TEST_API_KEYS}
    all_secrets = {**default_keys, **(secrets or {})}
    values.update(all_secrets)
    config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    deployment = Deployment()
    pulumi.runtime.set_mocks(
        GlmMocks(deployment, stack_outputs or {}), project="glm", stack=stack, preview=False
    )
    pulumi.runtime.set_all_config(config, list(all_secrets))

    running = True

    def record_options(args: pulumi.ResourceTransformationArgs) -> None:
        # The mocks keep one root stack for the session, and with it every stack transformation
        # registered so far: only this run's resources belong to this deployment.
        if running:
            deployment.options[args.name] = args.opts

    @pulumi.runtime.test
    def program() -> pulumi.Output[None]:
        pulumi.runtime.register_stack_transformation(record_options)
        namespace = run_main()
        # No outputs: the program refused the config (make destroy's way, components/docker/rotation.py).
        return pulumi.Output.all(**namespace.get("outputs", {})).apply(deployment.outputs.update)

    try:
        program()
    finally:
        running = False
    return deployment


def profile_stacks() -> list[str]:
    """The stacks run under mocks: one committed ``Pulumi.<profile>.yaml`` per registered profile
    (``tests/test_profiles.py`` checks that each exists)."""
    return list(PROFILES)


@pytest.fixture(scope="session")
def deployed() -> dict[str, Deployment]:
    """Each profile's stack file, run once under mocks."""
    return {stack: run_program(stack) for stack in profile_stacks()}


# The end-to-end modules: they need the real engine, Docker and (some) network namespaces, and skip
# with the reason where those cannot be had. CI's log names each of them with its outcome.
E2E_MODULES = (
    "test_e2e.py", "test_e2e_front.py", "test_engine_gate.py", "test_engine_program.py",
    "test_first_hour.py", "test_ops.py", "test_rehearsal.py", "test_multihost_engine.py",
    "test_semantic_probe_e2e.py", "test_semantic_probe_tls_e2e.py", "test_semantic_probe_tls_multihost_e2e.py",
    "test_fleet_healing_engine.py", "test_k8s_engine.py", "test_k8s_rehearsal_engine.py",
    "test_first_hour_walkthrough.py", "test_preflight_refusal_engine.py", "test_preview_review.py",
    "test_k8s_first_hour_engine.py",
)  # fmt: skip


CONTAINER_MODULES = (
    "test_local_containers.py", "test_nginx_reload.py", "test_rotation.py", "test_rotation_requests.py",
    "test_standin_host.py", "test_container_watch.py", "test_multihost.py", "test_serving_image.py",
    "test_status_page_containers.py", "test_status_page_browser.py",
)  # fmt: skip
"""Modules beyond the end-to-end ones that start containers, stand-in hosts or a browser: with them,
``make test-fast`` (``-m "not e2e and not containers"``) is the inner loop."""

SECONDS = {
    "test_rehearsal.py#2": 470, "test_multihost_engine.py": 390, "test_first_hour_walkthrough.py": 390,
    "test_rehearsal.py": 380, "test_fleet_healing_engine.py": 257, "test_multihost_engine.py#2": 220,
    "test_semantic_probe_e2e.py": 192, "test_e2e.py": 164, "test_ops.py": 148,
    "test_semantic_probe_tls_multihost_e2e.py": 119, "test_e2e_front.py": 115, "test_rotation.py": 112,
    "test_preview_review.py": 90, "test_semantic_probe_tls_e2e.py": 69, "test_first_hour.py": 67,
    "test_engine_gate.py": 58,
    "test_local_containers.py": 48, "test_service.py": 42, "test_nginx_reload.py": 40,
    "test_rotation_requests.py": 36, "test_standin_host.py": 33, "test_checks.py": 32,
    "test_container_watch.py": 29, "test_nginx_front.py": 27, "test_capacity_probe.py": 27,
    "test_preflight_refusal_engine.py": 45, "test_status_page_containers.py": 53,
    "test_status_page_browser.py": 42,
    "test_k8s_engine.py": 765,  # ONE_CLUSTER on one cluster, 2026-12-06 (the first hour: ~97 of it)
}  # fmt: skip
"""What each group of tests took, one after another on the 2-core machine (``--durations``, the
run of 2026-12-02: 53 min in all). The suite's workers take groups in collection order
(``--dist loadscope --no-loadscope-reorder``, the scopes ``pytest_xdist_make_scheduler`` makes): the long ones start first, the short ones fill in."""

SPLIT = {
    "test_rehearsal.py": (
        "test_promotion_between", "test_sshd_stopped", "test_docker_engine_restarted", "test_vllm_killed",
    ),
    "test_multihost_engine.py": ("test_a_version_that_answers_wrongly",),
}  # fmt: skip
"""Modules whose tests share only a module fixture (a stand-in host, a fleet), split in two groups
(``<module>#2``: these tests) so that two workers run them, each with its own fixture."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: on the real engine (tests/conftest.py E2E_MODULES)")
    config.addinivalue_line("markers", "containers: starts Docker containers, stand-in hosts or a browser")


def _module(nodeid: str) -> str:
    """The test file's name of a node id (``tests/gate/test_x.py::test_y`` → ``test_x.py``)."""
    return nodeid.split("::")[0].rsplit("/", 1)[-1]


ONE_CLUSTER = ("test_k8s_engine.py", "test_k8s_first_hour_engine.py", "test_k8s_rehearsal_engine.py")
"""Modules on the one-node Kubernetes (scripts/k8s/cluster.sh: one per machine, fixed ports): one
group, so one worker runs them one after the other, on the one cluster it starts for them
(tests/k8s_cluster.py). Two clusters at once, the second's etcd found its port taken and neither API
server came up."""


def _group(nodeid: str) -> tuple[str, str]:
    """A test's group: its file, or ``<file>#2`` for the second half of a SPLIT module, or the first
    of ONE_CLUSTER for its modules; and the key under which SECONDS knows it."""
    path, module = nodeid.split("::")[0], _module(nodeid)
    if module in ONE_CLUSTER:
        return f"tests/{ONE_CLUSTER[0]}", ONE_CLUSTER[0]
    if nodeid.split("::")[-1].startswith(SPLIT.get(module, ())):
        return f"{path}#2", f"{module}#2"
    return path, module


def pytest_itemcollected(item: pytest.Item) -> None:
    module = _module(item.nodeid)
    if module in E2E_MODULES:
        item.add_marker(pytest.mark.e2e)
    elif module in CONTAINER_MODULES:
        item.add_marker(pytest.mark.containers)


@pytest.hookimpl(optionalhook=True)  # so that -p no:xdist (one process, e.g. a debugger) still runs
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's loadscope with our groups as its scopes (xdist 3.8's own loadgroup renames node ids
    through an attribute pytest 9 no longer reads, so its groups never form)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)[0]

    return ByGroup(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Stable: within a group and among the groups SECONDS does not know, the collection's order.
    items.sort(key=lambda item: -SECONDS.get(_group(item.nodeid)[1], 0))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    reports = [
        report
        for outcome in ("passed", "failed", "skipped", "error")
        for report in terminalreporter.stats.get(outcome, [])
        if getattr(report, "when", "call") in ("call", "setup")
        and _module(report.nodeid) in E2E_MODULES
        and not (report.when == "setup" and report.passed)
    ]
    if not reports:
        return
    terminalreporter.section("end-to-end tests on the real engine")
    for report in sorted(reports, key=lambda r: r.nodeid):
        reason = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = f" — {report.longrepr[2]}"
        terminalreporter.write_line(f"{report.outcome.upper():8s} {report.nodeid}{reason}")
