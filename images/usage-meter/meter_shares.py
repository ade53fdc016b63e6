"""The counters per key name and the fair share of the engine's slots (usage_meter.py says why)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

ACTIVE_SECONDS = 60.0
"""A key that asked for a slot this recently, or holds one, is active: it takes part in the shares,
and the slots it used at once lately stay free for it."""
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 240.0, 480.0, 960.0)


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.bounds)
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        counts = self.counts or [0] * len(self.bounds)
        out = [f'{name}_bucket{{{labels},le="{b}"}} {c}' for b, c in zip(self.bounds, counts, strict=True)]
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.total}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


@dataclass
class Peak:
    """The most slots a key held at once lately: over the last one to two ``ACTIVE_SECONDS`` (two
    windows, the current one and the one before, so an old burst is forgotten without a list).

    >>> peak = Peak()
    >>> peak.note(3, now=0.0); peak.note(1, now=70.0); peak.at(100.0), peak.at(130.0), peak.at(200.0)
    (3, 1, 0)
    """

    since: float = -math.inf
    current: int = 0
    previous: int = 0

    def note(self, held: int, now: float) -> None:
        if now - self.since >= ACTIVE_SECONDS:
            self.previous = self.current if now - self.since < 2 * ACTIVE_SECONDS else 0
            self.current, self.since = 0, now
        self.current = max(self.current, held)

    def at(self, now: float) -> int:
        age = now - self.since
        if age >= 2 * ACTIVE_SECONDS:
            return 0
        return self.current if age >= ACTIVE_SECONDS else max(self.current, self.previous)


@dataclass
class KeyUsage:
    requests: dict[int, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    refused: int = 0
    in_flight: int = 0
    active_at: float = -math.inf
    """When (monotonic) it last asked for a slot."""
    peak: Peak = field(default_factory=Peak)
    last_seen: float = 0.0
    """When (Unix time) it last sent a request."""
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    duration: Histogram = field(default_factory=lambda: Histogram(DURATION_BUCKETS))


class Meter:
    """Usage per key name, and the shares of ``capacity`` slots by ``weights`` (name -> weight).

    Work-conserving: a key's share counts only the keys active now, and beyond its share a key may
    take any slot but the few kept free for the other active keys (:meth:`headroom`). A lone key
    gets every slot; another active key finds free, the moment it asks, as many as it used lately.
    """

    def __init__(self) -> None:
        self.capacity = 0
        """0 until nginx said (``X-Glm-Shares``): nothing to share, every request admitted."""
        self.weights: dict[str, float] = {}
        self.fair_share = True
        self.keys: dict[str, KeyUsage] = {}
        self._table = ""

    def configure(self, table: str) -> None:
        """Take nginx's share table, ``capacity=32x2 alice=1 bob=2``: ``maxNumSeqs x`` the replicas
        in rotation, then each key's weight (``off`` at the end: count only).

        >>> meter = Meter()
        >>> meter.configure("capacity=8x2 a=1 b=3")
        >>> meter.capacity, meter.weights, meter.fair_share
        (16, {'a': 1.0, 'b': 3.0}, True)
        """
        if table == self._table:
            return
        fields = table.split()
        pairs = dict(f.split("=", 1) for f in fields if "=" in f)
        slots, _, replicas = pairs.pop("capacity", "0").partition("x")
        self.capacity = int(slots) * int(replicas or "1")
        self.weights = {name: float(weight) for name, weight in pairs.items()}
        self.fair_share = "off" not in fields
        self._table = table

    def key(self, name: str) -> KeyUsage:
        if name not in self.keys:
            self.keys[name] = KeyUsage()
            self.weights.setdefault(name, 1.0)  # a key the table does not name
        return self.keys[name]

    def active(self, name: str, now: float) -> bool:
        """It asked for a slot in the last ``ACTIVE_SECONDS``, or holds one."""
        usage = self.keys.get(name)
        return usage is not None and (usage.in_flight > 0 or now - usage.active_at < ACTIVE_SECONDS)

    def share(self, name: str, now: float) -> int:
        """The slots ``name`` is sure of now: ``capacity x weight / weights of the active keys`` (its
        own included), at least 1. Keys that are not there take no part.

        >>> meter = Meter()
        >>> meter.configure("capacity=8 a=1 b=3")
        >>> meter.share("a", now=0.0), meter.admit("b", now=0.0), meter.share("a", now=1.0)
        (8, True, 2)
        """
        weight = self.weights.get(name, 1.0)
        others = sum(w for other, w in self.weights.items() if other != name and self.active(other, now))
        return max(1, math.floor(self.capacity * weight / ((weight + others) or 1.0)))

    def headroom(self, name: str, now: float) -> int:
        """The free slots kept for an active ``name`` while another key is beyond its share: as many
        as it held at once lately (at least one) on top of what it holds now, within its share, so
        it can double at once. The engine cannot preempt a running stream: a slot another key holds
        frees only when that stream ends, so what ``name`` will ask for must already be free."""
        usage = self.keys[name]
        return max(0, min(self.share(name, now) - usage.in_flight, max(usage.peak.at(now), 1)))

    def fits(self, name: str, now: float) -> bool:
        """A slot for ``name`` now: within its share, or beyond it if the headroom of every other
        active key stays free. Asking makes ``name`` active."""
        usage = self.key(name)
        usage.active_at = now
        if not (self.capacity and self.fair_share) or usage.in_flight < self.share(name, now):
            return True
        busy = sum(k.in_flight for k in self.keys.values())
        kept = sum(self.headroom(o, now) for o in self.keys if o != name and self.active(o, now))
        return busy + 1 + kept <= self.capacity

    def admit(self, name: str, now: float) -> bool:
        """Take a slot for ``name`` if it :meth:`fits`; else count the refusal."""
        usage = self.key(name)
        if not self.fits(name, now):
            usage.refused += 1
            return False
        usage.in_flight += 1
        usage.peak.note(usage.in_flight, now)
        return True

    def release(self, name: str) -> None:
        self.keys[name].in_flight -= 1

    def exposition(self, now: float) -> str:
        """The Prometheus text format; every series is labelled by the key's name (``client``)."""
        families = [
            (
                "glm_key_requests_total",
                "counter",
                "Requests through the front by API key name and HTTP status.",
            ),
            (
                "glm_key_prompt_tokens_total",
                "counter",
                "Prompt tokens by API key name, from the answers' usage.",
            ),
            (
                "glm_key_completion_tokens_total",
                "counter",
                "Completion tokens by API key name, from the answers' usage.",
            ),
            (
                "glm_key_fair_share_refused_total",
                "counter",
                "Requests refused with 429 beyond the key's share of the engine's slots.",
            ),
            ("glm_key_in_flight", "gauge", "Generation requests of the key in the engine now."),
            (
                "glm_key_share",
                "gauge",
                "The key's guaranteed share of the engine's slots now (among the active keys).",
            ),
            ("glm_key_last_seen_timestamp_seconds", "gauge", "When the key last sent a request (Unix time)."),
            (
                "glm_key_time_to_first_token_seconds",
                "histogram",
                "Time to the first generated token of streamed answers, by API key name.",
            ),
            (
                "glm_key_request_duration_seconds",
                "histogram",
                "Time to the answer's last byte, by API key name.",
            ),
        ]
        lines: list[str] = [f"glm_fair_share_capacity {self.capacity}"]
        for family, kind, text in families:
            lines += [f"# HELP {family} {text}", f"# TYPE {family} {kind}"]
            for name in sorted(self.keys):
                usage, labels = self.keys[name], f'client="{name}"'
                if family == "glm_key_requests_total":
                    lines += [
                        f'{family}{{{labels},status="{s}"}} {n}' for s, n in sorted(usage.requests.items())
                    ]
                elif kind == "histogram":
                    hist = usage.ttft if "first_token" in family else usage.duration
                    lines += hist.lines(family, labels)
                else:
                    value = {
                        "glm_key_prompt_tokens_total": usage.prompt_tokens,
                        "glm_key_completion_tokens_total": usage.completion_tokens,
                        "glm_key_fair_share_refused_total": usage.refused,
                        "glm_key_in_flight": usage.in_flight,
                        "glm_key_share": self.share(name, now),
                        "glm_key_last_seen_timestamp_seconds": usage.last_seen,
                    }[family]
                    lines.append(f"{family}{{{labels}}} {value}")
        return "\n".join(lines) + "\n"
