"""The stand-in GPU host: SSH with host-key checking, its own engine over SSH, a published port on its
address, preflight passing against its fake accelerators, and nothing left behind."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from components.config import HostConfig, build_stack_config
from tests.host_scripts import preflight_of
from tests.standin_host import StandinHost, leftovers, standin_host, unavailable_reason

__all__ = ["standin_host"]  # the fixture, imported for this module

SERVER_IMAGE = "glm53-local/python:bookworm"


def test_ssh_checks_the_host_key_and_logs_in_as_the_deploy_user(standin_host: StandinHost) -> None:
    result = standin_host.ssh('echo "$(id -un) $DOCKER_HOST"; command -v nvidia-smi npu-smi')
    assert result.returncode == 0, result.stderr
    user_and_socket, nvidia_smi, npu_smi = result.stdout.split("\n")[:3]
    assert user_and_socket == f"glm unix://{standin_host.docker_socket}"
    assert nvidia_smi == str(standin_host.root / "bin" / "nvidia-smi")
    assert npu_smi == str(standin_host.root / "bin" / "npu-smi")


def test_ssh_keyscan_gives_the_host_key_a_stack_configures(standin_host: StandinHost) -> None:
    scan = subprocess.run(
        ["ssh-keyscan", "-t", "ed25519", "-p", str(standin_host.ssh_port), standin_host.address],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    _, kind, blob = scan.stdout.split()
    assert f"{kind} {blob}" == standin_host.host_key


def test_ssh_refuses_a_changed_host_key(standin_host: StandinHost) -> None:
    trusted = standin_host.host_key
    standin_host.stop_sshd()
    standin_host.start_sshd(new_host_key=True)
    assert standin_host.host_key != trusted
    result = standin_host.ssh("true", timeout=30)
    assert result.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr
    assert "Host key verification failed" in result.stderr
    # Trusting the new key (what an operator does after checking it) makes the host usable again.
    standin_host.known_hosts.write_text(
        f"[{standin_host.address}]:{standin_host.ssh_port} {standin_host.host_key}\n"
    )
    assert standin_host.ssh("true").returncode == 0


def test_ssh_refuses_a_key_it_does_not_know(standin_host: StandinHost, tmp_path: Path) -> None:
    result = subprocess.run(
        ["ssh", "-F", str(standin_host.ssh_config), "-o", f"UserKnownHostsFile={tmp_path / 'empty'}",
         standin_host.address, "true"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 255
    assert "Host key verification failed" in result.stderr


def test_docker_over_ssh_reaches_the_hosts_own_engine(standin_host: StandinHost) -> None:
    remote = standin_host.docker("info", "--format", "{{.ID}} {{.DockerRootDir}}")
    assert remote.returncode == 0, remote.stderr
    local = subprocess.run(
        ["docker", "info", "--format", "{{.ID}} {{.DockerRootDir}}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    remote_id, remote_root = remote.stdout.split()
    assert remote_root == str(standin_host.root / "docker")
    assert remote_id != local.stdout.split()[0]


def test_the_docker_providers_ssh_options_reach_the_engine_and_refuse_another_key(
    standin_host: StandinHost, tmp_path: Path
) -> None:
    """The argv Docker's connection helper runs: ssh OPTS -l USER -p PORT -- ADDR docker system dial-stdio."""
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=15)
    for key, ok in ((standin_host.host_key, True), (other.with_suffix(".pub").read_text(), False)):
        config = HostConfig(name="standin", docker_host=standin_host.docker_host, host_key=key,
                            identity_file=str(standin_host.private_key_path))  # fmt: skip
        result = subprocess.run(
            ["ssh", *config.ssh_options, "-l", config.ssh_user, "-p", str(config.ssh_port), "--",
             config.ssh_address, "docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if ok:
            assert result.returncode == 0 and result.stdout.strip(), result.stderr
        else:
            assert result.returncode == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in result.stderr


def test_the_engine_is_not_reachable_over_tcp(standin_host: StandinHost) -> None:
    for port in (2375, 2376):
        result = subprocess.run(
            ["docker", "-H", f"tcp://{standin_host.address}:{port}", "info"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert result.returncode != 0


def test_a_published_port_answers_on_the_hosts_address(standin_host: StandinHost) -> None:
    if subprocess.run(["docker", "image", "inspect", SERVER_IMAGE], capture_output=True).returncode != 0:
        pytest.skip(f"{SERVER_IMAGE} is not in the local engine (make test builds it)")
    standin_host.load_image(SERVER_IMAGE)
    run = standin_host.docker(
        "run", "-d", "--rm", "--name", "standin-port-test", "-p", "18080:8000", SERVER_IMAGE,
        "python3", "-m", "http.server", "8000",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    try:
        deadline, body = time.monotonic() + 60, ""
        while time.monotonic() < deadline and not body:
            try:
                with urllib.request.urlopen(f"http://{standin_host.address}:18080/", timeout=5) as response:
                    body = response.read().decode()
            except OSError:
                time.sleep(0.5)
        assert "Directory listing" in body
    finally:
        standin_host.docker("rm", "-f", "standin-port-test")


@pytest.mark.parametrize(
    ("hardware", "found"),
    [("a800", "preflight: 8 GPU(s), driver 580.159.04"), ("rtx5090", "preflight: 8 GPU(s), driver 580.159.04"),
     ("ascend", "preflight: 8 NPU(s)")],
)  # fmt: skip
def test_preflight_passes_over_ssh_on_the_fake_accelerators(
    standin_host: StandinHost, hardware: str, found: str
) -> None:
    config = build_stack_config(
        {
            "hardware": hardware,
            "target": {"hosts": [{"name": "standin", "dockerHost": standin_host.docker_host,
                                  "hostKey": standin_host.host_key}]},
            "model": {"hostDir": str(standin_host.models_dir)},
            "front": {"allowPlainHttp": True},  # the hardware stacks' opt-in (their stack files carry it)
        }
    )  # fmt: skip
    standin_host.present(hardware)
    # What components/docker/target.py sends: bash -c '<script>' over SSH, as the deploy user.
    result = standin_host.ssh(f"bash -c {shlex.quote(preflight_of(config))}")
    assert result.returncode == 0, result.stderr
    assert found in result.stdout
    assert "weights check:" in result.stdout


def test_teardown_leaves_nothing_behind() -> None:
    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    with StandinHost.create() as host:
        index = host.index
        assert host.ssh("true").returncode == 0
        assert leftovers(index)
    assert leftovers(index) == []


def test_a_killed_test_run_is_cleaned_up_by_the_watchdog() -> None:
    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    program = (
        "import sys, time\n"
        "from tests.standin_host import StandinHost\n"
        "with StandinHost.create() as host:\n"
        "    print(host.index, flush=True)\n"
        "    time.sleep(600)\n"
    )
    root = Path(__file__).resolve().parent.parent
    child = subprocess.Popen([sys.executable, "-c", program], cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        index = int(child.stdout.readline())
        assert leftovers(index)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    deadline = time.monotonic() + 60
    while leftovers(index) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert leftovers(index) == []
