"""The measurements, each a phase that fills one section of probe-result.json.

Order of a run: what the server says about itself (``/v1/models``, the KV pool), token calibration,
the cheap load (single stream, concurrency sweep, prefix cache), then the phases that may hang the
engine (over-limit request, context search, head-of-line blocking). Every phase keeps what it
measured when the budget runs out mid-way (``status: incomplete``).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from probe import PROBE_VERSION, metrics
from probe.client import BudgetExhausted, ProbeClient, ProbeError, Progress, Reply
from probe.prompts import TokenModel, UniqueText

PHASES = ("single_stream", "concurrency", "prefix_cache", "over_limit", "context", "hol")
"""Phases that send load, in run order (``--phases`` picks a subset)."""
NEEDS_TOKENS = ("prefix_cache", "over_limit", "context", "hol")
"""Phases that size prompts in tokens: they need the calibration first."""

FAST_400_SECONDS = 5.0
"""An over-limit request must be refused within this (the Ascend seed saw 0.8 s)."""
MIN_DECODE_TPS = 2.0
"""A request decoding slower than this counts as timed out (part of its deadline)."""
HOL_DEFAULT_MAX_TOKENS = 120_000
"""The Ascend seed timed its 2-token request during a 120K-token prefill."""
TINY_PROMPT = "Say hi."
CALIBRATION_CHUNKS = (7, 42)
"""Chunk counts of the two calibration prompts: 35 apart, whole cycles of the seven sentences."""
SHORT_CHUNKS = 4
"""Unique chunks in the prompt of a decode or sweep request (about a hundred tokens)."""


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


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p99 of fewer than 100 values is their maximum).

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 99)
    (2.0, 4.0)
    """
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


