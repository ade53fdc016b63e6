"""The KV pool in blocks, with vLLM v1's automatic prefix caching.

Modelled on vLLM's own accounting (read in ``vllm/v1/core/kv_cache_utils.py``,
``kv_cache_manager.py`` and ``block_pool.py``; no code taken):

* A prompt is cut into blocks of ``block_size`` tokens (``--block-size``, vLLM's default 16). Only
  full blocks get a hash. A block's hash chains its parent's hash and its own tokens
  (``hash_block_tokens``: ``(parent or NONE_HASH, token ids, extra keys)``; here the tokens'
  pieces, which the ids are a function of), so equal hashes mean equal prefixes. The first
  block's parent is a per-process random seed (vLLM's ``NONE_HASH`` without ``PYTHONHASHSEED``);
  ``cache_salt``, an extra key of the first block only, keeps requests with different salts apart.
* A request's cached prefix is the longest run of its leading block hashes found in the cache,
  searched only up to ``prompt tokens - 1`` (``get_computed_blocks``: the last token is always
  computed, to get logits). So ``cached_tokens`` is a multiple of the block size:
  ``floor((P - 1) / block_size) * block_size`` for a prompt whose every block is cached.
* The pool has ``num_gpu_blocks`` blocks, one of them vLLM's null block (never used). Free blocks
  wait in one queue, in eviction order: at first by block id; a finished request's cached blocks
  join its tail in reverse (its last block first in line, so a chain loses its tail before its
  head), its blocks with no hash its head; a new allocation takes the queue's head, evicting the
  hash of a cached block it takes. A cache hit takes its blocks out of the queue (``touch``);
  blocks of running requests are shared by reference count and never evicted. A block computed
  again while an equal one is cached is cached too (vLLM does not de-duplicate); a lookup takes
  the first.
* A request holds blocks for every token whose KV it computes: the prompt and all but the last of
  its ``max_tokens`` (the last token sampled is never fed back).

What differs, on purpose: the simulator takes a request's blocks for prompt + ``max_tokens`` at
admission (vLLM allocates as it goes, and may preempt), caches a prompt's blocks when its prefill
ends (vLLM when the chunk is scheduled) and never caches the blocks of generated tokens (vLLM does,
so a next turn that repeats an answer verbatim hits a little further on vLLM).
"""

from __future__ import annotations

import hashlib
import json
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
        # The pieces themselves, not their CRC ids (ids may collide, pieces not), as one JSON list.
        h.update(json.dumps(pieces[b * block_size : (b + 1) * block_size]).encode("utf-8"))
        if b == 0 and cache_salt:
            h.update(b"\x00salt\x00" + cache_salt.encode("utf-8"))
        parent = h.digest()
        out.append(parent)
    return out


@dataclass(eq=False)
class Holding:
    """The blocks one running request holds, by id in the order of its tokens, and how many of the
    first are its cached prefix."""

    blocks: list = field(default_factory=list)
    hits: int = 0


class BlockPool:
    """``num_blocks`` KV blocks of ``block_size`` tokens, as vLLM's ``BlockPool``: a free queue in
    eviction order, the cached blocks by hash. Not thread-safe: the engine calls it under its lock."""

    def __init__(self, num_blocks: int, block_size: int, caching: bool):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        # Block 0 is vLLM's null block: never allocated, never free.
        self.queue: OrderedDict = OrderedDict((i, None) for i in range(1, num_blocks))
        self.ref: dict = {}  # block id -> requests holding it (absent: 0)
        self.hash_of: dict = {}  # block id -> its hash, while cached
        self.cached: dict = {}  # hash -> {block id: None}, the first the one a lookup takes
        self.evictions = 0

    @property
    def usable(self) -> int:
        return max(0, self.num_blocks - 1)

    @property
    def free(self) -> int:
        """Free blocks, cached-but-evictable ones included (vLLM's ``get_num_free_blocks``)."""
        return len(self.queue)

    @property
    def used(self) -> int:
        return self.usable - len(self.queue)

    @property
    def cached_blocks(self) -> int:
        return len(self.hash_of)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def _hits(self, hashes: list, prompt_tokens: int) -> list:
        """The block ids of the longest cached prefix, up to ``prompt_tokens - 1`` tokens."""
        if not self.caching:
            return []
        found = []
        for h in hashes[: max(0, prompt_tokens - 1) // self.block_size]:
            ids = self.cached.get(h)
            if not ids:
                break
            found.append(next(iter(ids)))
        return found

    def _needed(self, hits: list, reserve_tokens: int) -> int:
        """New blocks to take, and the hit blocks that leave the free queue, together."""
        kv_tokens = max(1, reserve_tokens - 1)  # the last token sampled is never computed
        return self.blocks_for(kv_tokens) - len(hits) + sum(1 for b in hits if b in self.queue)

    def fits(self, hashes: list, prompt_tokens: int, reserve_tokens: int) -> bool:
        """Whether a request of ``prompt_tokens`` that may reach ``reserve_tokens`` fits now."""
        return self._needed(self._hits(hashes, prompt_tokens), reserve_tokens) <= self.free

    def admit(self, hashes: list, prompt_tokens: int, reserve_tokens: int) -> tuple[Holding, int]:
        """Take the cached prefix and new blocks for the rest; returns the holding and the number
        of cached tokens. The caller checked :meth:`fits`."""
        hits = self._hits(hashes, prompt_tokens)
        for block in hits:  # vLLM's touch
            self.queue.pop(block, None)
            self.ref[block] = self.ref.get(block, 0) + 1
        fresh = self.blocks_for(max(1, reserve_tokens - 1)) - len(hits)
        taken = []
        for _ in range(fresh):
            block, _ = self.queue.popitem(last=False)
            if block in self.hash_of:  # the head was cached: evicted
                self._uncache(block)
                self.evictions += 1
            self.ref[block] = 1
            taken.append(block)
        return Holding(hits + taken, len(hits)), len(hits) * self.block_size

    def _uncache(self, block: int) -> None:
        h = self.hash_of.pop(block)
        ids = self.cached[h]
        del ids[block]
        if not ids:
            del self.cached[h]

    def commit(self, holding: Holding, hashes: list) -> None:
        """The prefill ended: the prompt's computed full blocks are cached."""
        if not self.caching:
            return
        for index in range(holding.hits, min(len(hashes), len(holding.blocks))):
            block, h = holding.blocks[index], hashes[index]
            if block not in self.hash_of:
                self.hash_of[block] = h
                self.cached.setdefault(h, {})[block] = None

    def release(self, holding: Holding) -> None:
        """The request ended: each block it was the last to hold is free again. A cached one joins
        the queue's tail (its last block first), to be evicted last; one with no hash goes to the
        head, to be taken first (vLLM's ``free_blocks``: ``prepend_n`` / ``append_n``)."""
        plain = []
        for block in reversed(holding.blocks):
            self.ref[block] -= 1
            if self.ref[block] == 0:
                del self.ref[block]
                self.queue[block] = None
                if block not in self.hash_of:
                    plain.append(block)
        for block in reversed(plain):
            self.queue.move_to_end(block, last=False)
        holding.blocks, holding.hits = [], 0
