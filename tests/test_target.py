"""SSH to the target: port, user and IPv6 parsed once from dockerHost; one identity and one host key
for the Docker provider and the commands; the key stays secret (config rules without Pulumi, the
rendered resources under mocks)."""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components.config import ConfigError, HostConfig, build_stack_config
from components.docker.target import AGENT_FOR_RUN, host_command
from tests.conftest import TEST_HOST_KEY, construct, run_program, unwrap

KEYSCAN_LINE = f"[2001:db8::1]:2222 {TEST_HOST_KEY}"


def host(docker_host: str, **extra: Any) -> HostConfig:
    return HostConfig.model_validate(
        {"name": "gpu01", "dockerHost": docker_host, "hostKey": TEST_HOST_KEY, **extra}
    )


@pytest.mark.parametrize(
    ("docker_host", "user", "address", "port"),
    [
        ("ssh://deploy@gpu01:2222", "deploy", "gpu01", 2222),
        ("ssh://deploy@gpu01.example.internal", "deploy", "gpu01.example.internal", 22),
        ("ssh://[2001:db8::1]:2222", getpass.getuser(), "2001:db8::1", 2222),
        ("ssh://ops@[2001:db8::1]", "ops", "2001:db8::1", 22),
        ("ssh://10.203.0.2:2222", getpass.getuser(), "10.203.0.2", 2222),
    ],
)
def test_user_address_and_port_come_from_docker_host(
    docker_host: str, user: str, address: str, port: int
) -> None:
    parsed = host(docker_host)
    assert (parsed.ssh_user, parsed.ssh_address, parsed.ssh_port) == (user, address, port)


def test_no_user_is_the_local_user_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "alice")
    assert host("ssh://gpu01").ssh_user == "alice"


def test_an_unbracketed_ipv6_address_is_refused_with_the_fix() -> None:
    with pytest.raises(
        ConfigError, match=r"dockerHost='ssh://2001:db8::1'.*ssh://deploy@\[2001:db8::1\]:2222"
    ):
        build_stack_config(
            {"hardware": "a800", "target": {"hosts": [{"name": "gpu01", "dockerHost": "ssh://2001:db8::1",
                                                       "hostKey": TEST_HOST_KEY}]}}
        )  # fmt: skip


def test_a_missing_host_key_is_refused_naming_the_key_and_ssh_keyscan() -> None:
    with pytest.raises(ConfigError) as err:
        build_stack_config(
            {
                "hardware": "a800",
                "target": {"hosts": [{"name": "gpu01", "dockerHost": "ssh://deploy@gpu01:2222"}]},
            }
        )
    assert "glm:target.hosts[gpu01].hostKey is not set for ssh://deploy@gpu01:2222" in str(err.value)
    assert "ssh-keyscan -t ed25519 -p 2222 gpu01" in str(err.value)


def test_a_local_engine_needs_no_host_key() -> None:
    assert HostConfig(name="local", docker_host="unix:///var/run/docker.sock").host_key_line is None


@pytest.mark.parametrize(
    "bad", ["not a key", "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQ", "ssh-ed25519 !!!"]
)
def test_a_malformed_host_key_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"glm:target.hosts\[gpu01\].hostKey=.* is not an SSH public key"):
        build_stack_config(
            {
                "hardware": "a800",
                "target": {"hosts": [{"name": "gpu01", "dockerHost": "ssh://d@gpu01", "hostKey": bad}]},
            }
        )


def test_an_ssh_keyscan_line_is_accepted_as_the_host_key() -> None:
    assert host("ssh://[2001:db8::1]:2222", hostKey=KEYSCAN_LINE + " comment").host_key_line == TEST_HOST_KEY


def test_ssh_port_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"sshPort=2222 is no longer read.*ssh://user@host:2222"):
        build_stack_config(
            {"hardware": "a800", "target": {"hosts": [{"name": "g", "dockerHost": "ssh://d@g", "sshPort": 2222,
                                                       "hostKey": TEST_HOST_KEY}]}}
        )  # fmt: skip


def test_docker_checks_the_host_key_strictly_with_the_commands_user_and_key() -> None:
    opts = host("ssh://deploy@[2001:db8::1]:2222", identityFile="~/.ssh/glm_deploy").ssh_options
    options = [value for flag, value in zip(opts[::2], opts[1::2], strict=True) if flag == "-o"]
    assert "StrictHostKeyChecking=yes" in options
    assert "UserKnownHostsFile=/dev/null" in options and "GlobalKnownHostsFile=/dev/null" in options
    assert f"KnownHostsCommand=/bin/echo [2001:db8::1]:2222 {TEST_HOST_KEY}" in options
    assert "User=deploy" in options and "IdentitiesOnly=yes" in options
    assert opts[opts.index("-i") + 1] == "~/.ssh/glm_deploy"


def test_port_22_is_written_without_brackets_in_the_known_hosts_line() -> None:
    options = host("ssh://deploy@gpu01").ssh_options
    assert f"KnownHostsCommand=/bin/echo gpu01 {TEST_HOST_KEY}" in options
    assert "-i" not in options


