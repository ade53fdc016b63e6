"""Prefills that share one engine's rate (``VLLM_SIM_PREFILL_SHARED``): each of the n prefills in
progress advances at rate / n, as one engine's compute spread over the prompts it has in hand.

Without it every prefill runs at the full rate however many run at once (the simulator's default:
no engine-wide prefill budget), so sending the same prompt tokens again costs no one else
anything; with it, uncached tokens one request prefills slow every other request's first token,
which is what a prefix-affinity benchmark measures.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class SharedPrefill:
    """Processor sharing over a virtual clock: the work (tokens) every active prefill has done,
    advancing at ``rate / active`` tokens a second."""

    def __init__(self, rate: float):
        self.rate = rate
        self.lock = threading.Lock()
        self.done = 0.0  # tokens each active prefill has been given so far (virtual time)
        self.stamp = time.monotonic()
        self.active = 0

    def _advance(self) -> None:
        now = time.monotonic()
        if self.active:
            self.done += (now - self.stamp) * self.rate / self.active
        self.stamp = now

    def run(self, tokens: int, wait: Callable[[float], None]) -> None:
        """Until ``tokens`` are prefilled at this request's share; ``wait(seconds)`` sleeps (and
        raises if the request is aborted meanwhile)."""
        with self.lock:
            self._advance()
            self.active += 1
            target = self.done + tokens
        try:
            while True:
                with self.lock:
                    self._advance()
                    left, sharing = target - self.done, self.active
                if left <= 0:
                    return
                wait(min(left * sharing / self.rate, 0.05))
        finally:
            with self.lock:
                self._advance()
                self.active -= 1
