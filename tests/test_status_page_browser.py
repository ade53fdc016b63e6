"""The status page in a real headless browser (Debian's ``chromium``, tests/browser.py), over the
pieces a stack runs, each a process on loopback: two vLLM-protocol simulators (hosts box1 and box2),
the semantic probe's real metrics (it ejected box2 for wrong answers), the front's rotation state as
the real rotation program writes it, the usage meter, the real ``nginx`` front with its status
route, and a real Prometheus scraping them all and serving the page's files. After some traffic
from two API keys the page must load with no console error, ask nothing but the front, and show
data in every panel.

The screenshot goes to the test's temp folder; with ``GLM_STATUS_PAGE_SCREENSHOT=<path>`` also to
``<path>`` (docs/img/status-page.png is made so).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import httpx
import openai
import pytest

from components.config import build_stack_config
from components.render.nginx_conf import render_nginx_conf
from components.render.nginx_meter import METRICS_PATH, MeterRoute
from components.render.prometheus_config import DEFAULT_JOB, METER_JOB, ROTATION_JOB
from components.render.status_page import PANELS
from components.semantic_probe import SCRAPE_JOB
from components.semantic_probe.ejection import Ejector
from components.semantic_probe.service import ProbeMetrics, run_once, serve_metrics
from components.semantic_probe_spec import ProbeReplica, SemanticProbeSpec, probe_settings
from tests.browser import CHROMIUM, browser
from tests.engine import free_port
from tests.gate.support import local_config
from tests.metered_front import LUA_MODULES
from tests.test_dashboard import rotation_status
from tests.test_nginx_front import KEYS, METRICS, NGINX, SERVED, running, runtime_dir, vllm_sim, wait_for_port
from tests.test_status_page import page_prometheus

TRAFFIC = 12
"""Chats per key, every other one streamed."""
WIDTH = 1400
"""CSS pixels: two charts a row."""

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"no headless browser at {CHROMIUM} (apt install chromium)"
)

# Each panel in the DOM: its state, the points its chart drew and the table cells with a value.
PANEL_DATA = """JSON.stringify([...document.querySelectorAll("section.panel")].map((s) => ({
  name: s.dataset.panel,
  state: s.dataset.state,
  points: [...s.querySelectorAll("path")].map((p) => (p.getAttribute("d").match(/[ML]/g) || []).length)
    .reduce((a, b) => a + b, 0),
  cells: [...s.querySelectorAll("td:not(.label)")].filter((td) => td.textContent !== "–").length,
  text: s.innerText.slice(0, 400),
})))"""


def _probe_ejects_box2(box1: int, box2: int, requests: Path) -> int:
    """The semantic probe's metrics after two runs on each box, box2 answering wrong (as in
    tests/test_dashboard.py): box2's steps fail and the probe asks to eject it. Returns the port."""
    config = local_config()
    spec = SemanticProbeSpec(
        probe=config.semantic_probe.model_copy(update={"failures_before_alert": 2}),
        smoke=config.smoke,
        served_name=SERVED,
        max_model_len=32768,
        max_num_seqs=256,
        container=config.container,
    )
    replicas = tuple(
        ProbeReplica(h, f"127.0.0.1:{p}", guarded=False) for h, p in (("box1", box1), ("box2", box2))
    )
    settings = dataclasses.replace(
        probe_settings(spec, "unused", f"127.0.0.1:{box1}", replicas),
        endpoint=f"http://127.0.0.1:{box1}/v1",
        port=free_port(),
    )
    metrics = ProbeMetrics(settings)
    serve_metrics(metrics, settings.port)
    ejector = Ejector(requests, 2, 2, metrics)
    httpx.put(f"http://127.0.0.1:{box2}/sim/faults", json={"faults": ["wrong-answer"]}).raise_for_status()
    for _ in range(2):
        for target in settings.targets:
            ejector(target, run_once(settings, KEYS["alice"], metrics, target))
    httpx.put(f"http://127.0.0.1:{box2}/sim/faults", json={"faults": []}).raise_for_status()
    return settings.port


@contextlib.contextmanager
def metered_status_front(boxes: list[int], directory: Path):
    """nginx as a release runs it, the usage meter inside: /status/ from the Prometheus named later
    (``front.prometheus_port`` is set before it starts). Yields the front, its status port (the
    meter's counters) and Prometheus' port."""
    config = build_stack_config({"hardware": "local"})
    status_port, port, prometheus_port = free_port(), free_port(), free_port()
    (directory / "modules").symlink_to(LUA_MODULES)
    with contextlib.ExitStack() as stack:
        conf = render_nginx_conf(
            config.front, [f"127.0.0.1:{p}" for p in boxes], KEYS, metrics_keys=METRICS,
            listen=f"127.0.0.1:{port}", runtime_dir=str(directory), meter=MeterRoute(256, len(boxes), None),
            status_listen=f"127.0.0.1:{status_port}", prometheus=f"127.0.0.1:{prometheus_port}",
        )  # fmt: skip
        (directory / "nginx.conf").write_text(conf)
        argv = [NGINX, "-c", str(directory / "nginx.conf"), "-p", str(directory), "-e", "stderr",
                "-g", "daemon off;"]  # fmt: skip
        wait_for_port(port, stack.enter_context(running(argv, directory / "nginx.log")))
        yield f"http://127.0.0.1:{port}", status_port, prometheus_port


