"""What a run measures and how hard it pushes (``Settings``), and what it is pointed at (``Target``)."""

from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("single_stream", "concurrency", "prefix_cache", "over_limit", "context", "hol")
"""Phases that send load, in run order (``--phases`` picks a subset)."""
NEEDS_TOKENS = ("prefix_cache", "over_limit", "context", "hol")
"""Phases that size prompts in tokens: they need the calibration first."""


@dataclass
class Settings:
    """How hard and how long the probe pushes. Every load is bounded in count and time."""

    request_timeout: float = 60.0
    """Seconds without an answer before a request counts as a hang, plus the two rates below."""
    min_prefill_tps: float = 1000.0
    """Prefill slower than this (prompt tokens/s) counts as a hang: a request's deadline is
    request_timeout + prompt_tokens / min_prefill_tps + max_tokens / MIN_DECODE_TPS."""
    context_steps: int = 8
    """Coarse steps of the context search, evenly spaced up to max_model_len."""
    context_resolution: int | None = None
    """Bisection stops when pass and fail are this close (tokens); default max(256, max_model_len/64)."""
    hol_prompt_tokens: int | None = None
    """Prompt of the large prefill in the head-of-line test; default 90 % of the context ceiling,
    at most HOL_DEFAULT_MAX_TOKENS."""
    hol_delay: float = 0.5
    """Without live metrics: seconds between sending the large prefill and the 2-token request."""
    decode_tokens: int = 256
    single_runs: int = 3
    sweep_tokens: int = 128
    sweep_rounds: int = 2
    """Requests each concurrent stream sends back to back at each sweep level."""
    max_num_seqs: int | None = None
    max_num_seqs_source: str = ""
    max_concurrency: int = 64
    prefix_tokens: int | None = None
    """Length of the shared prefix in the prefix-cache test; default min(8192, half the ceiling)."""
    metrics_lag: float = 0.0
    """Seconds counters take to show up at the metrics URL (a Prometheus scrape interval)."""
    phases: tuple[str, ...] = PHASES


@dataclass
class Target:
    """What is probed; nothing secret (the API key stays in the client)."""

    endpoint: str
    metrics_url: str | None = None
    profile: str | None = None
    stack: str | None = None
    label: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
