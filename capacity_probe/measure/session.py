"""What the measurements of one run share: the client and the settings, what the run learnt so far
(the model, max_model_len, the KV pool, the token calibration), the result being filled, the
findings and notes, and the helpers every measurement uses (deadlines, metric scrapes, prompts)."""

from __future__ import annotations

import math
from typing import Any

import httpx

from capacity_probe import vllm_metrics
from capacity_probe.client import ProbeClient, ProbeError, Progress, Reply
from capacity_probe.measure.run_settings import Settings, Target
from capacity_probe.prompts import TokenModel, UniqueText

MIN_DECODE_TPS = 2.0
"""A request decoding slower than this counts as timed out (part of its deadline)."""
TINY_PROMPT = "Say hi."
SHORT_CHUNKS = 4
"""Unique chunks in the prompt of a decode or sweep request (about a hundred tokens)."""


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p99 of fewer than 100 values is their maximum).

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 99)
    (2.0, 4.0)
    """
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def rounded(value: float | None, digits: int = 3) -> float | None:
    """A figure as probe-result.json keeps it (None stays None)."""
    return None if value is None else round(value, digits)


class Session:
    """One run against one target, as the measurements see it."""

    def __init__(self, client: ProbeClient, target: Target, settings: Settings, progress: Progress):
        self.client = client
        self.target = target
        self.settings = settings
        self.progress = progress
        self.text = UniqueText()
        self.tokens: TokenModel | None = None
        self.max_model_len = 0
        self.model = client.model
        self.pool: int | None = None
        self.metrics_skip: str | None = None
        self.result: dict[str, Any] = {}
        self.findings: list[str] = []
        self.notes: list[str] = []

    def deadline(self, prompt_tokens: int, max_tokens: int = 1) -> float:
        """Seconds a request of this size may take before it counts as a hang (``Settings.min_prefill_tps``)."""
        s = self.settings
        return s.request_timeout + prompt_tokens / s.min_prefill_tps + max_tokens / MIN_DECODE_TPS

    def snapshot(self) -> vllm_metrics.Snapshot | None:
        """A scrape of the metrics URL, or None (the reason is recorded once)."""
        if not self.client.metrics_url or self.metrics_skip:
            return None
        try:
            return vllm_metrics.Snapshot(self.client.metrics_text())
        except (httpx.HTTPError, ProbeError, ValueError) as exc:  # ValueError: not Prometheus text
            self.metrics_skip = f"{self.client.metrics_url} failed: {type(exc).__name__}: {exc}"[:300]
            self.progress(f"metrics: {self.metrics_skip}; metric-based parts skipped")
            return None

    def settled_snapshot(self) -> vllm_metrics.Snapshot | None:
        """A scrape taken after the metrics lag, so counters include the load just sent."""
        if self.settings.metrics_lag > 0 and self.client.metrics_url and not self.metrics_skip:
            self.progress(f"metrics: waiting {self.settings.metrics_lag:g} s for the scrape to catch up")
            self.client.budget.sleep(self.settings.metrics_lag)
        return self.snapshot()

    def metrics_reason(self) -> str:
        """Why a metric-based part is skipped."""
        return self.metrics_skip or "no --metrics-url: vLLM's /metrics is not reachable through the front"

    def tiny(self) -> Reply:
        """A 2-token request: is the engine answering at all?"""
        return self.client.chat(TINY_PROMPT, max_tokens=2, deadline=self.deadline(16, 2))

    def unique(self, tokens: int) -> tuple[str, int]:
        """Unique prompt text of about ``tokens`` tokens, and its estimated size."""
        assert self.tokens is not None
        chunks = self.tokens.chunks_for(tokens)
        return self.text.prompt(chunks), self.tokens.tokens_for(chunks)

    def recovery(self, out: dict[str, Any]) -> dict[str, Any]:
        """After a cut request: does a 2-token request get through again?"""
        reply = self.tiny()
        out["server_recovered"] = reply.ok
        if not reply.ok:
            self.findings.append(
                f"After a failed request was cut, a 2-token request still got {reply.outcome} "
                f"({reply.error}): the engine stayed blocked. Restart it and lower --max-model-len."
            )
        return {"recovered": reply.ok, "recovery_seconds": rounded(reply.seconds)}

    def ceiling(self) -> int | None:
        """The context search's ceiling in tokens, once it ran."""
        ctx = self.result.get("context") or {}
        return ctx.get("ceiling_tokens")
