"""Stacks over several stand-in hosts: shared by tests/test_multihost_engine.py and
benchmarks/multihost_scale.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.engine import PulumiProject
from tests.standin_host import StandinHost

IMAGES = ("glm53-local/python:bookworm", "glm53-local/nginx:bookworm", "glm53-local/prometheus:bookworm")


def load_images(hosts: list[StandinHost], directory: Path) -> None:
    """One archive of the local images (they share their base layers), loaded into each host."""
    archive = directory / "images.tar"
    subprocess.run(["docker", "save", "-o", str(archive), *IMAGES], check=True, timeout=600)
    try:
        for host in hosts:
            loaded = subprocess.run(
                ["docker", "-H", host.docker_host, "load", "-i", str(archive)],
                capture_output=True, text=True, timeout=900, env=host.env(),
            )  # fmt: skip
            if loaded.returncode != 0:
                raise RuntimeError(f"loading the images into {host.name} failed: {loaded.stderr}")
    finally:
        archive.unlink(missing_ok=True)


def host_entry(host: StandinHost) -> dict[str, Any]:
    return {
        "name": host.name,
        "dockerHost": host.docker_host,
        "hostKey": host.host_key,
        "identityFile": str(host.private_key_path),
    }


def set_config(project: PulumiProject, stack: str, key: str, value: Any) -> None:
    """Write an object or list value into the stack file (``pulumi config set`` takes a value
    starting with ``--`` for a flag)."""
    path = project.root / f"Pulumi.{stack}.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    data.setdefault("config", {})[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def set_hosts(project: PulumiProject, stack: str, hosts: list[StandinHost]) -> None:
    set_config(project, stack, "glm:target", {"hosts": [host_entry(h) for h in hosts]})


def init_stack(
    project: PulumiProject, stack: str, hosts: list[StandinHost], api_key: str, front_port: int
) -> None:
    """The local profile (the simulator) on ``hosts``; the front on the first, on its address."""
    front = hosts[0]
    project.init_stack(
        stack,
        config={
            "glm:front.port": str(front_port),
            "glm:front.bindAddress": front.address,
            "glm:front.allowPlainHttp": "true",
            # The load loop is one client at one address going as fast as it can: not what the
            # front's default limits (docs/front-and-alerts.md "Limits") are for.
            "glm:front.rateLimit.enabled": "false",
            # The stand-in hosts share this machine's file system: one weights folder serves all.
            "glm:model.hostDir": str(front.models_dir),
            "glm:container.name": f"glm53-multi-{stack}",
        },
        secrets={"glm:apiKeys.e2e": api_key},
    )
    # The roll's settings are the defaults: the front drains a replica before it goes, and vLLM's
    # --shutdown-timeout (stopGraceSeconds - 5) is only the second line.
    set_hosts(project, stack, hosts)
