"""A front container on the local Docker engine, released and reloaded as a stack does it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from components.docker import rotation
from components.docker.nginx_reload import START_COMMAND, apply_release
from components.render.nginx_conf import render_front_files
from tests.front_rig import METRICS, free_port, stack

IMAGE = "glm53-local/nginx:bookworm"
DOCKER_HOST = "unix:///var/run/docker.sock"


def docker_ready() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI"
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        return f"the local nginx image {IMAGE} is missing (make test builds it)"
    return None


@dataclass
class LiveFront:
    container: str
    port: int
    upstream: str
    scheme: str = "http"
    verify: Any = True
    releases: list[str] = field(default_factory=list)
    status_port: int = field(default_factory=lambda: free_port())
    """The front's status port (the rotation's metrics): a free one, as the front shares the host's network."""

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def props(
        self,
        api_keys: dict[str, str],
        front: dict[str, Any] | None = None,
        tls_pair: tuple[str, str] | None = None,
    ) -> dict[str, Any]:
        config = stack("local", front={**(front or {}), "tls": tls_pair is not None})
        files = render_front_files(
            config.front,
            api_keys,
            METRICS,
            tls_pair,
            listen=f"127.0.0.1:{self.port}",
            status_listen=f"127.0.0.1:{self.status_port}",
        )
        nginx_conf = files.pop("nginx.conf")
        fingerprint = hashlib.sha256(json.dumps([nginx_conf, files], sort_keys=True).encode()).hexdigest()
        return {
            "docker_host": DOCKER_HOST,
            "container": self.container,
            "nginx_conf": nginx_conf,
            "secret_files": files,
            "fingerprint": fingerprint,
        }

    def apply(self, props: dict[str, Any]) -> str:
        line = apply_release(props)
        if not self.releases:
            # The simulator passed no gate here: it is put in the front's rotation by hand.
            rotation.admit(rotation.front_access(DOCKER_HOST, None, self.container), "sim", self.upstream)
        self.releases.append(props["fingerprint"][:16])
        return line

    def exec(self, *argv: str) -> str:
        done = subprocess.run(["docker", "exec", self.container, *argv], capture_output=True, text=True)
        return done.stdout.strip()

    def master_pid(self) -> str:
        return subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Pid}} {{.State.StartedAt}}", self.container],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def status(self, key: str | None, path: str = "/v1/models") -> int:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.get(f"{self.base}{path}", headers=headers, timeout=5, verify=self.verify).status_code


@contextlib.contextmanager
def live_front(sim_port: int) -> Iterator[LiveFront]:
    port = free_port()
    name = f"glm53-test-reload-{port}"
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--network", "host", "--entrypoint", "/bin/sh",
         IMAGE, "-c", START_COMMAND],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield LiveFront(name, port, f"127.0.0.1:{sim_port}")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
