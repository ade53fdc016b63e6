"""The rotation's series as Prometheus scrapes them."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from components.docker import rotation
from components.render.nginx_conf import ROTATION_DIR, STATUS_DIR
from tests.front_rig import free_port


def rotation_change(tmp: Path, *args: str) -> None:
    """One command of the real rotation program (templates/rotation.sh) on ``tmp``'s rotation, nginx
    not started: it rewrites what the status port serves (``tmp/status/rotation.prom``)."""
    root, status = tmp / "rotation", tmp / "status"
    script = rotation.SCRIPT.replace(ROTATION_DIR, str(root)).replace(STATUS_DIR, str(status))
    subprocess.run(["sh", "-c", script, "sh", *args], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def rotation_status(tmp: Path) -> Iterator[int]:
    """The front's status port, played by a static server over what the real rotation program
    (templates/rotation.sh, run here with nginx not started) publishes: box1 passed its gate twice and
    failed once; box2 passed, then the probe ejected it."""
    status = tmp / "status"
    for args in (
        ("admit", "box1", "127.0.0.1:1"),
        ("fail", "box1", "{}"),
        ("admit", "box1", "127.0.0.1:1"),
        ("admit", "box2", "127.0.0.1:2"),
        ("eject", "box2", "SINCE", "wrong answers"),
    ):
        # The probe ejects only a replica admitted before its failures began (a second from now).
        rotation_change(tmp, *(str(int(time.time()) + 1) if a == "SINCE" else a for a in args))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(status)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)
