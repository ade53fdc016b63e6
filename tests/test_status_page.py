"""The status page (components/status_page.py): what it shows, and that every panel's query is
PromQL the real ``promtool`` accepts. tests/test_status_page_browser.py loads it in a real browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote

import yaml

from components.status_page import PAGE_FILE, PANELS, page_files, query_map, render_page

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


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
        "usage per api key",
    ):
        assert wanted in titles, wanted
    [usage] = [p for p in PANELS if p.name == "usage"]
    assert [name for name, _unit, _expr in usage.series] == [
        "requests", "errors", "tokens in", "tokens out",
        "ttft p50", "ttft p99", "total p50", "total p99", "last seen",
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
