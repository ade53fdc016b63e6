"""Prompt text that no prefix cache has seen, and how many tokens a given length of it makes.

The Ascend article measured 49.4K tokens "passing" with repeated paragraphs (72.5 % prefix-cache
hits) against ~13.4K with unique text: a capacity probe must send text no cache can reuse. Every
prompt here opens with the run's nonce and a fresh counter, and every chunk carries its own counter
(``[00000123]``, the article's method), so no two chunks of a run are equal.

The sentences hold no digits, operators or brackets besides the counters: the simulator answers
arithmetic it finds in a prompt, and a probe prompt must get the plain filler answer.
"""

from __future__ import annotations

import itertools
import math
import secrets
import threading
from dataclasses import dataclass

SENTENCES = (
    "The survey team logged river levels, stone walls and lantern posts along the northern road.",
    "A quiet harbour keeps its ledgers in oak cabinets beside the weighing house.",
    "Orchard keepers compare notes on frost, pruning and the habits of migrating starlings.",
    "The archive lists bridges, ferries and mountain passes by the season they open.",
    "Weavers trade patterns for indigo, madder and walnut dyes at the spring market.",
    "Engineers inspect the aqueduct arches after every storm and record each crack they find.",
    "Librarians sort travel journals by coastline, desert crossing and river delta.",
)


class UniqueText:
    """Unique filler: ``prompt(n)`` is n chunks of ``[counter] sentence`` after a unique opening."""

    def __init__(self, nonce: str | None = None):
        self.nonce = nonce or secrets.token_hex(4)
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def _next(self, n: int) -> list[int]:
        with self._lock:
            return [next(self._counter) for _ in range(n)]

    def chunks(self, n: int) -> str:
        return "".join(f"[{i:08d}] {SENTENCES[i % len(SENTENCES)]} " for i in self._next(n))

    def prompt(self, n_chunks: int, question: str = "Reply with the single word ok.") -> str:
        """A whole user message: the opening, ``n_chunks`` chunks, then ``question``."""
        (first,) = self._next(1)
        return f"Probe run {self.nonce}, text {first:08d}.\n{self.chunks(n_chunks)}\n{question}"


@dataclass
class TokenModel:
    """Prompt tokens of ``prompt(n)`` = base + per_chunk * n, fitted on two measured prompts."""

    base: float
    per_chunk: float
    source: str = "usage.prompt_tokens of two calibration requests"

    @classmethod
    def fit(cls, points: list[tuple[int, int]]) -> TokenModel:
        """From (chunks, prompt_tokens) pairs with different chunk counts."""
        (c1, t1), (c2, t2) = points[0], points[-1]
        per_chunk = (t2 - t1) / (c2 - c1)
        return cls(base=t1 - per_chunk * c1, per_chunk=per_chunk)

    def chunks_for(self, tokens: int) -> int:
        """The chunk count whose prompt comes closest to ``tokens`` without going over."""
        return max(0, math.floor((tokens - self.base) / self.per_chunk))

    def tokens_for(self, chunks: int) -> int:
        return round(self.base + self.per_chunk * chunks)
