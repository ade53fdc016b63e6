"""NginxReload: the front's config delivered as files and loaded with a graceful ``nginx -s reload``.

The front container never changes for a key, a certificate or a limit: it mounts a volume at
:data:`CONF_ROOT` and runs ``nginx -c CONF_ROOT/current/nginx.conf``. This resource writes each
config as a new release directory through ``docker exec`` on the stack's Docker host, runs
``nginx -t`` on that directory, and only then points ``current`` at it and sends the master
``SIGHUP``. Nginx then starts new workers with the new config and lets the old ones finish their
in-flight requests (streams included), so a front-only change drops no request. A config that
``nginx -t`` refuses is never made current: the running front keeps serving, and ``pulumi up``
fails with nginx's own message.

Secrets (the key maps, the TLS key) are one secret input, ``secret_files``; they reach the
container on ``docker exec``'s stdin, never its argv, and the outputs carry only a scrypt digest.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import shlex
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic

from components.render.nginx_conf import CONF_ROOT
from components.template import one_line_script, shell_program, sources_text

PROVIDER_VERSION = "1"
"""Bump by hand for a behaviour change that must re-deliver every stack's front config."""
SOURCE_HASH = hashlib.sha256(
    (ast.dump(ast.parse(Path(__file__).read_text())) + sources_text("release.sh")).encode()
).hexdigest()[:12]
VERSION = f"{PROVIDER_VERSION}+{SOURCE_HASH}"

DIGEST_FILE = "secrets.digest"
"""In each release beside nginx.conf: :func:`secrets_digest` of its secret files."""
CURRENT_CONF = f"{CONF_ROOT}/current/nginx.conf"
RELOAD_WAIT_SECONDS = 10
"""How long the new workers may take to replace the old ones' listeners after SIGHUP."""
EXEC_TIMEOUT_SECONDS = 120
EFFECT = (
    "front-only change: the files are checked with `nginx -t`, then nginx reloads in place. Old "
    "workers finish in-flight requests, new connections get the new config: no request is dropped "
    "and the serving container is untouched."
)
"""Shown in every ``preview --diff`` of this resource: what applying the change costs."""

START_VALUES = {"CONF": CURRENT_CONF}
START_COMMAND = one_line_script("nginx-start.sh", values=START_VALUES)
"""The container's command: wait for the first release, then nginx as PID 1 (so ``kill -HUP 1``)."""

RELEASE_SCRIPT = shell_program(
    "release.sh",
    {
        "ROOT": CONF_ROOT,
        "TRIES": str(RELOAD_WAIT_SECONDS * 20),
        "WAIT": str(RELOAD_WAIT_SECONDS),
        "DIGEST": DIGEST_FILE,
    },
)
"""Run with ``sh -c RELEASE_SCRIPT sh <release id>``, the release as a base64 tar on stdin."""


# ---- pure helpers -------------------------------------------------------------------------------


def secrets_digest(files: Mapping[str, str]) -> str:
    """A slow, salted digest of the secret files: changes when any key or the TLS pair changes,
    and costs ~50 ms per guess, so even a short key cannot be brute-forced from it."""
    blob = json.dumps(dict(sorted(files.items())), separators=(",", ":")).encode()
    return hashlib.scrypt(blob, salt=b"glm53-front/secret-files/v1", n=2**14, r=8, p=1, dklen=16).hex()


def release_id(fingerprint: str) -> str:
    """The release directory's name: the first 16 hex digits of the front fingerprint."""
    return fingerprint[:16]


def bundle(files: Mapping[str, str]) -> bytes:
    """The release as a deterministic tar (sorted, no timestamps), base64 for stdin."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            data = files[name].encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, 0
            tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buffer.getvalue())


def exec_argv(docker_host: str, ssh: Mapping[str, Any] | None, container: str, release: str) -> list[str]:
    """``docker exec -i <container> sh -c RELEASE_SCRIPT sh <release>`` on the stack's Docker host."""
    return container_exec_argv(docker_host, ssh, container, RELEASE_SCRIPT, release)


