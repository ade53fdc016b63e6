"""The programs the stack ships to a host are files under components/host/templates/, rendered by
components/template.py. Their rendered text is a resource input (a container's command, a preStop,
a health check, a host command's ``create``): the expected texts here are the ones every stack has
deployed, written out, so a template edit that changes a byte fails here before it replaces a
container or re-runs a download."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from components.docker.nginx_reload import START_COMMAND
from components.docker.rotation import SCRIPT as ROTATION_SCRIPT
from components.docker.target import RUN_STDIN
from components.gate.container import ssh_wrapper
from components.kubernetes.front import FRONT_QUIT, upstream_conf
from components.kubernetes.guard import guard_quit
from components.render.nginx_conf import replica_server, upstream_server
from components.serving.spec import health_probe
from components.template import TEMPLATES, host_script, one_line_script

ROOT = Path(__file__).resolve().parent.parent


def test_the_front_waits_for_its_first_release_then_runs_nginx_as_pid_1() -> None:
    assert START_COMMAND == (
        "while [ ! -e /etc/nginx/glm/current/nginx.conf ]; do sleep 0.1; done; "
        "exec nginx -c /etc/nginx/glm/current/nginx.conf -e stderr -g 'daemon off;'"
    )


def test_nginx_in_a_pod_leaves_its_service_then_quits_gracefully() -> None:
    """The Kubernetes front's preStop and each serving pod's guard's (its pause: preStopSeconds)."""
    assert FRONT_QUIT == (
        "sleep 5; nginx -c /etc/glm53-front/nginx.conf -s quit; while [ -e /tmp/nginx.pid ]; do sleep 1; done"
    )
    assert guard_quit(10) == (
        "sleep 10; nginx -c /etc/glm53-guard/nginx.conf -s quit; while [ -e /tmp/nginx.pid ]; do sleep 1; done"
    )


def test_the_health_check_is_one_python_line_asking_vllm_health() -> None:
    probe = health_probe(8000)
    assert probe == [
        "CMD",
        "python3",
        "-c",
        "import sys,urllib.request;sys.exit(0 if urllib.request.urlopen("
        "'http://127.0.0.1:8000/health',timeout=5).status==200 else 1)",
    ]
    compile(probe[3], "vllm-health.py", "exec")


def test_a_host_command_runs_the_script_on_its_stdin() -> None:
    assert RUN_STDIN == 'bash -c "$(cat)"'


def test_every_upstream_server_line_has_one_shape() -> None:
    """nginx.conf's inline replicas, the rotation's file and the Kubernetes Service: one renderer,
    with the A100 seed's passive health check (2 failures in 30 s) for replicas."""
    assert replica_server("10.0.0.2:8000") == "server 10.0.0.2:8000 max_fails=2 fail_timeout=30s;"
    assert upstream_server("10.0.0.2:8000") == "server 10.0.0.2:8000;"
    assert upstream_server("127.0.0.1:9", down=True) == "server 127.0.0.1:9 down;"
    assert (
        'echo "server $(cat "$f") max_fails=2 fail_timeout=30s;" >> "$root/upstream.conf.new"'
        in ROTATION_SCRIPT
    )
    assert 'echo "server $(cat "$f") down;" >> "$root/upstream.conf.new"' in ROTATION_SCRIPT
    assert upstream_conf("10.96.0.7", 8000) == (
        "        server 10.96.0.7:8000 max_fails=0;\n" * 3 + "        keepalive_time 2s;\n"
    )


def test_the_ssh_wrapper_runs_the_real_ssh_with_the_providers_options(tmp_path: Path) -> None:
    ssh_wrapper(tmp_path, ["-o", "KnownHostsCommand=/bin/echo [box]:2222 ssh-ed25519 AAAA", "-o", "User=ops"])
    wrapper = tmp_path / "ssh"
    assert stat.S_IMODE(wrapper.stat().st_mode) == 0o700
    lines = wrapper.read_text().splitlines()
    assert lines[0] == "#!/bin/sh"
    real = "/usr/bin/ssh" if Path("/usr/bin/ssh").exists() else "/bin/ssh"
    assert lines[-1] == (
        f"exec {real} -o 'KnownHostsCommand=/bin/echo [box]:2222 ssh-ed25519 AAAA' -o User=ops \"$@\""
    )


def test_a_host_script_leaves_out_only_the_templates_leading_comments() -> None:
    assert host_script("weights-download.sh", "weights-fetch-modelscope.sh", values={
        "DEST": "/data/glm", "OPTIONS": "--model=zai/glm --local_dir=/data/glm",
    }) == "set -eu\nmkdir -p -- /data/glm\nmodelscope download --model=zai/glm --local_dir=/data/glm\n"  # fmt: skip


def test_a_one_line_script_refuses_a_comment_that_would_swallow_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("components.template.TEMPLATES", tmp_path)
    (tmp_path / "commented.sh").write_text("# header\ntrue;\n# inside\nfalse\n")
    with pytest.raises(ValueError, match="a comment below the first statement"):
        one_line_script("commented.sh", values={})


def test_make_lint_shellchecks_every_shell_template() -> None:
    """Every shell program under templates/ is in the glob `make lint` hands shellcheck."""
    lint = next(
        line for line in (ROOT / "Makefile").read_text().splitlines() if line.strip().startswith("shellcheck")
    )
    assert "components/host/templates/*.sh" in lint.split()
    shells = [
        p.name
        for p in TEMPLATES.iterdir()
        if p.suffix != ".sh" and p.read_text().startswith(("#!/bin/sh", "# shellcheck"))
    ]
    assert shells == []
