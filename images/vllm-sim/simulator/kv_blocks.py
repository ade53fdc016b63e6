"""The KV pool in blocks, with vLLM v1's automatic prefix caching.

Modelled on vLLM's own accounting (read in ``vllm/v1/core/kv_cache_utils.py``,
``kv_cache_manager.py`` and ``block_pool.py``; no code taken):

* A prompt is cut into blocks of ``block_size`` tokens (``--block-size``, vLLM's default 16). Only
  full blocks get a hash. A block's hash chains its parent's hash and its own token ids
  (``hash_block_tokens``: ``(parent or NONE_HASH, token ids, extra keys)``; here the tokens'
  pieces, which the ids are a function of), so equal hashes mean
  equal prefixes. The first block's parent is a per-process random seed (vLLM's ``NONE_HASH``
  without ``PYTHONHASHSEED``); ``cache_salt``, an extra key of the first block only, keeps
  requests with different salts apart.
* A request's cached prefix is the longest run of its leading block hashes found in the cache,
  searched only up to ``prompt tokens - 1`` (``get_computed_blocks``: the last token is always
  computed, to get logits). So ``cached_tokens`` is a multiple of the block size:
  ``floor((P - 1) / block_size) * block_size`` for a prompt whose every block is cached.
* The pool has ``num_gpu_blocks`` blocks. Running requests hold theirs (shared blocks once, by
  reference count). A finished request's hashed blocks stay cached in the free queue, its last
  block first in line for eviction (``free`` appends them in reverse), and a block is evicted
  (least recently used first) only when a new allocation needs it. A cache hit takes its blocks
  out of the free queue.

What differs, on purpose: the simulator reserves a request's blocks for prompt + ``max_tokens``
at admission (vLLM allocates as it goes), caches a prompt's blocks when its prefill ends (vLLM when
the chunk is scheduled) and never caches the blocks of generated tokens (vLLM does, so a next turn
that repeats an answer verbatim hits a little further on vLLM).
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass, field

NONE_HASH = os.urandom(32)


def block_hashes(pieces: list, block_size: int, cache_salt: str | None = None) -> list:
    """The chained hashes of the prompt's full blocks (a partial last block has none)."""
    out: list = []
    parent = NONE_HASH
    for b in range(len(pieces) // block_size):
        h = hashlib.sha256(parent)
        for piece in pieces[b * block_size : (b + 1) * block_size]:
            data = piece.encode("utf-8")  # the piece, not its CRC id: ids may collide, pieces not
            h.update(len(data).to_bytes(4, "little") + data)
        if b == 0 and cache_salt:
            h.update(b"\x00salt\x00" + cache_salt.encode("utf-8"))
        parent = h.digest()
        out.append(parent)
    return out


@dataclass(eq=False)
class Holding:
    """The blocks one running request holds: shared cached ones (by hash) and plain ones."""

    hashed: list = field(default_factory=list)
    plain: int = 0


class BlockPool:
    """``num_blocks`` KV blocks of ``block_size`` tokens; cached blocks by hash, in use or free.

    Not thread-safe: the engine calls it under its own lock."""

    def __init__(self, num_blocks: int, block_size: int, caching: bool):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        self.in_use: dict = {}  # hash -> reference count (blocks running requests hold)
        self.evictable: OrderedDict = OrderedDict()  # hash -> None, least recently used first
        self.used = 0  # blocks held by running requests, shared ones once
        self.evictions = 0

    @property
    def free(self) -> int:
        """Free blocks, cached-but-evictable ones included (vLLM's ``get_num_free_blocks``)."""
        return self.num_blocks - self.used

    @property
    def cached_blocks(self) -> int:
        return len(self.in_use) + len(self.evictable)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def hit_blocks(self, hashes: list, prompt_tokens: int) -> int:
        """How many leading blocks are cached, up to ``prompt_tokens - 1`` tokens."""
        if not self.caching:
            return 0
        limit = max(0, prompt_tokens - 1) // self.block_size
        hits = 0
        for h in hashes[:limit]:
            if h not in self.in_use and h not in self.evictable:
                break
            hits += 1
        return hits

    def fits(self, hashes: list, prompt_tokens: int, reserve_tokens: int) -> bool:
        """Whether a request reserving ``reserve_tokens`` can be admitted now."""
        hits = hashes[: self.hit_blocks(hashes, prompt_tokens)]
        from_free = sum(1 for h in hits if h not in self.in_use)
        return self.blocks_for(reserve_tokens) - len(hits) + from_free <= self.free

    def admit(self, hashes: list, prompt_tokens: int, reserve_tokens: int) -> tuple[Holding, int]:
        """Take the cached prefix and new blocks for the rest; returns the holding and the number
        of cached tokens. The caller checked :meth:`fits`."""
        hits = hashes[: self.hit_blocks(hashes, prompt_tokens)]
        for h in hits:
            if h in self.in_use:
                self.in_use[h] += 1
            else:
                del self.evictable[h]
                self.in_use[h] = 1
                self.used += 1
        plain = self.blocks_for(reserve_tokens) - len(hits)
        self._take(plain)
        return Holding(list(hits), plain), len(hits) * self.block_size

    def _take(self, count: int) -> None:
        """``count`` new blocks: never-cached ones first, then the least recently used cached."""
        self.used += count
        while self.used + len(self.evictable) > self.num_blocks:
            self.evictable.popitem(last=False)
            self.evictions += 1

    def commit(self, holding: Holding, hashes: list) -> None:
        """The prefill ended: the prompt's computed full blocks become cached (a hash another
        request cached meanwhile stays a plain block of this one)."""
        if not self.caching:
            return
        for h in hashes[len(holding.hashed) :]:
            if holding.plain == 0:
                break
            if h in self.in_use or h in self.evictable:
                continue
            self.in_use[h] = 1
            holding.hashed.append(h)
            holding.plain -= 1

    def release(self, holding: Holding) -> None:
        """The request ended: plain blocks are free at once; cached ones join the free queue's
        tail, the last block of the chain first (so it is evicted before its parents)."""
        self.used -= holding.plain
        for h in reversed(holding.hashed):
            self.in_use[h] -= 1
            if self.in_use[h] == 0:
                del self.in_use[h]
                self.used -= 1
                self.evictable[h] = None
        holding.hashed, holding.plain = [], 0
