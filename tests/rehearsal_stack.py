"""The rehearsal's stack on stand-in hosts: its config, its key and the local images it runs."""

from __future__ import annotations

from tests.standin_host import StandinHost

API_KEY = "sk-rehearsal-511cf3d6a571098d6efa"
LOCAL_IMAGES = {
    "base": "glm53-local/python:bookworm",
    "front": "glm53-local/nginx:bookworm",
    "monitoring": "glm53-local/prometheus:bookworm",
}
SITE_DIR = "site"
"""rtx5090's second mount (/site) on the stand-in host: not a driver mount, so a rehearsal keeps it."""


def rehearsal_config(host: StandinHost, stack: str, **extra: str) -> dict[str, str]:
    """The stack file's own config plus what a rehearsal on this host changes: where (host, key,
    weights), which images are available offline, and where the gate reads vLLM's metrics."""
    config = {
        "glm:rehearsal.enabled": "true",
        "glm:rehearsal.baseImage": LOCAL_IMAGES["base"],
        "glm:target.hosts[0].dockerHost": host.docker_host,
        "glm:target.hosts[0].hostKey": host.host_key,
        "glm:target.hosts[0].identityFile": str(host.private_key_path),
        "glm:model.hostDir": str(host.models_dir),
        "glm:front.image": LOCAL_IMAGES["front"],
        "glm:monitoring.image": LOCAL_IMAGES["monitoring"],
        "glm:semanticProbe.baseImage": LOCAL_IMAGES["base"],
        # Prometheus on the host's address (not loopback), so the tests read its alerts from this
        # machine. The gate reads the KV pool through the front's metrics route, across the network.
        "glm:monitoring.bindAddress": host.address,
        "glm:monitoring.allowPublicBind": "true",  # a test-only address, reachable from here alone
        "glm:monitoring.scrapeInterval": "2s",
    }
    if stack == "rtx5090":
        config["glm:container.mounts[0].source"] = str(host.root / SITE_DIR)
    return {**config, **extra}
