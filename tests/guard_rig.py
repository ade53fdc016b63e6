"""A replica guard on the real ``nginx``: its keys, its files and the requests a test sends it."""

from __future__ import annotations

import contextlib
import http.client
import shutil
from collections.abc import Iterator
from pathlib import Path

from components.config import build_stack_config
from components.render.replica_guard import render_guard_files
from tests.engine import free_port
from tests.front_rig import nginx_argv, running, runtime_dir, wait_for_port

KEY = "sk-replica-7f3a9c1e5b28d4f06a9e3c71b5d2f8a4"
SCRAPE_KEY = "sk-scrape-0b5e8d2a7c4f19e36b0a5d8c2e7f1a94"
FRONT = build_stack_config({"hardware": "local"}).front


@contextlib.contextmanager
def nginx(files: dict[str, str]) -> Iterator[tuple[int, Path]]:
    """Real nginx on a free loopback port; ``files`` is a release rendered for ``listen``
    ``127.0.0.1:{port}`` and ``runtime_dir`` ``{dir}`` (filled in here)."""
    directory, port = runtime_dir(), free_port()
    for name, text in files.items():
        (directory / name).write_text(text.replace("{port}", str(port)).replace("{dir}", str(directory)))
    with running(nginx_argv(directory), directory / "nginx.log") as proc:
        wait_for_port(port, proc)
        yield port, directory
    shutil.rmtree(directory, ignore_errors=True)


def guard_files(upstream: str, tls_pair: tuple[str, str] | None = None) -> dict[str, str]:
    return render_guard_files(
        FRONT, upstream, KEY, SCRAPE_KEY, tls_pair, listen="127.0.0.1:{port}", runtime_dir="{dir}"
    )


def request(port: int, method: str, path: str, headers: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=b"{}" if method == "POST" else None, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode(), {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()
