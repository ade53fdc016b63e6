"""The status page (components/render/status_page.py): what it shows, and that every panel's query is
PromQL the real ``promtool`` accepts. tests/test_status_page_browser.py loads it in a real browser."""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from urllib.parse import unquote

import httpx
import yaml

from components.config import build_stack_config
from components.render.nginx_conf import CONF_FILE, render_front_files, render_nginx_conf
from components.render.status_page import (
    CONTENT_SECURITY_POLICY,
    HOLD_URI,
    PAGE_FILE,
    PANELS,
    page_files,
    query_map,
    render_page,
)
from tests.engine import free_port
from tests.front_rig import KEYS, METRICS, NGINX, Front, nginx_argv, running, runtime_dir, wait_for_port
from tests.promtool_rules import PROMTOOL, promql_at
from tests.status_page_rig import page_prometheus


def test_the_page_shows_what_the_issue_asks_for() -> None:
    titles = " / ".join(panel.title for panel in PANELS).lower()
    for wanted in (
        "hosts in rotation",
        "gate history",
        "probe",
        "kv cache",
        "running / waiting",
        "p50 / p99",
        "tokens/s",
        "prefix cache hit rate",
        "usage per api key",
    ):
        assert wanted in titles, wanted
    [usage] = [p for p in PANELS if p.name == "usage"]
    assert [name for name, _unit, _expr in usage.series] == [
        "requests", "errors", "tokens in", "cached in", "tokens out",
        "ttft p50", "ttft p99", "total p50", "total p99", "last seen", "tokens left",
    ]  # fmt: skip


def test_every_query_is_promql_promtool_accepts(tmp_path: Path) -> None:
    """Each panel's one query, as a recording rule: ``promtool check rules`` parses it."""
    rules = {
        "groups": [
            {
                "name": "status-page",
                "rules": [{"record": f"status_page:{p.name}", "expr": p.query} for p in PANELS],
            }
        ]
    }
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(PANELS)} rules found" in checked.stdout


def test_the_front_gets_each_query_as_one_plain_nginx_string() -> None:
    """No ``$`` (an nginx variable), quote, space or ``;`` in what nginx.conf holds, and each
    decodes back to the panel's PromQL."""
    queries = query_map()
    assert len(queries) == len(PANELS)
    for panel in PANELS:
        encoded = queries[f"/status/query/{panel.name}"]
        assert re.fullmatch(r"[A-Za-z0-9_.~%-]+", encoded), panel.name
        assert unquote(encoded) == panel.query
        assert len(encoded) < 4000  # nginx refuses a longer parameter


def test_the_page_carries_the_panels_and_loads_only_its_own_files() -> None:
    files = page_files()
    assert set(files) == {PAGE_FILE, "status.js", "status.css"}
    page = render_page()
    inline = re.search(r'<script type="application/json" id="spec">(.*?)</script>', page)
    assert inline is not None
    spec = json.loads(inline[1])
    assert [p["name"] for p in spec["panels"]] == [p.name for p in PANELS]
    assert "query" not in json.dumps(spec["panels"])  # the PromQL stays with the front
    # Nothing from another origin: every src/href is one of the page's own files (or the empty icon).
    links = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert sorted(links) == ["data:,", "status.css", "status.js"]
    assert "http" not in files["status.js"].replace("http://www.w3.org/2000/svg", "")


# ---- the route: real nginx in front of a real Prometheus ---------------------------------------


