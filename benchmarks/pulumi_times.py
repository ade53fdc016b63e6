"""Times of the real engine on the local stack, against the seeds' way of deploying (a shell script).

    .venv/bin/python benchmarks/pulumi_times.py [--runs 3] [--skip-make-up]

Needs the complete engine and dockerd (make test sets both up). For each figure it prints the
median, min and max of ``--runs`` runs:

- cold ``make up`` on a fresh ``git clone`` (its own venv and state; the engine cache and the local
  base images warm). Needs the local profile's front and Prometheus ports free; skipped otherwise;
- warm ``pulumi up`` to a passing gate (after ``destroy``: images and the JIT cache volume stay);
- no-op preview, no-op up;
- ``up --refresh`` after the vLLM container was removed (re-created, gate re-run);
- destroy;
- the seeds' way: a shell script with the same three ``docker run`` (the images, argv and config
  files taken from what ``pulumi up`` deployed), polling ``/v1/models`` and asking 13*17.

and ``pulumi up`` ÷ script as a ratio.
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.config import build_stack_config
from components.render.nginx_conf import CONF_ROOT
from tests.engine import PROJECT, PulumiProject, engine_missing

KEY = "sk-bench-fa1f879d51c611aa6bcd"
STACK = "local"
"""The stack measured: its profile's defaults give the ports a cold ``make up`` needs."""


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def sh(cmd: str, **kwargs) -> str:  # type: ignore[no-untyped-def]
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True, **kwargs).stdout


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def cold_make_up(runs: int) -> list[float]:
    """`make up` on a fresh clone with its own state dir; destroyed after each run."""
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            clone = Path(tmp) / "glm"
            sh(f"git clone -q {shlex.quote(str(PROJECT))} {shlex.quote(str(clone))}")
            env_prefix = f"GLM_STATE_DIR={shlex.quote(tmp)}/state"
            make_up = f"{env_prefix} make -C {clone} up"
            try:
                times.append(timed(lambda cmd=make_up: sh(cmd)))
            finally:
                subprocess.run(
                    f"{env_prefix} {clone}/scripts/pulumi.sh destroy --yes -s {STACK}",
                    shell=True,
                    capture_output=True,
                )
    return times


def deployed_as_script(project: PulumiProject, name: str, port: int, workdir: Path) -> str:
    """The three `docker run`s of what `pulumi up` deployed, as a seed-style shell script."""
    network = json.loads(sh(f"docker network inspect {name}-net"))[0]
    subnet = network["IPAM"]["Config"][0]["Subnet"]
    lines = ["set -eu", f"docker network create --subnet {subnet} bench-net >/dev/null"]
    uploads = {
        "": [],
        # The front's delivered config: releases/<id>/ and the `current` link (components/docker/nginx_reload.py).
        "-nginx": [CONF_ROOT],
        "-prometheus": ["/etc/prometheus/prometheus.yml", "/etc/prometheus/rules.yml"],
    }
    for role, files in uploads.items():
        info = json.loads(sh(f"docker inspect {name}{role}"))[0]
        network = info["NetworkSettings"]["Networks"][f"{name}-net"]
        ip = network["IPAddress"]
        aliases = [a for a in network.get("Aliases") or [] if a != name and not info["Id"].startswith(a)]
        args = [
            "docker",
            "run",
            "-d",
            "--name",
            f"bench{role or '-vllm'}",
            "--network",
            "bench-net",
            "--ip",
            ip,
        ]
        for mount in info["Mounts"]:
            if mount["Type"] == "bind":
                args += ["-v", f"{mount['Source']}:{mount['Destination']}:ro"]
        for upload in files:
            local = workdir / f"{role.strip('-')}-{Path(upload).name}"
            sh(f"docker cp {name}{role}:{upload} {local}")
            args += ["-v", f"{local}:{upload}:ro"]
        for alias in aliases:
            args += ["--network-alias", alias]
        for host in info["HostConfig"].get("ExtraHosts") or []:
            args += ["--add-host", host]
        for container_port, bindings in (info["HostConfig"].get("PortBindings") or {}).items():
            for b in bindings:
                args += ["-p", f"{b['HostIp'] or '0.0.0.0'}:{b['HostPort']}:{container_port.split('/')[0]}"]
        entrypoint = info["Config"]["Entrypoint"] or []
        args += [f"--entrypoint={entrypoint[0]}"] if entrypoint else []
        args += ["--shm-size", str(info["HostConfig"]["ShmSize"])]
        args += [info["Config"]["Image"], *entrypoint[1:], *(info["Config"]["Cmd"] or [])]
        lines.append(shlex.join(args) + " >/dev/null")
    body = json.dumps(
        {
            "model": project.outputs(STACK)["servedModelName"],
            "messages": [{"role": "user", "content": "What is 13*17?"}],
        }
    )
    url = f"http://127.0.0.1:{port}/v1"
    lines += [
        f'until curl -sf -H "Authorization: Bearer {KEY}" {url}/models >/dev/null; do sleep 0.2; done',
        f"curl -sf {url}/chat/completions -H 'Authorization: Bearer {KEY}' -H 'Content-Type: application/json' "
        f'-d {shlex.quote(body)} | grep -q \'"content":"221"\'',
    ]
    return "\n".join(lines) + "\n"


