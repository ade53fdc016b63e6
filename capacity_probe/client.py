"""Requests to the front, each with its own deadline, inside one load budget for the whole run.

A request that gets no token before its deadline is a *hang*: it is cut (the connection closes, so
vLLM aborts it) and reported, never waited out. That is the Ascend article's failure mode: HTTP says
200 for a streaming request while the engine never schedules it (one such request sat 2,171 s).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from components.gate.sse import DONE, chunk_deltas, chunk_error, delta_text, sse_events

SIMULATOR_MARK = "vLLM protocol simulator"
"""The simulator's filler text says this: a probe that reads it is not measuring a model."""


class ProbeError(Exception):
    """The probe cannot go on (unreachable endpoint, bad key, no model): exit status 2."""


class BudgetExhausted(Exception):
    """The run's time budget or request cap is spent: the probe stops sending and reports."""


class Budget:
    """At most ``max_requests`` requests and ``seconds`` of wall time for the whole run."""

    def __init__(self, seconds: float, max_requests: int):
        self.seconds = seconds
        self.max_requests = max_requests
        self.start = time.monotonic()
        self.requests = 0
        self.exhausted: str | None = None
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self) -> float:
        return self.seconds - self.elapsed()

    def take(self, deadline: float) -> float:
        """Count one request; return its deadline, cut to what is left of the time budget."""
        with self._lock:
            if self.requests >= self.max_requests:
                self.exhausted = f"--max-requests {self.max_requests} reached"
            elif self.remaining() < 1.0:
                self.exhausted = f"--time-budget {self.seconds:g} s spent"
            if self.exhausted:
                raise BudgetExhausted(self.exhausted)
            self.requests += 1
            return min(deadline, self.remaining())

    def sleep(self, seconds: float) -> None:
        """Sleep, but never past the end of the time budget."""
        time.sleep(max(0.0, min(seconds, self.remaining() - 1.0)))


