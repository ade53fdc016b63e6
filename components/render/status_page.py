"""The front's status page (issue 36): one self-contained page over the stack's own Prometheus.

Hosts in rotation and the probe's ejections, the gate history, the semantic probe's steps, KV cache
use, requests running and waiting, time to first token p50/p99, tokens/s, the prefix cache's hit
rate and usage per API key name.
Nothing is fetched from outside: the page is three files (HTML, a few lines of JS that draw SVG,
CSS) served by Prometheus itself (``--web.user-assets``) and proxied by the front, whose
Content-Security-Policy allows nothing but the page's own origin.

Every panel is one fixed PromQL query, named here and rendered into the front's config
(components/render/nginx_conf.py): a metrics key (``glm:metricsKeys``) asks ``/status/query/<name>``, and
nginx sends Prometheus that query and no other. The page cannot run PromQL of its own, so a metrics
key reads what the page shows and nothing more. The PromQL is the dashboard's (components/render/dashboard.py)
and ``make status``'s (components/render/usage_queries.py), so the three views never disagree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

from components import semantic_probe
from components.render.dashboard import PANELS as DASHBOARD_PANELS
from components.render.dashboard import RATE
from components.render.openai_errors import openai_error
from components.render.prometheus_config import ROTATION_JOB
from components.render.usage_queries import QUERIES as USAGE_QUERIES
from components.render.usage_queries import fleet_cache_hit_rate
from components.template import render_file, template

HISTORY_MINUTES = 30
"""How far back the charts go."""
HISTORY = f"{HISTORY_MINUTES}m"
STEP = "15s"
"""The charts' resolution: one point per scrape at the default ``glm:monitoring.scrapeInterval``."""
RATE_WINDOW = "1m"
"""The rate window of tokens/s and the TTFT quantiles (the dashboard's ``$__rate_interval``)."""
REFRESH_SECONDS = 15
"""How often the page asks again: 9 queries each time, well under the front's per-address limit
(``glm:front.rateLimit.unauthenticatedRequestsPerSecond``, 5 r/s, burst 20)."""
ASSETS_DIR = "/etc/prometheus/status-page"
"""Where the page's files are in the Prometheus container (``--web.user-assets``, served at /user/)."""
PAGE_FILE = "status.html"
ASSET_FILES = {"status.js": "status-page.js", "status.css": "status-page.css"}
"""The page's other files (next to it under /status/ at the front) and their templates."""
READ_TIMEOUT_SECONDS = 15
"""The longest a panel's query may take (the charts are 120-point subqueries)."""
HOLD_URI = "/status/hold"
"""A response that trickles for about ``HOLD_SECONDS``: the page shows it as a hidden image until its
first answers are drawn, which holds the document's load event (a ``fetch`` never does). A headless
browser's ``--screenshot`` or ``--dump-dom``, taken at the load event, then shows the panels, not
"loading…"."""
HOLD_SECONDS = READ_TIMEOUT_SECONDS + 5
"""The hold's longest: past the slowest query the page may wait for."""
HOLD_RATE = 64
"""Bytes a second of the hold's body (nginx ``limit_rate``; its headers count too)."""
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The page may load its own files and ask its own origin, nothing else (the browser enforces it)."""
SERIES_LABEL = "series"
"""The label that tells a panel's series apart when one query returns several (``label_replace``)."""

_P = semantic_probe.METRIC_PREFIX
_PROBE = f'job="{semantic_probe.SCRAPE_JOB}"'
_ROTATION = f'job="{ROTATION_JOB}"'

Unit = Literal["in_rotation", "ratio", "seconds", "count", "per_second", "timestamp", "pass"]


@dataclass(frozen=True)
class Panel:
    """One box on the page: one query, drawn as a chart over ``HISTORY`` or a table of now."""

    name: str
    """The query's name: ``/status/query/<name>`` at the front."""
    title: str
    kind: Literal["chart", "table"]
    series: tuple[tuple[str, Unit, str], ...]
    """(name shown, unit, PromQL) per series: a chart's lines, a table's columns."""
    rows: tuple[str, ...] = ()
    """A table's row labels (``host``, ``client``...), in the order they are shown."""

    @property
    def query(self) -> str:
        """The panel's one PromQL query: each series labelled ``series="<name>"``; a chart's over
        the last ``HISTORY`` (a subquery, so an instant query returns the whole chart)."""
        union = " or ".join(
            f'label_replace({expr}, "{SERIES_LABEL}", "{name}", "", "")' for name, _unit, expr in self.series
        )
        return f"({union})[{HISTORY}:{STEP}]" if self.kind == "chart" else union

    def spec(self) -> dict[str, object]:
        """What the page's script reads of the panel (the PromQL stays with the front)."""
        return {
            "name": self.name,
            "title": self.title,
            "kind": self.kind,
            "series": [{"name": name, "unit": unit} for name, unit, _expr in self.series],
            "rows": list(self.rows),
        }


def _dashboard(title: str) -> tuple[str, ...]:
    """The PromQL of the dashboard's panel whose title starts with ``title``, at ``RATE_WINDOW``."""
    [targets] = [targets for full, _unit, targets in DASHBOARD_PANELS if full.startswith(title)]
    return tuple(expr.replace(RATE, RATE_WINDOW) for expr, _legend in targets)


def _single(title: str) -> str:
    [expr] = _dashboard(title)
    return expr