def clean_script_run() -> None:
    subprocess.run(
        "docker rm -f bench-vllm bench-nginx bench-prometheus; docker network rm bench-net",
        shell=True,
        capture_output=True,
    )


def default_ports() -> tuple[int, int]:
    """The front's and Prometheus' host ports of the profile's defaults (what `make up` binds)."""
    config = build_stack_config({"hardware": STACK})
    return config.front.port, config.monitoring.port


def summary(label: str, times: list[float]) -> str:
    return f"{label:42s} median {statistics.median(times):6.2f} s   min {min(times):6.2f}   max {max(times):6.2f}   (n={len(times)})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-make-up", action="store_true")
    args = parser.parse_args()
    missing = engine_missing()
    if missing:
        print(f"pulumi_times: cannot run: {missing}")
        return 2
    figures: dict[str, list[float]] = {}
    ports = default_ports()
    if args.skip_make_up:
        print("cold make up: skipped (--skip-make-up)")
    elif not all(port_free(port) for port in ports):
        print(
            f"cold make up: skipped: the {STACK} stack's ports {'/'.join(map(str, ports))} are taken "
            "(make destroy first)"
        )
    else:
        figures["cold make up (fresh clone, warm engine)"] = cold_make_up(args.runs)
        print(
            summary(
                "cold make up (fresh clone, warm engine)", figures["cold make up (fresh clone, warm engine)"]
            ),
            flush=True,
        )

    with tempfile.TemporaryDirectory() as tmp:
        project = PulumiProject.copy_of_repo(Path(tmp) / "glm")
        local = project.init_local_stack("glm53-bench", secrets={"glm:apiKeys.bench": KEY})
        name, port = local.container, local.front_port

        def run(*cmd: str) -> None:
            project.run(*cmd, "-s", STACK)

        try:
            run("up", "--yes", "--skip-preview")
            for key in (
                "warm up to gate passed",
                "no-op preview",
                "no-op up",
                "refresh-up (vLLM removed)",
                "destroy",
            ):
                figures[key] = []
            for _ in range(args.runs):
                figures["no-op preview"].append(timed(lambda: run("preview", "--expect-no-changes")))
                figures["no-op up"].append(timed(lambda: run("up", "--yes", "--skip-preview")))
                sh(f"docker rm -f {name}")
                figures["refresh-up (vLLM removed)"].append(
                    timed(lambda: run("up", "--yes", "--skip-preview", "--refresh"))
                )
                script = deployed_as_script(project, name, port, Path(tmp))
                figures["destroy"].append(timed(lambda: run("destroy", "--yes", "--run-program")))
                figures["warm up to gate passed"].append(timed(lambda: run("up", "--yes", "--skip-preview")))
            figures["seed-style shell script to 221"] = []
            run("destroy", "--yes", "--run-program")
            (Path(tmp) / "deploy.sh").write_text(script)
            for _ in range(args.runs):
                clean_script_run()
                figures["seed-style shell script to 221"].append(
                    timed(lambda: sh(f"timeout 120 bash {tmp}/deploy.sh"))
                )
        finally:
            clean_script_run()
            project.run("destroy", "--yes", "--run-program", "-s", STACK, check=False)
            subprocess.run(["docker", "volume", "rm", f"{name}-jit-cache"], capture_output=True)

    for label, times in figures.items():
        print(summary(label, times), flush=True)
    up, script = (
        statistics.median(figures[k]) for k in ("warm up to gate passed", "seed-style shell script to 221")
    )
    print(f"{'pulumi up ÷ shell script (medians)':42s} {up / script:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