def container_exec_argv(
    docker_host: str, ssh: Mapping[str, Any] | None, container: str, script: str, *args: str
) -> list[str]:
    """``docker exec -i <container> sh -c <script> sh <args…>`` on the stack's Docker host.

    For ``ssh://`` hosts it runs through ``ssh`` with the Docker provider's options (strict host-key
    check against ``hostKey`` only, the same user and identity; components/docker/target.py).
    """
    return docker_argv(docker_host, ssh, "exec", "-i", container, "/bin/sh", "-c", script, "sh", *args)


def docker_argv(docker_host: str, ssh: Mapping[str, Any] | None, *args: str) -> list[str]:
    """``docker <args…>`` against the stack's Docker host (through ``ssh`` for ``ssh://`` hosts)."""
    if ssh is None:
        return ["docker", "-H", docker_host, *args]
    # Numbers reach a dynamic provider as floats (2222.0): ssh wants an integer port.
    return [
        "ssh",
        *ssh["opts"],
        "-p",
        str(int(ssh["port"])),
        str(ssh["address"]),
        "--",
        shlex.join(["docker", *args]),
    ]


# ---- the dynamic provider -------------------------------------------------------------------------

# Inputs compared by diff; ``secret_files`` is compared through ``secrets_digest``.
COMPARED = (
    "api_key_names",
    "container",
    "container_id",
    "docker_host",
    "effect",
    "fingerprint",
    "metrics_key_names",
    "nginx_conf",
    "secrets_digest",
    "ssh",
    "tls_certificate_sha256",
    "version",
)


def apply_release(props: Mapping[str, Any]) -> str:
    """Write, test and load one release; returns the script's last line. Raises with nginx's error."""
    import subprocess

    release = release_id(str(props["fingerprint"]))
    secret_files = props["secret_files"]
    # Not a secret (the outputs carry it): tells the script whether the previous release holds
    # the same keys, so that it may stay as a rollback target.
    digest = props.get("secrets_digest") or secrets_digest(secret_files)
    files = {**secret_files, "nginx.conf": props["nginx_conf"], DIGEST_FILE: f"{digest}\n"}
    argv = exec_argv(str(props["docker_host"]), props.get("ssh"), str(props["container"]), release)
    try:
        done = subprocess.run(
            argv, input=bundle(files), capture_output=True, timeout=EXEC_TIMEOUT_SECONDS, check=False
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"delivering front config {release} to {props['container']} took over "
            f"{EXEC_TIMEOUT_SECONDS} s; the front keeps its current config"
        ) from None
    stderr = done.stderr.decode(errors="replace").strip()
    if done.returncode != 0:
        raise RuntimeError(
            f"front config {release} was not applied to container {props['container']} "
            f"(exit {done.returncode}):\n{stderr}"
        )
    return done.stdout.decode(errors="replace").strip().splitlines()[-1]


def reload_outputs(props: Mapping[str, Any]) -> dict[str, Any]:
    """Every compared input (so the next diff can compare) and the live release; no secret."""
    outs = {k: props.get(k) for k in COMPARED if props.get(k) is not None}
    outs["release"] = release_id(str(props["fingerprint"]))
    return outs


class NginxReloadProvider(pulumi.dynamic.ResourceProvider):
    """Pickled with dill: imports live inside the methods (and in module functions they call)."""

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        changed = [k for k in COMPARED if olds.get(k) != news.get(k)]
        # Never a replacement: any change is an update, and an update is a reload.
        return pulumi.dynamic.DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        apply_release(props)
        return pulumi.dynamic.CreateResult(f"front-config-{props['container']}", reload_outputs(props))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        apply_release(news)
        return pulumi.dynamic.UpdateResult(reload_outputs(news))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Nothing to undo: the files live in the front's volume, which goes with the container."""


class NginxReload(pulumi.dynamic.Resource):
    """One front release: ``nginx_conf`` and key names in the diff, the secret files as one secret."""

    release: pulumi.Output[str]
    """The live release directory (``releases/<release>``), from the fingerprint."""

    def __init__(self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(
            NginxReloadProvider(),
            name,
            {**props, "effect": EFFECT, "version": VERSION, "release": None},
            opts,
        )