class Probe:
    """One run against one target."""

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

    # ---- helpers ---------------------------------------------------------------------------
    def deadline(self, prompt_tokens: int, max_tokens: int = 1) -> float:
        s = self.settings
        return s.request_timeout + prompt_tokens / s.min_prefill_tps + max_tokens / MIN_DECODE_TPS

    def snapshot(self) -> metrics.Snapshot | None:
        """A scrape of the metrics URL, or None (the reason is recorded once)."""
        if not self.client.metrics_url or self.metrics_skip:
            return None
        try:
            return metrics.Snapshot(self.client.metrics_text())
        except (httpx.HTTPError, ProbeError, ValueError) as exc:  # ValueError: not Prometheus text
            self.metrics_skip = f"{self.client.metrics_url} failed: {type(exc).__name__}: {exc}"[:300]
            self.progress(f"metrics: {self.metrics_skip}; metric-based parts skipped")
            return None

    def settled_snapshot(self) -> metrics.Snapshot | None:
        """A scrape taken after the metrics lag, so counters include the load just sent."""
        if self.settings.metrics_lag > 0 and self.client.metrics_url and not self.metrics_skip:
            self.progress(f"metrics: waiting {self.settings.metrics_lag:g} s for the scrape to catch up")
            self.client.budget.sleep(self.settings.metrics_lag)
        return self.snapshot()

    def metrics_reason(self) -> str:
        return self.metrics_skip or "no --metrics-url: vLLM's /metrics is not reachable through the front"

    def tiny(self) -> Reply:
        return self.client.chat(TINY_PROMPT, max_tokens=2, deadline=self.deadline(16, 2))

    def unique(self, tokens: int) -> tuple[str, int]:
        """Unique prompt text of about ``tokens`` tokens, and its estimated size."""
        assert self.tokens is not None
        chunks = self.tokens.chunks_for(tokens)
        return self.text.prompt(chunks), self.tokens.tokens_for(chunks)

    # ---- the run ---------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        started = datetime.now(UTC)
        self.result = {"probe_version": PROBE_VERSION, "started_at": started.isoformat(timespec="seconds")}
        self.server_info()
        spec_before = self.snapshot()
        for name in PHASES:
            if name in NEEDS_TOKENS and name in self.settings.phases and self.tokens is None:
                if "calibration" not in self.result:
                    self._phase("calibration", self.calibrate)
                if self.tokens is None:
                    reason = self.result["calibration"].get("reason", "")
                    self.result[name] = {"status": "skipped", "reason": f"no token calibration: {reason}"}
                    continue
            self._phase(name, getattr(self, name))
        self._phase("spec_decode", lambda out: self.spec_decode(out, spec_before))
        budget = self.client.budget
        self.result["budget"] = {
            "time_budget_s": budget.seconds,
            "max_requests": budget.max_requests,
            "requests_sent": budget.requests,
            "seconds_used": round(budget.elapsed(), 1),
            "exhausted": budget.exhausted,
        }
        if budget.exhausted:
            self.notes.append(
                f"The load budget ran out ({budget.exhausted}): the phases marked incomplete or skipped were "
                "cut short; raise --time-budget / --max-requests for a full probe."
            )
        self.result["target"]["is_simulator"] = self.client.saw_simulator
        if self.client.saw_simulator:
            self.notes.insert(
                0,
                "The answers carry the vLLM-protocol simulator's filler text: these figures come from "
                "a test double's knobs, not from a model or real hardware.",
            )
        self.result["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        self.result["findings"] = self.findings
        self.result["notes"] = self.notes
        return self.result

    def _phase(self, name: str, fn: Callable[[dict[str, Any]], None]) -> None:
        if name in PHASES and name not in self.settings.phases:
            self.result[name] = {"status": "skipped", "reason": "not selected (--phases)"}
            return
        out: dict[str, Any] = {"status": "measured"}
        self.result[name] = out
        try:
            fn(out)
        except BudgetExhausted as exc:
            out["status"] = "incomplete" if len(out) > 1 else "skipped"
            out["reason"] = f"load budget: {exc}"
            self.progress(f"{name}: stopped, {exc}")
        except ProbeError as exc:
            out["status"], out["reason"] = "failed", str(exc)
            self.progress(f"{name}: failed, {exc}")

    # ---- what the server says about itself -------------------------------------------------
    def server_info(self) -> None:
        models = self.client.models()
        entry = next((m for m in models if m.get("id") == self.model), models[0])
        if self.model and entry.get("id") != self.model:
            raise ProbeError(
                f"model {self.model!r} is not served; /v1/models lists {[m.get('id') for m in models]}"
            )
        self.model = self.client.model = entry["id"]
        self.max_model_len = int(entry.get("max_model_len") or 0)
        if self.max_model_len <= 0:
            raise ProbeError(f"/v1/models gives no max_model_len for {self.model}: {entry}")
        self.progress(f"model {self.model}, max_model_len {self.max_model_len:,}")
        t = self.target
        self.result["target"] = {
            "endpoint": t.endpoint,
            "stack": t.stack,
            "profile": t.profile,
            "label": t.label,
            "model": self.model,
            "max_model_len": self.max_model_len,
            "metrics_url": t.metrics_url,
            "sources": t.sources,
        }
        kv: dict[str, Any] = {}
        self.result["kv_pool"] = kv
        snap = self.snapshot()
        if snap is None:
            kv.update(status="skipped", reason=self.metrics_reason())
            return
        pools = snap.kv_pools()
        if not pools:
            kv.update(status="failed", reason=f"no {metrics.KV_INFO} with num_gpu_blocks/block_size")
            return
        smallest = min(pools, key=lambda p: p["tokens"])
        self.pool = smallest["tokens"]
        kv.update(status="measured", **{k: smallest[k] for k in ("num_gpu_blocks", "block_size", "tokens")})
        kv["engines"] = pools
        kv["prefix_caching"] = smallest.get("enable_prefix_caching")
        kv["pool_over_max_model_len"] = round(self.pool / self.max_model_len, 3)
        kv["scheduler_at_start"] = sched = snap.scheduler()
        kv["spec_decode_metrics"] = snap.has(metrics.SPEC_DRAFT_TOKENS)
        self.progress(
            f"KV pool {self.pool:,} tokens ({smallest['num_gpu_blocks']:,} blocks × {smallest['block_size']}), "
            f"{kv['pool_over_max_model_len']:.2f}× max_model_len"
        )
        if self.pool < self.max_model_len:
            self.findings.append(
                f"KV pool {self.pool:,} tokens < max_model_len {self.max_model_len:,}: a prompt above the "
                "pool is accepted (HTTP 200) and then waits forever for capacity, blocking the requests "
                "behind it (Ascend seed). Lower --max-num-batched-tokens, raise --gpu-memory-utilization, "
                "drop MTP, or lower --max-model-len to the pool."
            )
        if (sched.get("running") or 0) or (sched.get("waiting") or 0):
            self.notes.append(
                f"The scheduler was not idle at the start (running {sched['running']:g}, waiting "
                f"{sched['waiting']:g}): other traffic mixes with these figures."
            )
        if self.settings.max_num_seqs is None:
            found = snap.info_label("max_num_seqs")
            if found and found.isdigit():
                self.settings.max_num_seqs = int(found)
                self.settings.max_num_seqs_source = "a *_info metric's max_num_seqs label"

    # ---- calibration -------------------------------------------------------------------------
    def calibrate(self, out: dict[str, Any]) -> None:
        """Two unique prompts of different length: prompt tokens = base + per_chunk * chunks."""
        points = []
        for n in CALIBRATION_CHUNKS:
            reply = self.client.chat(self.text.prompt(n), max_tokens=16, deadline=self.deadline(4000, 16))
            if not reply.ok or not reply.prompt_tokens:
                raise ProbeError(
                    f"calibration request ({n} chunks) {reply.outcome} (HTTP {reply.status}): {reply.error}"
                    " - the server must answer a short prompt with usage.prompt_tokens"
                )
            points.append((n, reply.prompt_tokens))
        self.tokens = TokenModel.fit(points)
        out.update(
            points=points, base_tokens=round(self.tokens.base, 1), tokens_per_chunk=self.tokens.per_chunk
        )
        self.progress(f"calibration: {self.tokens.per_chunk:.1f} tokens per unique chunk")

    # ---- decode ------------------------------------------------------------------------------
    def single_stream(self, out: dict[str, Any]) -> None:
        s = self.settings
        out.update(max_tokens=s.decode_tokens, runs=[])
        for i in range(s.single_runs):
            reply = self.client.chat(
                self.text.prompt(SHORT_CHUNKS),
                max_tokens=s.decode_tokens,
                deadline=self.deadline(200, s.decode_tokens),
            )
            run = {
                "outcome": reply.outcome,
                "seconds": _r(reply.seconds),
                "ttft_s": _r(reply.ttft),
                "completion_tokens": reply.tokens_out,
                "decode_tok_s": _r(reply.decode_tok_s, 2),
                "error": reply.error or None,
            }
            out["runs"].append(run)
            self.progress(
                f"single stream {i + 1}/{s.single_runs}: {reply.outcome}, TTFT {run['ttft_s']} s, "
                f"{run['decode_tok_s']} tok/s"
            )
        good = [r for r in out["runs"] if r["outcome"] == "ok" and r["decode_tok_s"]]
        if not good:
            raise ProbeError(f"no single-stream request finished: {out['runs'][-1]['error']}")
        out["decode_tok_s"] = _r(statistics.median(r["decode_tok_s"] for r in good), 2)
        out["ttft_s"] = _r(statistics.median(r["ttft_s"] for r in good))

    def concurrency(self, out: dict[str, Any]) -> None:
        s = self.settings
        cap = s.max_num_seqs
        out["max_num_seqs"], out["max_num_seqs_source"] = cap, s.max_num_seqs_source or None
        if cap is None:
            cap = 8
            out["max_num_seqs_source"] = (
                "nowhere (no --max-num-seqs, stack command line or metric): swept to 8"
            )
        cap = max(1, min(cap, s.max_concurrency))
        levels = sorted({2**i for i in range(cap.bit_length()) if 2**i <= cap} | {cap})
        out.update(levels_planned=levels, max_tokens=s.sweep_tokens, rounds=s.sweep_rounds, levels=[])
        for c in levels:
            level, stopped = self._sweep_level(c)
            out["levels"].append(level)
            self.progress(
                f"concurrency {c}: {level['aggregate_tok_s']} tok/s, latency p50 {level['latency_p50_s']} s "
                f"p99 {level['latency_p99_s']} s, {level['failed']} failed"
            )
            if stopped:
                raise BudgetExhausted(stopped)
            if level["failed"]:
                self.findings.append(
                    f"{level['failed']} of {level['requests']} requests failed at concurrency {c} "
                    f"(first: {level['first_error']}); the sweep stopped there."
                )
                out["stopped_at"] = c
                break

    def _sweep_level(self, c: int) -> tuple[dict[str, Any], str | None]:
        s = self.settings
        stopped: list[str] = []

        def stream() -> list[Reply]:
            replies = []
            for _ in range(s.sweep_rounds):
                try:
                    replies.append(
                        self.client.chat(
                            self.text.prompt(SHORT_CHUNKS),
                            max_tokens=s.sweep_tokens,
                            deadline=self.deadline(200, s.sweep_tokens),
                        )
                    )
                except BudgetExhausted as exc:
                    stopped.append(str(exc))
                    break
            return replies

        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=c) as pool:
            replies = [r for f in [pool.submit(stream) for _ in range(c)] for r in f.result()]
        wall = time.monotonic() - start
        ok = [r for r in replies if r.ok]
        failed = [r for r in replies if not r.ok]
        lat = [r.seconds for r in ok]
        ttft = [r.ttft for r in ok if r.ttft is not None]
        per_stream = [t for r in ok if (t := r.decode_tok_s)]
        level = {
            "concurrency": c,
            "requests": len(replies),
            "failed": len(failed),
            "first_error": failed[0].error if failed else None,
            "wall_s": _r(wall),
            "aggregate_tok_s": _r(sum(r.tokens_out for r in ok) / wall if wall > 0 else None, 1),
            "latency_p50_s": _r(percentile(lat, 50)),
            "latency_p99_s": _r(percentile(lat, 99)),
            "ttft_p50_s": _r(percentile(ttft, 50)),
            "ttft_p99_s": _r(percentile(ttft, 99)),
            "per_stream_tok_s_p50": _r(percentile(per_stream, 50), 2),
        }
        return level, (stopped[0] if stopped else None)

    # ---- prefix cache ------------------------------------------------------------------------
    def prefix_cache(self, out: dict[str, Any]) -> None:
        """Cold vs warm TTFT of one long unique prefix sent three times with different questions."""
        base = min(x for x in (self._ceiling(), self.pool, self.max_model_len) if x)
        size = self.settings.prefix_tokens or min(8192, base // 2)
        prefix, est = self.unique(size)
        before = self.snapshot()
        ttfts = []
        for i, label in enumerate(("cold", "warm", "warm")):
            reply = self.client.chat(
                f"{prefix}\n{self.text.prompt(0)}", max_tokens=2, deadline=self.deadline(est, 2)
            )
            if not reply.ok or reply.ttft is None:
                raise ProbeError(f"prefix-cache request {i + 1} ({label}) {reply.outcome}: {reply.error}")
            ttfts.append(reply.ttft)
            self.progress(f"prefix cache: {label} TTFT {reply.ttft:.3f} s ({est:,}-token prefix)")
        cold, warm = ttfts[0], statistics.median(ttfts[1:])
        out.update(
            prefix_tokens=est,
            cold_ttft_s=_r(cold),
            warm_ttft_s=_r(warm),
            speedup=_r(cold / warm if warm > 0 else None, 2),
            effective=bool(warm > 0 and cold / warm >= 1.5),
        )
        after = self.settled_snapshot()
        if before is None or after is None:
            out["metrics"] = {"skipped": self.metrics_reason()}
            return
        hits = metrics.delta(before, after, metrics.PREFIX_HITS)
        queries = metrics.delta(before, after, metrics.PREFIX_QUERIES)
        out["metrics"] = {
            "hit_tokens": hits,
            "query_tokens": queries,
            "hit_rate": _r(hits / queries if hits is not None and queries else None),
        }

    # ---- the phases that may hang the engine --------------------------------------------------
    def over_limit(self, out: dict[str, Any]) -> None:
        """A prompt above max_model_len must come back as a fast 400, not hang."""
        assert self.tokens is not None
        text, est = self.unique(self.max_model_len + max(64, math.ceil(3 * self.tokens.per_chunk)))
        reply = self.client.chat(text, max_tokens=1, deadline=self.deadline(est))
        mentions = any(m in reply.error.lower() for m in ("maximum context length", "maximum model length"))
        fast = reply.status == 400 and reply.seconds <= FAST_400_SECONDS
        out.update(
            prompt_tokens_estimated=est,
            outcome=reply.outcome,
            http_status=reply.status,
            seconds=_r(reply.seconds),
            message=reply.error or None,
            mentions_max_context=mentions,
            fast_400=fast,
        )
        self.progress(
            f"over-limit ({est:,} tokens): {reply.outcome} HTTP {reply.status} in {reply.seconds:.2f} s"
        )
        if not fast:
            self.findings.append(
                f"A {est:,}-token prompt (over max_model_len {self.max_model_len:,}) got {reply.outcome} "
                f"(HTTP {reply.status}) after {reply.seconds:.1f} s instead of a 400 within "
                f"{FAST_400_SECONDS:g} s. A 413 means the front's body limit (glm:front.maxBodySize)."
            )
        if reply.status != 400:
            self._recovery(out)

    def context(self, out: dict[str, Any]) -> None:
        """Coarse ascending steps of unique text up to max_model_len, then bisection at the cliff."""
        assert self.tokens is not None
        s = self.settings
        slack = math.ceil(self.tokens.per_chunk) + 2
        top = self.max_model_len - slack  # the largest prompt the server must take with max_tokens 1
        resolution = max(s.context_resolution or max(256, self.max_model_len // 64), 2 * slack)
        steps = sorted({round(top * i / s.context_steps) for i in range(1, s.context_steps + 1)})
        out.update(resolution_tokens=resolution, top_tokens=top, attempts=[])
        lo = max(t for _, t in self.result["calibration"]["points"])
        hi = None
        for size in steps:
            if (tokens := self._context_attempt(size, out)) is None:
                hi = self.tokens.tokens_for(self.tokens.chunks_for(size))
                break
            lo = max(lo, tokens)
        while hi is not None and hi - lo > resolution and out.get("server_recovered", True):
            size = (lo + hi) // 2
            if (tokens := self._context_attempt(size, out)) is None:
                new_hi = self.tokens.tokens_for(self.tokens.chunks_for(size))
                if new_hi >= hi:
                    break  # a tokenizer off the calibration line: no smaller step is possible
                hi = new_hi
            elif tokens <= lo:
                break
            else:
                lo = tokens
        out["ceiling_tokens"] = lo
        out["cliff_tokens"] = hi
        out["bracket_tokens"] = None if hi is None else hi - lo
        out["no_cliff_up_to_max_model_len"] = hi is None
        if self.pool:
            out["ceiling_over_kv_pool"] = round(lo / self.pool, 3)
        if hi is None:
            self.progress(
                f"context: no cliff, {lo:,} tokens of unique text pass (max_model_len {self.max_model_len:,})"
            )
            return
        kinds = sorted({a["outcome"] for a in out["attempts"] if a["outcome"] != "ok"})
        self.progress(f"context: ceiling {lo:,} tokens, cliff at ≤ {hi:,} ({', '.join(kinds)})")
        self.findings.append(
            f"Context cliff: unique-text prompts pass up to {lo:,} tokens and fail ({', '.join(kinds)}) from "
            f"{hi:,}, below max_model_len {self.max_model_len:,}. Prompts in between are accepted and "
            "never answered; lower --max-model-len to the ceiling or grow the KV pool."
        )

    def _context_attempt(self, target: int, out: dict[str, Any]) -> int | None:
        """One unique prompt of about ``target`` tokens; its measured size if it passed, else None."""
        text, est = self.unique(target)
        deadline = self.deadline(est)
        reply, during = self._watch(lambda: self.client.chat(text, max_tokens=1, deadline=deadline), deadline)
        tokens = reply.prompt_tokens or est
        attempt: dict[str, Any] = {
            "target_tokens": target,
            "tokens": tokens,
            "measured": reply.prompt_tokens is not None,
            "outcome": reply.outcome,
            "seconds": _r(reply.seconds),
            "deadline_s": _r(reply.deadline, 1),
            "http_status": reply.status,
        }
        if during:
            attempt["scheduler_during"] = during
        if not reply.ok:
            attempt["error"] = reply.error
        out["attempts"].append(attempt)
        self.progress(
            f"context {tokens:,} tokens: {reply.outcome} in {reply.seconds:.2f} s"
            + (f" (deadline {reply.deadline:.1f} s)" if not reply.ok else "")
        )
        if reply.ok:
            return tokens
        attempt.update(self._recovery(out))
        return None

    def _watch(self, send: Callable[[], Reply], deadline: float) -> tuple[Reply, dict | None]:
        """Send in a thread; if it is still out after a moment, record the scheduler (hang diagnosis)."""
        with ThreadPoolExecutor(max_workers=1) as pool:
            future = pool.submit(send)
            try:
                return future.result(timeout=min(1.0, deadline / 2)), None
            except TimeoutError:
                snap = self.snapshot()
                return future.result(), (snap.scheduler() if snap else None)

    def _recovery(self, out: dict[str, Any]) -> dict[str, Any]:
        """After a cut request: does a 2-token request get through again?"""
        reply = self.tiny()
        out["server_recovered"] = reply.ok
        if not reply.ok:
            self.findings.append(
                f"After a failed request was cut, a 2-token request still got {reply.outcome} "
                f"({reply.error}): the engine stayed blocked. Restart it and lower --max-model-len."
            )
        return {"recovered": reply.ok, "recovery_seconds": _r(reply.seconds)}

    def hol(self, out: dict[str, Any]) -> None:
        """Latency of a 2-token request sent while a large prefill runs, against the idle latency."""
        s = self.settings
        base = self._ceiling() or min(x for x in (self.pool, self.max_model_len) if x)
        size = s.hol_prompt_tokens or min(int(0.9 * base), HOL_DEFAULT_MAX_TOKENS)
        idle = [self.tiny() for _ in range(2)]
        if not all(r.ok for r in idle):
            raise ProbeError(f"a 2-token request failed while idle: {idle[-1].error}")
        baseline = statistics.median(r.seconds for r in idle)
        text, est = self.unique(size)
        big_deadline = self.deadline(est)
        running = self._running()
        with ThreadPoolExecutor(max_workers=1) as pool:
            big_future = pool.submit(self.client.chat, text, max_tokens=1, deadline=big_deadline)
            out["start_detected_by"] = self._await_prefill(running, big_future)
            small = self.client.chat(TINY_PROMPT, max_tokens=2, deadline=big_deadline)
            big = big_future.result()
        out.update(
            large_prompt_tokens=big.prompt_tokens or est,
            large_outcome=big.outcome,
            large_ttft_s=_r(big.ttft),
            idle_small_seconds=_r(baseline),
            small_outcome=small.outcome,
            small_seconds=_r(small.seconds),
        )
        self.progress(
            f"head-of-line: 2-token request {small.outcome} in {small.seconds:.2f} s during a "
            f"{out['large_prompt_tokens']:,}-token prefill (idle {baseline:.2f} s)"
        )
        if not small.ok:
            out["blocked"] = True
        elif not big.ok or big.ttft is None:
            out["blocked"] = None
            out["reason"] = f"inconclusive: the large request {big.outcome} ({big.error})"
            return
        else:
            remaining = big.started + big.ttft - small.started
            out["prefill_remaining_at_send_s"] = _r(remaining)
            if remaining <= 0:
                out["blocked"] = None
                out["reason"] = (
                    "inconclusive: the prefill ended before the 2-token request went out; raise --hol-prompt-tokens"
                )
                return
            out["blocked_fraction"] = _r(small.seconds / remaining)
            # Blocked: the small request waited out most of the prefill instead of slipping in between chunks.
            out["blocked"] = small.seconds >= 0.5 * remaining and small.seconds > 2 * baseline
        if out["blocked"]:
            self.findings.append(
                f"Head-of-line blocking: a 2-token request took {small.seconds:.2f} s ({small.outcome}) while a "
                f"{out['large_prompt_tokens']:,}-token prefill ran (idle: {baseline:.2f} s). Enable chunked "
                "prefill / lower --max-num-batched-tokens (the Ascend seed went from 90 s to 1.59 s)."
            )

    def _running(self) -> float | None:
        snap = self.snapshot() if self.settings.metrics_lag == 0 else None
        return snap.total(metrics.RUNNING) if snap else None

    def _await_prefill(self, running_before: float | None, big_future: Any) -> str:
        """Wait until the large request is in the engine: a metric when live, else a fixed delay."""
        if running_before is not None:
            end = time.monotonic() + min(10.0, self.settings.request_timeout)
            while time.monotonic() < end and not big_future.done():
                snap = self.snapshot()
                if snap and (snap.total(metrics.RUNNING) or 0) > running_before:
                    return "vllm:num_requests_running"
                time.sleep(0.02)
        time.sleep(self.settings.hol_delay)
        return f"a fixed {self.settings.hol_delay:g} s delay"

    def _ceiling(self) -> int | None:
        ctx = self.result.get("context") or {}
        return ctx.get("ceiling_tokens")

    # ---- speculative decoding ----------------------------------------------------------------
    def spec_decode(self, out: dict[str, Any], before: metrics.Snapshot | None) -> None:
        """Draft acceptance over the whole run, from the spec-decode counters (MTP on)."""
        if before is None:
            out.update(status="skipped", reason=self.metrics_reason())
            return
        if not before.has(metrics.SPEC_DRAFT_TOKENS):
            out.update(
                status="skipped", reason="no vllm:spec_decode_* metrics: speculative decoding (MTP) is off"
            )
            return
        after = self.settled_snapshot()
        if after is None:
            out.update(status="skipped", reason=self.metrics_reason())
            return
        drafts = metrics.delta(before, after, metrics.SPEC_DRAFTS)
        draft_tokens = metrics.delta(before, after, metrics.SPEC_DRAFT_TOKENS)
        accepted = metrics.delta(before, after, metrics.SPEC_ACCEPTED)
        out.update(drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted)
        if not draft_tokens:
            out.update(status="incomplete", reason="no drafts during the run (metrics lag? --metrics-lag)")
            return
        out["acceptance"] = _r((accepted or 0) / draft_tokens)
        if drafts:
            out["mean_acceptance_length"] = _r(1 + (accepted or 0) / drafts, 2)
        self.progress(f"MTP: {out['acceptance']:.1%} of draft tokens accepted")