def _wait_for(port: int, query: str, value: float, timeout: float = 60) -> None:
    """Until Prometheus answers ``query`` with ``value``."""
    deadline = time.monotonic() + timeout
    while True:
        answer = httpx.get(
            f"http://127.0.0.1:{port}/api/v1/query", params={"query": query}, timeout=10
        ).json()
        found = [float(r["value"][1]) for r in answer["data"]["result"]]
        if found == [value]:
            return
        assert time.monotonic() < deadline, f"{query}: {found}, not {value}"
        time.sleep(0.5)


def _traffic(base: str) -> dict[str, int]:
    """A few plain and streamed chats from each key; the completion tokens each key received."""
    received = {}
    for name, key in KEYS.items():
        client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=30)
        received[name] = 0
        for i in range(TRAFFIC):
            messages = [{"role": "user", "content": f"Count to {i}."}]
            if i % 2:
                stream = client.chat.completions.create(
                    model=SERVED, messages=messages, max_tokens=8, stream=True,
                    stream_options={"include_usage": True},
                )  # fmt: skip
                usage = [c.usage for c in stream if c.usage is not None][-1]
            else:
                usage = client.chat.completions.create(model=SERVED, messages=messages, max_tokens=8).usage
            assert usage is not None
            received[name] += usage.completion_tokens
    return received


def test_every_panel_shows_data_in_a_real_browser_with_no_console_error(tmp_path: Path) -> None:
    runtime = {"VLLM_SIM_RUNTIME_FAULTS": "1", "VLLM_SIM_DECODE_TOKEN_SECONDS": "0.01"}
    directory = runtime_dir()
    with contextlib.ExitStack() as stack:
        box1 = stack.enter_context(vllm_sim(runtime))
        box2 = stack.enter_context(vllm_sim(runtime))
        (tmp_path / "requests").mkdir()
        probe_port = _probe_ejects_box2(box1, box2, tmp_path / "requests")
        rotation_port = stack.enter_context(rotation_status(tmp_path))
        base, meter_port, prometheus_port = stack.enter_context(metered_status_front([box1, box2], directory))
        scrape = [
            {"job_name": DEFAULT_JOB, "static_configs": [
                {"targets": [f"127.0.0.1:{port}"], "labels": {"host": host}}
                for host, port in (("box1", box1), ("box2", box2))
            ]},
            {"job_name": SCRAPE_JOB, "static_configs": [{"targets": [f"127.0.0.1:{probe_port}"]}]},
            {"job_name": ROTATION_JOB, "metrics_path": "/rotation.prom",
             "static_configs": [{"targets": [f"127.0.0.1:{rotation_port}"]}]},
            {
                "job_name": METER_JOB,
                "metrics_path": METRICS_PATH,
                "static_configs": [{"targets": [f"127.0.0.1:{meter_port}"]}],
            },
        ]  # fmt: skip
        stack.enter_context(page_prometheus(tmp_path / "prometheus", scrape, port=prometheus_port))
        _wait_for(prometheus_port, "count(up == 1)", 5)  # every target scraped once before the traffic
        received = _traffic(base)
        _wait_for(prometheus_port, "sum(glm_key_requests_total)", 2 * TRAFFIC)
        # A chart's point is its query at a multiple of 15 s (the subquery's step): one past now.
        time.sleep(15 - time.time() % 15 + 1)

        page = stack.enter_context(browser(WIDTH))
        page.send("Page.navigate", {"url": f"{base}/status/#key={METRICS['prom']}"})
        deadline = time.monotonic() + 60  # the page asks again every 15 s
        while True:
            panels = json.loads(page.evaluate(PANEL_DATA) or "[]")
            if len(panels) == len(PANELS) and all(
                p["state"] == "ok" and (p["points"] or p["cells"]) for p in panels
            ):
                break
            assert time.monotonic() < deadline, json.dumps(panels, indent=1)
            time.sleep(1)
        shot = page.screenshot(WIDTH)
        problems, requested = page.problems(), page.requested()
        key_left_in_address = page.evaluate("window.location.href")

    shutil.rmtree(directory, ignore_errors=True)
    (tmp_path / "status-page.png").write_bytes(shot)
    if os.environ.get("GLM_STATUS_PAGE_SCREENSHOT"):
        Path(os.environ["GLM_STATUS_PAGE_SCREENSHOT"]).write_bytes(shot)
    for p in panels:
        print(f"{p['name']}: {p['points']} points, {p['cells']} cells")
    print(
        f"requests: {len(requested)}; tokens received per key: {received}; screenshot {tmp_path / 'status-page.png'}"
    )
    assert problems == []
    assert requested and all(url.startswith(f"{base}/status/") or url == "data:," for url in requested), (
        requested
    )
    assert METRICS["prom"] not in key_left_in_address  # taken from the address, kept for the tab only
    usage = next(p for p in panels if p["name"] == "usage")
    assert "alice" in usage["text"] and "bob" in usage["text"]
    probe = next(p for p in panels if p["name"] == "probe_steps")
    assert "FAIL" in probe["text"] and "pass" in probe["text"]  # box2's wrong answers, box1's right ones