def _command(config_host: HostConfig, ssh_private_key: pulumi.Output[str] | None = None) -> dict[str, Any]:
    class Built:
        def __init__(self) -> None:
            command = host_command(
                "gpu01-check", config_host, "echo hi", ssh_private_key, pulumi.ResourceOptions()
            )
            self.url = command.stdout
            self.container_name = command.stdout

    mocks, _ = construct(Built)
    kind, inputs = mocks.registered["gpu01-check"]
    assert kind == "command:remote:Command"
    return inputs


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real ssh-agent of the test's own, and a real key pair (ssh-keygen) it does not hold yet."""
    key_file = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_file)], check=True)
    started = subprocess.run(["ssh-agent", "-s", "-a", str(tmp_path / "agent.sock")], capture_output=True,
                             text=True, check=True)  # fmt: skip
    pid = re.search(r"SSH_AGENT_PID=(\d+)", started.stdout)
    assert pid
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
    monkeypatch.delenv(AGENT_FOR_RUN, raising=False)
    try:
        yield key_file
    finally:
        os.kill(int(pid[1]), signal.SIGTERM)


def test_the_commands_use_the_same_endpoint_user_and_host_key_and_no_key_in_the_state(agent: Path) -> None:
    """Issue 26: identityFile's contents were every Command's `connection.privateKey`."""
    subprocess.run(["ssh-add", "-q", str(agent)], check=True, capture_output=True)
    inputs = _command(host("ssh://deploy@[2001:db8::1]:2222", identityFile=str(agent)))
    connection = unwrap(inputs["connection"])
    assert connection["host"] == "2001:db8::1"
    assert connection["port"] == 2222
    assert connection["user"] == "deploy"
    assert connection["hostKey"] == TEST_HOST_KEY
    assert "privateKey" not in connection
    assert "PRIVATE KEY" not in json.dumps(unwrap(inputs), default=str)
    # The script goes on stdin; the command line, which pulumi-command quotes in its errors, is one
    # short line naming the host.
    assert inputs["create"] == 'bash -c "$(cat)"  # on deploy@[2001:db8::1]:2222 (glm:target.hosts[gpu01])'
    assert inputs["stdin"] == "echo hi"


def test_an_identity_the_agent_lacks_is_refused_with_ssh_add(agent: Path) -> None:
    with pytest.raises(ConfigError, match=r"identityFile=.*the agent does not hold this key.*ssh-add"):
        _command(host("ssh://deploy@gpu01", identityFile=str(agent)))


def test_an_agent_started_for_the_run_gets_the_identity_added(
    agent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(AGENT_FOR_RUN, "1")
    _command(host("ssh://deploy@gpu01", identityFile=str(agent)))
    held = subprocess.run(["ssh-add", "-L"], capture_output=True, text=True, check=True).stdout
    assert agent.with_name("id_ed25519.pub").read_text().split()[1] in held


def _other_keys(agent: Path, count: int) -> None:
    for n in range(count):
        other = agent.with_name(f"other_{n}")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
        subprocess.run(["ssh-add", "-q", str(other)], check=True, capture_output=True)


def test_a_key_the_agent_offers_after_six_others_is_refused_naming_max_auth_tries(agent: Path) -> None:
    """CI: a session-wide agent held every stand-in's key; sshd (MaxAuthTries 6 by default,
    sshd_config(5)) cut each command with "Too many authentication failures" after 10 retries."""
    _other_keys(agent, 6)
    subprocess.run(["ssh-add", "-q", str(agent)], check=True, capture_output=True)
    with pytest.raises(
        ConfigError, match=r"identityFile=.*holds 7 keys.*after 6 others.*MaxAuthTries.*ssh-add -D"
    ):
        _command(host("ssh://deploy@gpu01", identityFile=str(agent)))


def test_a_key_after_five_others_is_still_reached(agent: Path) -> None:
    _other_keys(agent, 5)
    subprocess.run(["ssh-add", "-q", str(agent)], check=True, capture_output=True)
    assert "privateKey" not in unwrap(
        _command(host("ssh://deploy@gpu01", identityFile=str(agent)))["connection"]
    )


def test_no_agent_at_all_is_refused_naming_the_fix(agent: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK")
    with pytest.raises(ConfigError, match=r"no agent answers at SSH_AUTH_SOCK.*eval \$\(ssh-agent\)"):
        _command(host("ssh://deploy@gpu01", identityFile=str(agent)))


def test_without_an_identity_file_the_commands_use_the_agent_as_docker_does() -> None:
    connection = unwrap(_command(host("ssh://deploy@gpu01"))["connection"])
    assert "privateKey" not in connection
    assert connection["port"] == 22 and connection["hostKey"] == TEST_HOST_KEY


def test_ssh_private_key_alone_is_refused_as_a_second_identity() -> None:
    with pytest.raises(
        ConfigError, match=r"glm:sshPrivateKey is set.*glm:target.hosts\[gpu01\].identityFile"
    ):
        host_command(
            "c", host("ssh://deploy@gpu01"), "true", pulumi.Output.secret("k"), pulumi.ResourceOptions()
        )


def test_an_unreadable_identity_file_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"identityFile=.*missing: cannot read it"):
        _command(host("ssh://deploy@gpu01", identityFile=str(tmp_path / "missing")))


@pytest.mark.parametrize("stack", ["a800", "a800-staging", "ascend", "rtx5090"])
def test_every_stack_gives_docker_and_preflight_the_same_host_user_port_and_host_key(stack: str) -> None:
    deployment = run_program(stack)
    provider = deployment.one("pulumi:providers:docker")
    check = deployment.one("command:remote:Command", "-preflight-check")
    connection = unwrap(check.inputs["connection"])
    opts = provider.inputs["sshOpts"]
    assert provider.inputs["host"] == f"ssh://{connection['user']}@{connection['host']}"
    assert f"User={connection['user']}" in opts and "StrictHostKeyChecking=yes" in opts
    assert f"KnownHostsCommand=/bin/echo {connection['host']} {connection['hostKey']}" in opts
    assert connection["port"] == 22
