"""A leaving front pod hands its counts to one that stays (components/host/meter/meter_handoff.lua;
docs/scaling.md, "Usage, exact across pods"): the usage table, an instant sum of every pod's
series, keeps what a pod that left counted. In LuaJIT over a table, the table's query in a real
promtool, and two real nginx fronts over one simulator, one of them leaving as its preStop does."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from components.render.nginx_meter import INHERIT_PATH, METRICS_PATH
from components.render.usage_queries import QUERIES
from tests.front_peers import PULL_SECONDS, ask, two_fronts, wait_for
from tests.metered_front import MeteredFront, run_in_nginx_lua
from tests.promtool_rules import promql_at

MODULES = ["meter_handoff", "meter_peers", "meter_counters", "meter_shares", "meter_budget"]

DRIVER = """
local cjson = require("cjson")
local handoff = require("meter_handoff")
local counters = require("meter_counters")
local shares = require("meter_shares")
local budgets = require("meter_budget")
local given = cjson.decode(io.open(IN):read("*a"))
-- The leaving pod: alice's and bob's counts, and what it inherited itself from a pod before it.
local leaving = table_dict(given.leaving)
local totals = cjson.decode(cjson.encode(handoff.totals(leaving))) -- as sent
local heir = table_dict(given.heir)
local share = shares.new(heir, {})
local function note(name) share:note_name(name) end
local first = { handoff.inherit(heir, "front-a", totals, note) }
local again = { handoff.inherit(heir, "front-a", totals, note) }
local junk = { handoff.inherit(heir, "front-x", "no totals", note) }
local text = counters.exposition(heir, share, budgets.new(heir, {}), 0, 5000)
reply({ totals = totals, first = first, again = again, junk = junk, text = text })
"""

LEAVING = {
    "requests:alice:200": 2, "requests:alice:429": 1, "prompt:alice": 30, "completion:alice": 12,
    "cached:alice": 16, "seen:alice": 1000,
    "requests:bob:200": 1, "prompt:bob": 10, "completion:bob": 4, "seen:bob": 1100,
    "inherited_requests:front-z:alice:200": 5, "inherited_prompt:front-z:alice": 50,
    "inherited_completion:front-z:alice": 20,
    # Not handed on: the latency histograms, refusals of the fair share, budgets, slots held.
    "ttft:alice:3": 1, "refused:alice": 2, "budget_day:alice:tokens:20000": 42, "held:alice": 1,
}  # fmt: skip
HEIR = {"requests:alice:200": 7, "prompt:alice": 70, "seen:alice": 2000, "names": "alice"}


def sample(text: str, metric: str, labels: str) -> float | None:
    found = re.search(rf"^{metric}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def test_the_heir_shows_what_the_leaving_pod_counted_apart_from_its_own_and_only_once() -> None:
    said = run_in_nginx_lua(MODULES, DRIVER, {"leaving": LEAVING, "heir": HEIR})
    # What it counted and what it had inherited, added; nothing but the usage table's counters.
    assert said["totals"] == {
        "alice": {
            "requests": {"200": 7, "429": 1},
            "prompt": 80,
            "completion": 32,
            "cached": 16,
            "seen": 1000,
        },
        "bob": {"requests": {"200": 1}, "prompt": 10, "completion": 4, "seen": 1100},
    }
    assert said["first"] == [True, "inherited 2 keys' counts from front-a"]
    assert said["again"] == [True, "already inherited from front-a"]
    assert said["junk"] == [False, "not a handoff"]
    text = said["text"]
    inherited = {
        ("requests", 'client="alice",from="front-a",status="200"'): 7,
        ("requests", 'client="alice",from="front-a",status="429"'): 1,
        ("requests", 'client="bob",from="front-a",status="200"'): 1,
        ("prompt_tokens", 'client="alice",from="front-a"'): 80, ("prompt_tokens", 'client="bob",from="front-a"'): 10,
        ("completion_tokens", 'client="alice",from="front-a"'): 32,
        ("cached_prompt_tokens", 'client="alice",from="front-a"'): 16,
    }  # fmt: skip
    for (counter, labels), value in inherited.items():
        assert sample(text, f"glm_key_inherited_{counter}_total", labels) == value, (counter, labels)
    # Its own counts are its own still (rates read them); a key it never served shows from now on.
    assert sample(text, "glm_key_requests_total", 'client="alice",status="200"') == 7
    assert sample(text, "glm_key_prompt_tokens_total", 'client="alice"') == 70
    assert sample(text, "glm_key_prompt_tokens_total", 'client="bob"') == 0
    # The last request seen is the later of the two pods'.
    assert sample(text, "glm_key_last_seen_timestamp_seconds", 'client="alice"') == 2000
    assert sample(text, "glm_key_last_seen_timestamp_seconds", 'client="bob"') == 1100
    assert "# TYPE glm_key_inherited_requests_total counter" in text


def test_a_front_with_nothing_inherited_shows_no_inherited_series() -> None:
    said = run_in_nginx_lua(MODULES, DRIVER, {"leaving": {}, "heir": HEIR})
    assert said["totals"] == {} and said["first"] == [True, "inherited 0 keys' counts from front-a"]
    assert "inherited" not in said["text"]


def test_the_usage_table_adds_the_inherited_counts_to_the_pods_own(tmp_path: Path) -> None:
    """Real promtool: front-a counted alice's 32 answers (2 of them 429s), handed them to front-b,
    whose scrape at 30 s reads them, and left (its series stale from 45 s, a scrape later). The
    table counts them once throughout: front-a's own while they last (not both at 30 s, which would
    be 71), then front-b's copy; without the handoff it would drop to front-b's own (8, then 9)."""
    meter = 'job="usage-meter",client="alice"'
    series = {
        f'glm_key_requests_total{{{meter},host="front-a",status="200"}}': "10 20 30 stale",
        f'glm_key_requests_total{{{meter},host="front-a",status="429"}}': "1 2 2 stale",
        f'glm_key_requests_total{{{meter},host="front-b",status="200"}}': "5 6 7 8 9",
        f'glm_key_inherited_requests_total{{{meter},host="front-b",from="front-a",status="200"}}': "_ _ 30 30 30",
        f'glm_key_inherited_requests_total{{{meter},host="front-b",from="front-a",status="429"}}': "_ _ 2 2 2",
    }
    before = {'{client="alice"}': 30 + 2 + 7}
    promql_at(tmp_path, series, QUERIES["requests"], "30s", before)
    promql_at(tmp_path, series, QUERIES["requests"], "45s", {'{client="alice"}': 8 + 30 + 2})
    promql_at(tmp_path, series, QUERIES["requests"], "60s", {'{client="alice"}': 9 + 30 + 2})
    promql_at(tmp_path, series, QUERIES["errors"], "60s", {'{client="alice"}': 2})


@contextlib.contextmanager
def fronts_leaving() -> Iterator[tuple[MeteredFront, MeteredFront, dict[str, Path]]]:
    """Two fronts (tests/front_peers.py), each with its drain file in a folder its workers (nobody,
    when the master is root) may write to: ``dirs[name]/draining``."""
    dirs = {name: Path(tempfile.mkdtemp(prefix=f"glm53-leaving-{name}-")) for name in ("a", "b")}
    for folder in dirs.values():
        os.chmod(folder, 0o777)
    try:
        with two_fronts({}, (str(dirs["a"] / "draining"), str(dirs["b"] / "draining"))) as (a, b):
            yield a, b, dirs
    finally:
        for folder in dirs.values():
            shutil.rmtree(folder, ignore_errors=True)


def counted(status_port: int) -> dict[str, float]:
    """The usage table's requests per key, as the fronts' own and inherited series say it now."""
    text = httpx.get(f"http://127.0.0.1:{status_port}{METRICS_PATH}", timeout=10).text
    found: dict[str, float] = {}
    for metric in ("glm_key_requests_total", "glm_key_inherited_requests_total"):
        labels = r'client="([^"]+)",(?:from="[^"]+",)?status="\d+"'
        for name, value in re.findall(rf"^{metric}{{{labels}}} (\S+)$", text, re.M):
            found[name] = found.get(name, 0) + float(value)
    return found


def inherit(status_port: int, sent: dict, source: str = "127.0.0.1") -> int:
    """The status of a handoff sent from ``source`` (another loopback address is no front's)."""
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=10) as client:
        return client.post(f"http://127.0.0.1:{status_port}{INHERIT_PATH}", json=sent).status_code


