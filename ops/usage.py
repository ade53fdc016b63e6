"""``make status``'s usage table: per API key name, from the stack's own Prometheus.

The usage meter (in the front's nginx, components/host/meter/) counts across restarts; Prometheus scrapes it (job
``usage-meter``). The table asks Prometheus with ``promtool query instant`` run inside the
Prometheus container (``docker exec``; the UI is bound to the host's loopback, and the image has
``promtool`` but no HTTP client), so it works over the same SSH Docker host as the other commands.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Callable, Sequence

from components.render.prometheus_config import CONTAINER_PORT
from components.render.usage_queries import QUERIES

Query = Callable[[str], dict[str, float]]


def promtool_query(argv_prefix: Sequence[str], server: str = f"http://localhost:{CONTAINER_PORT}") -> Query:
    """A query through ``promtool``: ``argv_prefix`` runs it (``[docker..., "exec", name, "promtool"]``
    on a stack, ``["promtool"]`` beside a local Prometheus). Returns client -> value."""

    def query(expr: str) -> dict[str, float]:
        out = subprocess.run(
            [*argv_prefix, "query", "instant", "-o", "json", server, expr],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode != 0:
            raise RuntimeError(f"promtool query failed: {out.stderr.strip() or out.stdout.strip()}")
        return {s["metric"].get("client", ""): float(s["value"][1]) for s in json.loads(out.stdout or "[]")}

    return query


def usage_rows(query: Query) -> dict[str, dict[str, float]]:
    """client -> column -> value, for every key the meter has seen."""
    rows: dict[str, dict[str, float]] = {}
    for column, expr in QUERIES.items():
        for client, value in query(expr).items():
            rows.setdefault(client, {})[column] = value
    return rows


def _cell(column: str, value: float | None, now: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    if column == "last seen":
        ago = max(0, now - value)
        return (
            f"{ago:.0f} s ago"
            if ago < 120
            else f"{ago / 60:.0f} min ago"
            if ago < 7200
            else f"{ago / 3600:.1f} h ago"
        )
    if " p" in column:
        return f"{value:.2f} s"
    return f"{value:.0f}"


def usage_table(rows: dict[str, dict[str, float]], now: float | None = None) -> str:
    """The table ``make status`` prints (counts since the meter started; latency over ``usage_queries.WINDOW``).

    >>> print(usage_table({"alice": {"requests": 3, "tokens in": 40, "ttft p50": 0.1234, "last seen": 95.0}}, 100))
    key    requests  errors  tokens in  cached in  tokens out  ttft p50  ttft p99  total p50  total p99  last seen  tokens left
    alice         3       -         40          -           -    0.12 s         -          -          -    5 s ago            -
    """
    now = time.time() if now is None else now
    if not rows:
        return "no usage yet (the meter has counted no request, or Prometheus has not scraped it)"
    header = ["key", *QUERIES]
    table = [header] + [
        [client, *(_cell(c, rows[client].get(c), now) for c in QUERIES)] for client in sorted(rows)
    ]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in table
    ]
    return "\n".join(line.rstrip() for line in lines)
