"""The status page's Prometheus as a test stands it in."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from components.render.status_page import page_files
from tests.engine import free_port
from tests.front_rig import running

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


@contextlib.contextmanager
def page_prometheus(tmp: Path, scrape: list[dict] | None = None, port: int | None = None) -> Iterator[int]:
    """A real Prometheus serving the page's files as the stack's does (``--web.user-assets``),
    scraping ``scrape`` every second."""
    assets = tmp / "assets"
    assets.mkdir(parents=True)
    for name, text in page_files().items():
        (assets / name).write_text(text)
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": scrape or []}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = port or free_port()
    argv = [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", f"--web.user-assets={assets}"]  # fmt: skip
    with running(argv, tmp / "prometheus.log") as proc:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).status_code == 200:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, (tmp / "prometheus.log").read_text()
            time.sleep(0.2)
        yield port