def _usage(column: str, unit: Unit) -> tuple[str, Unit, str]:
    return column, unit, USAGE_QUERIES[column]


PANELS: tuple[Panel, ...] = (
    Panel(
        "rotation",
        "Hosts in rotation (in the front's rotation and answering), engines up, ejected by the probe",
        "chart",
        (
            ("in rotation", "in_rotation", _single("In rotation")),
            ("engine up", "in_rotation", _single("Engine up")),
            ("ejected by the probe", "in_rotation", _single("Ejected by the probe")),
        ),
    ),
    Panel(
        "gate_history",
        "Gate history: gates passed and failed, drains, probe ejections and returns",
        "table",
        (
            ("times", "count", _single("Gate history")),
            (
                "last",
                "timestamp",
                f"max by (host, event) (glm_rotation_last_event_timestamp_seconds{{{_ROTATION}}})",
            ),
        ),
        rows=("host", "event"),
    ),
    Panel("kv_cache", "KV cache use", "chart", (("used", "ratio", _single("KV cache usage")),)),
    Panel(
        "requests",
        "Requests running / waiting",
        "chart",
        tuple(
            (name, "count", expr)
            for name, expr in zip(("running", "waiting"), _dashboard("Requests running"), strict=True)
        ),
    ),
    Panel(
        "ttft",
        "Time to first token p50 / p99",
        "chart",
        tuple(
            (name, "seconds", expr)
            for name, expr in zip(("p50", "p99"), _dashboard("Time to first token"), strict=True)
        ),
    ),
    Panel(
        "tokens",
        "Tokens/s generated",
        "chart",
        (("generated", "per_second", _single("Generation tokens/s")),),
    ),
    Panel(
        "prefix_cache",
        "Prefix cache hit rate: the share of the keys' prompt tokens the engines had cached (the fleet)",
        "chart",
        (("fleet", "ratio", fleet_cache_hit_rate(RATE_WINDOW)),),
    ),
    Panel(
        "probe_steps",
        "Semantic probe: each step's last run",
        "table",
        (
            ("result", "pass", _single("Probe steps passing")),
            (
                "failures in a row",
                "count",
                f"max by (host, path, step) ({_P}_step_consecutive_failures{{{_PROBE}}})",
            ),
        ),
        rows=("host", "path", "step"),
    ),
    Panel(
        "usage",
        "Usage per API key name (counts kept across restarts; latency over the last hour; tokens left of "
        "the key's tightest budget)",
        "table",
        (
            _usage("requests", "count"),
            _usage("errors", "count"),
            _usage("tokens in", "count"),
            _usage("cached in", "count"),
            _usage("tokens out", "count"),
            _usage("ttft p50", "seconds"),
            _usage("ttft p99", "seconds"),
            _usage("total p50", "seconds"),
            _usage("total p99", "seconds"),
            _usage("last seen", "timestamp"),
            _usage("tokens left", "count"),
        ),
        rows=("client",),
    ),
)
"""The page's panels, in its order."""


def query_map() -> dict[str, str]:
    """URI -> the URL-encoded ``query=`` value nginx sends Prometheus for it (no ``$``, quote or
    space is left, so each is one plain nginx string)."""
    return {f"/status/query/{panel.name}": quote(panel.query, safe="") for panel in PANELS}


def render_page() -> str:
    """``index.html``: the panels' specs inline as JSON (``<`` escaped, so no text ends the element)."""
    specs = json.dumps(
        {
            "refreshSeconds": REFRESH_SECONDS,
            "historySeconds": HISTORY_MINUTES * 60,
            "panels": [p.spec() for p in PANELS],
        },
        separators=(",", ":"),
    )
    return render_file("status-page.html", {"panels": specs.replace("<", "\\u003c")})


def page_files() -> dict[str, str]:
    """File name -> content, for ``ASSETS_DIR``."""
    return {PAGE_FILE: render_page(), **{name: template(source) for name, source in ASSET_FILES.items()}}


def render_front_conf(prometheus: str, resolver: str) -> tuple[str, str]:
    """(the ``http`` block's maps, the ``server`` block's locations) of the front's nginx.conf that
    serve the page and its queries from the Prometheus at ``prometheus`` (``host:port``), its name
    looked up at ``resolver`` when asked."""
    files = {"/status/": PAGE_FILE, **{f"/status/{name}": name for name in ASSET_FILES}}
    maps = render_file(
        "nginx-status-page-maps.conf",
        {
            "files": "\n".join(f'        "{uri}" "{file}";' for uri, file in files.items()),
            "queries": "\n".join(f'        "{uri}" "{query}";' for uri, query in query_map().items()),
            "prometheus": prometheus,
        },
    )
    settings = render_file(
        "nginx-status-page-settings.conf",
        {
            "resolver": resolver,
            "read_timeout": str(READ_TIMEOUT_SECONDS),
            "content_security_policy": CONTENT_SECURITY_POLICY,
        },
    ).rstrip("\n")
    routes = render_file(
        "nginx-status-page.conf",
        {
            "settings": settings,
            "hold_uri": HOLD_URI,
            "hold_rate": str(HOLD_RATE),
            "hold_body": "." * (HOLD_RATE * HOLD_SECONDS),
            "error_status_unavailable": openai_error(
                f"The stack Prometheus ({prometheus}) is not reachable: it is starting or down. "
                "The page shows again once it answers.",
                "status_unavailable",
                "server_error",
            ),
        },
    )
    return maps, routes