def test_a_release_with_the_status_page_passes_nginx_t(tmp_path: Path) -> None:
    """Prometheus' name is resolved when asked, not when nginx loads: the release loads before
    Prometheus exists, as on `pulumi up` (Prometheus is created after the front)."""
    config = build_stack_config({"hardware": "local"})
    files = render_front_files(
        config.front, KEYS, METRICS, runtime_dir=str(tmp_path), prometheus="glm53-no-such-host:9090"
    )
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = subprocess.run(
        [NGINX, "-t", "-c", str(tmp_path / CONF_FILE), "-e", "stderr"],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


@contextlib.contextmanager
def status_front(prometheus: str) -> Iterator[Front]:
    """The front with the status page, its Prometheus at ``prometheus``; no vLLM behind it."""
    config = build_stack_config({"hardware": "local"})
    directory = runtime_dir()
    port = free_port()
    conf = render_nginx_conf(
        config.front, "127.0.0.1:9", KEYS, metrics_keys=METRICS, listen=f"127.0.0.1:{port}",
        runtime_dir=str(directory), prometheus=prometheus,
    )  # fmt: skip
    (directory / "nginx.conf").write_text(conf)
    with running(nginx_argv(directory), directory / "nginx.log") as proc:
        wait_for_port(port, proc)
        yield Front(port, directory)
    shutil.rmtree(directory, ignore_errors=True)


def test_the_page_for_anyone_its_queries_for_metrics_keys_only(tmp_path: Path) -> None:
    with page_prometheus(tmp_path) as prometheus, status_front(f"127.0.0.1:{prometheus}") as front:
        metrics_401 = httpx.get(
            f"{front.base}/metrics", headers={"Authorization": f"Bearer {KEYS['alice']}"}
        ).json()
        page = httpx.get(f"{front.base}/status/", timeout=10)
        assert page.status_code == 200 and page.text == render_page()
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert page.headers["x-content-type-options"] == "nosniff"
        assert httpx.get(f"{front.base}/status/status.js", timeout=10).text == page_files()["status.js"]
        moved = httpx.get(f"{front.base}/status", timeout=10)
        assert (moved.status_code, moved.headers["location"]) == (301, "/status/")
        # Nothing else of Prometheus: not its other files, not its API, not its UI.
        for path in ("/status/status.html", "/status/user/status.js", "/status/api/v1/query", "/graph"):
            assert httpx.get(f"{front.base}{path}", timeout=10).status_code == 404, path

        url = f"{front.base}/status/query/kv_cache"
        for key in (None, KEYS["alice"]):  # none, and an inference key: the metrics key's 401
            for query in (url, f"{front.base}/status/query/usage"):
                refused = httpx.get(
                    query, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=10
                )
                assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
                # Issue 47 item 9: it said "Invalid or missing API key", though an API key was sent.
                message = refused.json()["error"]["message"]
                assert message == metrics_401["error"]["message"], message
                assert message.startswith("Invalid or missing metrics key") and "glm:metricsKeys" in message
                assert "scripts/status_page.sh url" in message  # how to get one
        metrics_key = {"Authorization": f"Bearer {METRICS['prom']}"}
        answer = httpx.get(url, headers=metrics_key, timeout=10)
        assert answer.status_code == 200 and answer.json()["status"] == "success"
        assert answer.headers["cache-control"] == "no-store"
        assert httpx.get(f"{front.base}/status/query/up", headers=metrics_key, timeout=10).status_code == 404
        assert httpx.post(url, headers=metrics_key, timeout=10).status_code == 405
        own_query = httpx.get(f"{url}?query=up", headers=metrics_key, timeout=10)
        assert own_query.status_code == 400


def test_the_hold_trickles_until_the_page_drops_it(tmp_path: Path) -> None:
    """/status/hold (the page's hidden image while its first answers come) answers without a key and
    keeps its response coming for many seconds (its headers trickle too): the load event waits on it
    until the page drops it."""
    with page_prometheus(tmp_path) as prometheus, status_front(f"127.0.0.1:{prometheus}") as front:
        started = time.monotonic()
        with httpx.stream("GET", f"{front.base}{HOLD_URI}", timeout=10) as hold:
            assert hold.status_code == 200
            received = 0
            for chunk in hold.iter_bytes():
                received += len(chunk)
                if time.monotonic() - started > 8:
                    break
            else:
                raise AssertionError(f"the hold ended after {time.monotonic() - started:.1f} s")
        assert 0 < received < 1000, received  # still coming: ~64 bytes a second
        assert httpx.post(f"{front.base}{HOLD_URI}", timeout=10).status_code == 405


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Plays Prometheus: records what the front sends it."""

    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def test_prometheus_gets_the_panel_query_and_never_the_key() -> None:
    recorder = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=recorder.serve_forever, daemon=True).start()
    try:
        with status_front(f"127.0.0.1:{recorder.server_address[1]}") as front:
            metrics_key = {"Authorization": f"Bearer {METRICS['prom']}"}
            for panel in PANELS:
                answer = httpx.get(f"{front.base}/status/query/{panel.name}", headers=metrics_key, timeout=10)
                assert answer.status_code == 200, answer.text
            httpx.get(f"{front.base}/status/", headers=metrics_key, timeout=10)
    finally:
        recorder.shutdown()
    assert _Recorder.seen == [
        *[(f"/api/v1/query?query={query_map()[f'/status/query/{p.name}']}", None) for p in PANELS],
        ("/user/status.html", None),
    ]


def test_prometheus_down_is_a_json_503_that_says_so() -> None:
    with status_front(f"127.0.0.1:{free_port()}") as front:
        for path in ("/status/", "/status/query/usage"):
            down = httpx.get(
                f"{front.base}{path}", headers={"Authorization": f"Bearer {METRICS['prom']}"}, timeout=10
            )
            assert down.status_code == 503 and down.json()["error"]["code"] == "status_unavailable", path
            assert down.headers["retry-after"] == "10"


def test_in_rotation_follows_the_engine_as_prometheus_sees_it(tmp_path: Path) -> None:
    """Issue 47 item 9: the chart said "in rotation: yes" through the minute the container was
    stopped (a `docker stop` changes no rotation state). In rotation is the rotation's state and
    Prometheus' ``up`` of the host's vLLM, with several replicas (``host`` labels) and with one."""
    [rotation] = [p for p in PANELS if p.name == "rotation"]
    in_rotation, engine_up = (
        expr for name, _u, expr in rotation.series if name in ("in rotation", "engine up")
    )
    # Several replicas: box1 answers; box2's container stopped at 30 s; box3 is out (a failed gate).
    several = {
        'glm_rotation_in{job="front-rotation",instance="front:9",host="box1"}': "1x8",
        'glm_rotation_in{job="front-rotation",instance="front:9",host="box2"}': "1x8",
        'glm_rotation_in{job="front-rotation",instance="front:9",host="box3"}': "0x8",
        'up{job="vllm",instance="10.0.0.1:8000",host="box1"}': "1x8",
        'up{job="vllm",instance="10.0.0.2:8000",host="box2"}': "1 1 0x6",
        'up{job="vllm",instance="10.0.0.3:8000",host="box3"}': "1x8",
    }
    at_start = {'{host="box1"}': 1, '{host="box2"}': 1, '{host="box3"}': 0}
    promql_at(tmp_path, several, in_rotation, "15s", at_start)
    stopped = {'{host="box1"}': 1, '{host="box2"}': 0, '{host="box3"}': 0}
    promql_at(tmp_path, several, in_rotation, "45s", stopped)
    promql_at(
        tmp_path, several, engine_up, "45s", {'{host="box1"}': 1, '{host="box2"}': 0, '{host="box3"}': 1}
    )
    # One replica (the local stack): its vLLM target has no host label; the rotation names it.
    one = {
        'glm_rotation_in{job="front-rotation",instance="front:9",host="local"}': "1x8",
        'up{job="vllm",instance="glm53-flash-local:8000"}': "1 1 0x6",
    }
    promql_at(tmp_path, one, in_rotation, "15s", {'{host="local"}': 1})
    promql_at(tmp_path, one, in_rotation, "45s", {'{host="local"}': 0})
    promql_at(tmp_path, one, engine_up, "45s", {'{host="local"}': 0})