def leave(front_dir: Path) -> str:
    """What the preStop does once the pod's final counts are scraped: ask for the handoff and read
    what happened (components/host/templates/nginx-quit-metered.sh)."""
    marker = front_dir / "draining"
    marker.touch()
    (front_dir / "draining.handoff").touch()
    assert wait_for(lambda: (front_dir / "draining.handoff.done").exists(), 10)
    return (front_dir / "draining.handoff.done").read_text()


def test_a_leaving_front_hands_its_counts_to_the_front_that_stays() -> None:
    with fronts_leaving() as (a, b, dirs):
        assert a.status_port is not None and b.status_port is not None
        assert [ask(a) for _ in range(5)] + [ask(a, "bob") for _ in range(2)] == [200] * 7
        assert [ask(b) for _ in range(3)] == [200] * 3
        time.sleep(4 * PULL_SECONDS)  # each front has heard from the other lately
        # Counts come only from a front pod's address (both are 127.0.0.1 here), and whole.
        assert inherit(b.status_port, {"from": "x", "totals": {"alice": {"prompt": 9}}}, "127.0.0.2") == 403
        assert inherit(b.status_port, {"from": "x"}) == 400
        said = leave(dirs["a"])
        assert said.strip() == "handed its counts to front-b", said
        # Front b's table is the stack's: its own 3 and front a's 5 of alice's, front a's 2 of bob's.
        assert counted(b.status_port) == {"alice": 3 + 5, "bob": 2}
        # A leaving front takes none.
        assert inherit(a.status_port, {"from": "x", "totals": {"alice": {"prompt": 9}}}) == 409
        # A second ask is no second count; a pod that is leaving takes no counts and is no heir.
        (dirs["a"] / "draining.handoff.done").unlink()
        time.sleep(4 * PULL_SECONDS)
        assert not (dirs["a"] / "draining.handoff.done").exists()
        # With no heir it tries again each pull for 4 s (meter_handoff.TRY_SECONDS), then says so.
        started = time.monotonic()
        said = leave(dirs["b"])
        assert said.strip().startswith("no front pod alive that is not leaving"), said
        assert time.monotonic() - started > 3.5
        assert counted(b.status_port) == {"alice": 8, "bob": 2}
