"""The status page's route on the real Docker engine, as on a stack: the front container finds the
stack's Prometheus container by name through Docker's DNS, before and after Prometheus is replaced
(components/render/status_page.py; tests/test_status_page.py runs the same route on loopback)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from components.config import build_stack_config
from components.render.nginx_conf import CONF_FILE, WORKER_PROCESSES, render_front_files
from components.render.prometheus_config import CONFIG_PATH, PROMETHEUS_FLAGS
from components.render.prometheus_config import CONTAINER_PORT as PROMETHEUS_PORT
from components.render.status_page import ASSETS_DIR, page_files, render_page
from tests.engine import free_port
from tests.front_rig import KEYS, METRICS

IMAGES = {"nginx": "glm53-local/nginx:bookworm", "prometheus": "glm53-local/prometheus:bookworm"}


def _docker_missing() -> str | None:
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        return "no Docker engine answers (start dockerd)"
    for image in IMAGES.values():
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
            return f"local image {image} is missing (offline/images.sh makes it)"
    return None


def docker(*args: str) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"docker {' '.join(args[:3])}: {result.stderr[-2000:]}"
    return result.stdout.strip()


@pytest.mark.skipif(_docker_missing() is not None, reason=str(_docker_missing()))
def test_the_front_container_finds_prometheus_by_name_through_docker_dns(tmp_path: Path) -> None:
    """As on a stack: Prometheus with the component's flags and files, the front with its release
    config (Prometheus by container name), on a private network. The front starts first, and
    Prometheus is replaced (a new address) while the front keeps running."""
    name = f"glm-status-test-{os.getpid()}"
    prometheus = f"{name}-prometheus"
    config = build_stack_config({"hardware": "local"})
    files = render_front_files(config.front, KEYS, METRICS, prometheus=f"{prometheus}:{PROMETHEUS_PORT}")
    release = tmp_path / "release"
    release.mkdir(mode=0o755)
    # One worker, so one resolver cache: the replacement below must be found through it.
    files[CONF_FILE] = files[CONF_FILE].replace(
        f"worker_processes {WORKER_PROCESSES};", "worker_processes 1;"
    )
    for file, text in files.items():
        (release / file).write_text(text)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": []}))
    port = free_port()

    def start_prometheus(*extra: str) -> None:
        docker("create", "--name", prometheus, "--network", f"{name}-net", *extra, IMAGES["prometheus"],
               *PROMETHEUS_FLAGS, f"--web.user-assets={ASSETS_DIR}")  # fmt: skip
        docker("cp", str(tmp_path / "prometheus.yml"), f"{prometheus}:{CONFIG_PATH}")
        assets = tmp_path / "assets"
        assets.mkdir(exist_ok=True)
        for file, text in page_files().items():
            (assets / file).write_text(text)
        docker("cp", f"{assets}/.", f"{prometheus}:{ASSETS_DIR}")
        docker("start", prometheus)

    def ask(path: str) -> httpx.Response:
        deadline = time.monotonic() + 30
        while True:
            answer = httpx.get(
                f"http://127.0.0.1:{port}{path}",
                headers={"Authorization": f"Bearer {METRICS['prom']}"},
                timeout=10,
            )
            if answer.status_code != 503 or time.monotonic() > deadline:
                return answer
            time.sleep(0.5)

    docker("network", "create", f"{name}-net")
    try:
        docker("run", "-d", "--name", f"{name}-nginx", "--network", f"{name}-net",
               "-p", f"127.0.0.1:{port}:8080", "-v", f"{release}:/etc/nginx/glm:ro",
               "--entrypoint", "nginx", IMAGES["nginx"], "-c", "/etc/nginx/glm/nginx.conf",
               "-e", "stderr", "-g", "daemon off;")  # fmt: skip
        time.sleep(1)
        assert ask("/status/").status_code == 503  # no Prometheus yet: the front runs regardless
        start_prometheus()
        assert ask("/status/").text == render_page()
        first = ask("/status/query/kv_cache")
        assert first.status_code == 200 and first.json()["status"] == "success", first.text
        # Replaced, with another address: the front asks Docker's DNS again (valid=10s).
        address = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
        before = docker("inspect", "-f", address, prometheus)
        docker("rm", "-f", prometheus)
        docker(
            "run", "-d", "--rm", "--network", f"{name}-net", "--entrypoint", "sleep", IMAGES["nginx"], "60"
        )
        start_prometheus()
        assert docker("inspect", "-f", address, prometheus) != before
        deadline = time.monotonic() + 40
        while (answer := ask("/status/query/usage")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(1)
        assert answer.status_code == 200 and answer.json()["status"] == "success", answer.text
    finally:
        for container in docker("ps", "-aq", "--filter", f"network={name}-net").split():
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)
        subprocess.run(["docker", "network", "rm", f"{name}-net"], capture_output=True)
