"""The engine: FCFS admission into a KV pool of blocks with vLLM's prefix cache (``kv_blocks``),
prefill of the uncached tokens and decode at modelled rates."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.config import Config
from simulator.kv_blocks import BlockPool, Holding, block_hashes
from simulator.metrics import Metrics
from simulator.plan import Plan
from simulator.prefill import SharedPrefill


class Aborted(Exception):
    """The client went away or the server is stopping."""


WAITING, RUNNING, DONE = "waiting", "running", "done"


@dataclass(eq=False)
class SimRequest:
    """One request in the engine: its prompt, what it will generate, and where it is."""

    request_id: str
    prompt_pieces: list
    plan: Plan
    reserve: int  # KV tokens held while running: prompt + (max_tokens or planned output)
    arrival: float = field(default_factory=time.monotonic)
    state: str = WAITING
    admitted_at: float = 0.0
    first_token_at: float = 0.0
    generated: int = 0
    cached_tokens: int = 0
    cache_salt: str | None = None
    hashes: list = field(default_factory=list)
    holding: Holding | None = None

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_pieces)


class Engine:
    """The scheduler and the model's time: requests wait for room (sequences and KV pool), then
    prefill at ``VLLM_SIM_PREFILL_TOKENS_PER_S`` and decode a token per ``VLLM_SIM_DECODE_TOKEN_SECONDS``."""

    def __init__(self, cfg: Config, stop: threading.Event):
        self.cfg = cfg
        self.stop = stop
        self.cond = threading.Condition()
        self.waiting: deque = deque()
        self.running: set = set()
        self.pool = BlockPool(cfg.num_gpu_blocks, cfg.block_size, cfg.prefix_caching)
        self.metrics = Metrics(cfg)
        self.hol = threading.Lock()
        self.shared_prefill = SharedPrefill(cfg.prefill_tokens_per_s)

    # ---- scheduler -------------------------------------------------------------------
    def _fits(self, req: SimRequest) -> bool:
        return self.pool.fits(req.hashes, req.prompt_tokens, req.reserve)

    def _schedule(self) -> None:
        """Admit from the head of the queue, in order (FCFS), while the head fits: its cached
        prefix is looked up now, as vLLM's scheduler does when it takes a waiting request."""
        while self.waiting:
            head = self.waiting[0]
            if len(self.running) >= self.cfg.max_num_seqs or not self._fits(head):
                break
            self.waiting.popleft()
            head.state = RUNNING
            head.admitted_at = time.monotonic()
            head.holding, head.cached_tokens = self.pool.admit(head.hashes, head.prompt_tokens, head.reserve)
            self.running.add(head)
        self.cond.notify_all()

    def waiting_reasons(self) -> dict:
        """capacity: the head of the queue does not fit in the free KV pool;
        deferred: everyone else (held by --max-num-seqs or queued behind the head)."""
        counts = {"capacity": 0, "deferred": 0}
        for i, req in enumerate(self.waiting):
            if i == 0 and not self._fits(req):
                counts["capacity"] += 1
            else:
                counts["deferred"] += 1
        return counts

    def snapshot(self) -> tuple:
        with self.cond:
            blocks = self.pool.usable
            usage = min(1.0, self.pool.used / blocks) if blocks else 0.0
            return len(self.running), len(self.waiting), self.waiting_reasons(), usage

    def render_metrics(self) -> str:
        running, waiting, reasons, usage = self.snapshot()
        with self.cond:
            return self.metrics.render(running, waiting, reasons, usage)

    def _wait_admitted(self, req: SimRequest, alive: Callable[[], bool]) -> None:
        req.hashes = block_hashes(req.prompt_pieces, self.cfg.block_size, req.cache_salt)
        with self.cond:
            self.waiting.append(req)
            self._schedule()
            while req.state == WAITING:
                if self.stop.is_set() or not alive():
                    self.waiting.remove(req)
                    self.metrics.success["abort"] += 1
                    self._schedule()
                    raise Aborted
                self.cond.wait(0.1)

    def _release(self, req: SimRequest, reason: str) -> None:
        with self.cond:
            if req.state == RUNNING:
                self.running.discard(req)
                if req.holding is not None:
                    self.pool.release(req.holding)
            req.state = DONE
            self.metrics.success[reason] = self.metrics.success.get(reason, 0) + 1
            self._schedule()

    # ---- timing helpers --------------------------------------------------------------
    def _sleep_until(self, deadline: float, alive: Callable[[], bool]) -> None:
        next_check = time.monotonic() + 0.1
        while True:
            now = time.monotonic()
            if now >= deadline:
                return
            if self.stop.wait(min(deadline - now, 0.05)):
                raise Aborted
            if time.monotonic() >= next_check:
                if not alive():
                    raise Aborted
                next_check = time.monotonic() + 0.1

    def _acquire_engine(self, alive: Callable[[], bool]) -> None:
        while not self.hol.acquire(timeout=0.1):
            if self.stop.is_set() or not alive():
                raise Aborted

    # ---- a request's life ------------------------------------------------------------
    def execute(
        self,
        req: SimRequest,
        on_token: Callable[[int, str, str], None],
        alive: Callable[[], bool],
        on_admitted: Callable[[], None] | None = None,
    ) -> None:
        """Queue, prefill, decode.  on_token(i, channel, piece) runs at each token's time."""
        self._wait_admitted(req, alive)
        reason = "abort"
        try:
            if on_admitted:
                on_admitted()
            self._prefill(req, alive)
            self._decode(req, on_token, alive)
            self._record_finish(req)
            reason = "length" if req.plan.finish_reason == "length" else "stop"
        finally:
            self._release(req, reason)

    def _prefill(self, req: SimRequest, alive: Callable[[], bool]) -> None:
        """The prompt's uncached tokens at the prefill rate (holding the engine with HOL blocking,
        sharing it with the other prefills with ``VLLM_SIM_PREFILL_SHARED``)."""
        cfg = self.cfg
        uncached = req.prompt_tokens - req.cached_tokens
        prefill_s = uncached / cfg.prefill_tokens_per_s
        if cfg.prefill_shared and not cfg.hol_blocking:
            self.shared_prefill.run(uncached, lambda s: self._sleep_until(time.monotonic() + s, alive))
        elif cfg.hol_blocking:
            self._acquire_engine(alive)
            try:
                self._sleep_until(time.monotonic() + prefill_s, alive)
            finally:
                self.hol.release()
        else:
            self._sleep_until(time.monotonic() + prefill_s, alive)
        now = time.monotonic()
        req.first_token_at = now
        with self.cond:
            if req.holding is not None:
                self.pool.commit(req.holding, req.hashes)
            m = self.metrics
            m.prompt_tokens += req.prompt_tokens
            m.prefix_queries += req.prompt_tokens if cfg.prefix_caching else 0
            m.prefix_hits += req.cached_tokens
            m.req_prompt.observe(req.prompt_tokens)
            m.queue.observe(req.admitted_at - req.arrival)
            m.prefill.observe(now - req.admitted_at)
            m.ttft.observe(now - req.arrival)

    def _decode(
        self, req: SimRequest, on_token: Callable[[int, str, str], None], alive: Callable[[], bool]
    ) -> None:
        """The plan's tokens, the first at once (it ends the prefill), then one per decode step."""
        cfg = self.cfg
        last = req.first_token_at
        for i, (channel, piece) in enumerate(req.plan.tokens):
            if i:
                self._sleep_until(last + cfg.decode_token_seconds, alive)
                if cfg.hol_blocking:  # a decode step waits for a prefill in progress
                    self._acquire_engine(alive)
                    self.hol.release()
                t = time.monotonic()
                with self.cond:
                    self.metrics.itl.observe(t - last)
                last = t
            with self.cond:
                self.metrics.generation_tokens += 1
            req.generated = i + 1
            on_token(i, channel, piece)

    def _record_finish(self, req: SimRequest) -> None:
        """A finished request's latencies, and the drafts MTP would have made for its tokens."""
        cfg = self.cfg
        end = time.monotonic()
        with self.cond:
            m = self.metrics
            m.e2e.observe(end - req.arrival)
            m.decode.observe(end - req.first_token_at)
            m.req_gen.observe(req.generated)
            k = cfg.spec_tokens
            if k and req.generated > 1:
                steps = max(1, math.ceil(req.generated / (1 + k * cfg.spec_acceptance)))
                m.spec_drafts += steps
                m.spec_draft_tokens += steps * k
                m.spec_accepted += min(round(steps * k * cfg.spec_acceptance), req.generated - 1)