class Progress:
    """One line per event on stderr, stamped with the seconds since the start."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.start = time.monotonic()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[probe {time.monotonic() - self.start:7.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass
class Reply:
    """What one chat request came to. Times are seconds after the request was sent."""

    outcome: str
    """ok | hang (no token before the deadline) | timeout (tokens, but not done by the deadline) |
    rejected (4xx) | error (5xx, connection failure) | budget (cut by the run's time budget)."""
    seconds: float
    deadline: float
    started: float = 0.0
    """time.monotonic() when the request was sent."""
    status: int | None = None
    ttft: float | None = None
    last_token: float | None = None
    chunks: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    text: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def tokens_out(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else self.chunks

    @property
    def decode_tok_s(self) -> float | None:
        """Generated tokens after the first one, over the time they took (MTP-safe: uses usage)."""
        if self.ttft is None or self.last_token is None or self.tokens_out < 2:
            return None
        span = self.last_token - self.ttft
        return (self.tokens_out - 1) / span if span > 0 else None


def _error_message(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return " ".join(raw.decode(errors="replace").split())[:300]
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return str(err.get("message", err))[:300]
    return str(err or body)[:300]


class ProbeClient:
    """The OpenAI-compatible front (``.../v1``) and, optionally, vLLM's metrics."""

    def __init__(
        self,
        endpoint: str,
        api_key: str | None,
        budget: Budget,
        model: str | None = None,
        metrics_url: str | None = None,
    ):
        self.endpoint = endpoint.rstrip("/")
        self.model = model
        self.metrics_url = metrics_url
        self.budget = budget
        self.saw_simulator = False
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=160, max_keepalive_connections=64)
        self.http = httpx.Client(headers=headers, limits=limits)
        # No API key towards Prometheus or vLLM's private port: the key belongs to the front.
        self.metrics_http = httpx.Client()

    def close(self) -> None:
        self.http.close()
        self.metrics_http.close()

    def models(self) -> list[dict]:
        url = f"{self.endpoint}/models"
        try:
            resp = self.http.get(url, timeout=30.0)
        except httpx.HTTPError as exc:
            raise ProbeError(f"GET {url}: {type(exc).__name__}: {exc}") from None
        if resp.status_code != 200:
            hint = " (the API key: --api-key-env / glm:apiKeys)" if resp.status_code == 401 else ""
            raise ProbeError(f"GET {url} answered {resp.status_code}{hint}: {_error_message(resp.content)}")
        data = resp.json().get("data")
        if not isinstance(data, list) or not data:
            raise ProbeError(f"GET {url}: no models listed: {resp.text[:200]}")
        return data

    def metrics_text(self) -> str:
        """One scrape of the metrics URL; raises httpx.HTTPError or ProbeError."""
        assert self.metrics_url
        resp = self.metrics_http.get(self.metrics_url, timeout=15.0)
        if resp.status_code != 200:
            raise ProbeError(f"GET {self.metrics_url} answered {resp.status_code}")
        return resp.text

    def chat(self, prompt: str, *, max_tokens: int, deadline: float) -> Reply:
        """One streaming chat request, cut at ``deadline`` seconds (or the budget's end)."""
        allowed = self.budget.take(deadline)
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            # Benchmarks want exactly max_tokens tokens; vLLM honours ignore_eos as an extra field.
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        timeout = httpx.Timeout(connect=min(10.0, allowed), read=allowed, write=allowed, pool=allowed)
        reply = Reply(outcome="ok", seconds=0.0, deadline=allowed, started=time.monotonic())
        t0 = reply.started
        pieces: list[str] = []
        try:
            with self.http.stream(
                "POST", f"{self.endpoint}/chat/completions", json=body, timeout=timeout
            ) as resp:
                reply.status = resp.status_code
                if resp.status_code != 200:
                    raw = resp.read()
                    reply.error = _error_message(raw)
                    # 504 is the front giving up on an upstream that never answered: a hang.
                    reply.outcome = (
                        "hang"
                        if resp.status_code == 504
                        else "rejected"
                        if 400 <= resp.status_code < 500
                        else "error"
                    )
                else:
                    # A malformed chunk raises MalformedChunk, a ValueError: the reply is an error.
                    for chunk in sse_events(resp.iter_lines()):
                        now = time.monotonic() - t0
                        if chunk is DONE:
                            break
                        self._read_chunk(chunk, now, reply, pieces)
                        if reply.outcome != "ok":
                            break
                        if now > allowed:
                            reply.outcome = "timeout" if reply.chunks else "hang"
                            break
                    if reply.outcome == "ok" and reply.chunks == 0 and reply.completion_tokens is None:
                        reply.outcome, reply.error = "error", "the stream ended without a token"
        except httpx.TimeoutException:
            reply.outcome = "timeout" if reply.chunks else "hang"
        except (httpx.HTTPError, ValueError) as exc:
            reply.outcome, reply.error = "error", f"{type(exc).__name__}: {exc}"[:300]
        reply.seconds = time.monotonic() - t0
        if reply.outcome in ("hang", "timeout") and allowed < deadline:
            reply.outcome = "budget"
        if reply.outcome in ("hang", "timeout") and not reply.error:
            reply.error = f"{reply.outcome}: cut after {reply.seconds:.1f} s (deadline {allowed:.1f} s)"
        reply.text = "".join(pieces)
        if SIMULATOR_MARK in reply.text:
            self.saw_simulator = True
        if reply.outcome == "budget":
            raise BudgetExhausted(self.budget.exhausted or f"--time-budget {self.budget.seconds:g} s spent")
        return reply

    @staticmethod
    def _read_chunk(chunk: Any, now: float, reply: Reply, pieces: list[str]) -> None:
        if (error := chunk_error(chunk)) is not None:
            reply.outcome, reply.error = "error", error[:300]
            return
        deltas = chunk_deltas(chunk)  # a chunk that is not an object raises here
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            reply.prompt_tokens = usage.get("prompt_tokens", reply.prompt_tokens)
            reply.completion_tokens = usage.get("completion_tokens", reply.completion_tokens)
        for delta in deltas:
            piece = delta_text(delta) or ("<tool>" if delta.get("tool_calls") else "")
            if piece:
                if reply.ttft is None:
                    reply.ttft = now
                reply.last_token = now
                reply.chunks += 1
                pieces.append(piece)
