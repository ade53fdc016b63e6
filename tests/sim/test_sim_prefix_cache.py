"""The simulator's prefix cache against vLLM's own accounting (vLLM v1's automatic prefix caching:
``vllm/v1/core/kv_cache_utils.py`` ``hash_block_tokens``, ``kv_cache_manager.py``
``get_computed_blocks``, ``block_pool.py``), and ``usage.prompt_tokens_details.cached_tokens``
as vLLM's servers write it.

Expected values come from vLLM's rules, not from the simulator: a hit is the longest run of
leading full blocks already cached, searched up to ``prompt tokens - 1`` (so a multiple of the
block size), and the real vLLM 0.25.0 answered a repeated 84-token prompt with
``cached_tokens: 80`` (tests/fixtures/h200-meter-2026-12-05/h100/meter-exactness.json, the
``responses`` rows).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from simulator.config import UsageError, parse_config
from simulator.kv_blocks import BlockPool, block_hashes

from .conftest import MODEL, PLAIN_ARGS, Sim

CHAT = "/v1/chat/completions"
BLOCK = 16
# PLAIN_ARGS with the prefix cache on (vLLM v1's default) and the details vLLM reports with the flag.
CACHED_ARGS = [*PLAIN_ARGS[:-1], "--enable-prompt-tokens-details"]


def pieces(tag: str, n: int) -> list:
    return [f" {tag}{i}" for i in range(n)]


def run_once(pool: BlockPool, prompt: list, max_tokens: int = 1, salt: str | None = None) -> int:
    """One request through the pool as the engine runs it: admit, prefill ends, release."""
    hashes = block_hashes(prompt, pool.block_size, salt)
    assert pool.fits(hashes, len(prompt), len(prompt) + max_tokens)
    holding, cached = pool.admit(hashes, len(prompt), len(prompt) + max_tokens)
    pool.commit(holding, hashes)
    pool.release(holding)
    return cached


# --- the block pool, in process ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt_tokens", "cached"),
    [
        (84, 80),  # the real vLLM 0.25.0: a repeated 84-token prompt, cached_tokens 80
        (96, 80),  # a whole number of blocks: the last token is recomputed, so its block is too
        (97, 96),
        (16, 0),
        (17, 16),
    ],
)
def test_a_repeated_prompt_hits_its_full_blocks_up_to_the_last_token(prompt_tokens: int, cached: int) -> None:
    pool = BlockPool(num_blocks=64, block_size=BLOCK, caching=True)
    prompt = pieces("r", prompt_tokens)
    assert run_once(pool, prompt) == 0
    assert run_once(pool, prompt) == cached


def test_a_second_turn_hits_the_shared_prefix_in_whole_blocks() -> None:
    pool = BlockPool(num_blocks=64, block_size=BLOCK, caching=True)
    first = pieces("t", 200)
    second = first[:150] + pieces("u", 100)  # shares 150 tokens
    run_once(pool, first)
    assert run_once(pool, second) == 150 // BLOCK * BLOCK == 144


def test_block_hashes_chain_their_parents() -> None:
    """The same block of tokens after a different parent is a different block."""
    a = block_hashes(pieces("x", 32), BLOCK)
    b = block_hashes(pieces("y", 16) + pieces("x", 32)[16:], BLOCK)
    assert a[1] != b[1]
    assert block_hashes(pieces("x", 31), BLOCK) == a[:1]  # only full blocks are hashed
    assert block_hashes(pieces("x", 32), BLOCK, "salt")[0] != a[0]


def test_eviction_takes_the_queues_head_and_a_chain_loses_its_tail_first() -> None:
    """vLLM's free queue: block 0 is the null block; never-used blocks first, then a finished
    request's blocks in reverse (its unhashed last block, then its chain tail first)."""
    pool = BlockPool(num_blocks=10, block_size=BLOCK, caching=True)  # 9 usable
    a = pieces("a", 4 * BLOCK + 1)  # 5 blocks: 4 full (cached) and 1 partial
    run_once(pool, a)
    assert pool.cached_blocks == 4
    b = pieces("b", 6 * BLOCK + 1)  # 7 blocks: the 4 never used, a's partial, then 2 of a's chain
    run_once(pool, b)
    assert pool.evictions == 2
    assert run_once(pool, a) == 2 * BLOCK  # a's first two blocks are still there


def test_the_last_sampled_token_takes_no_block() -> None:
    """A 16-token prompt with max_tokens 1 computes 16 tokens' KV: one block, not two."""
    pool = BlockPool(num_blocks=2, block_size=BLOCK, caching=True)  # 1 usable
    prompt = pieces("k", BLOCK)
    assert pool.fits(block_hashes(prompt, BLOCK), BLOCK, BLOCK + 1)
    assert not pool.fits(block_hashes(prompt, BLOCK), BLOCK, BLOCK + 2)


def test_blocks_of_running_requests_are_never_evicted() -> None:
    pool = BlockPool(num_blocks=8, block_size=BLOCK, caching=True)  # 7 usable
    a = pieces("a", 4 * BLOCK + 1)
    hashes = block_hashes(a, BLOCK)
    holding, _ = pool.admit(hashes, len(a), len(a) + 1)
    pool.commit(holding, hashes)
    b = pieces("b", 3 * BLOCK)  # 3 blocks > the 2 free
    assert not pool.fits(block_hashes(b, BLOCK), len(b), len(b) + 1)
    pool.release(holding)
    assert pool.fits(block_hashes(b, BLOCK), len(b), len(b) + 1)


def test_without_prefix_caching_nothing_hits() -> None:
    pool = BlockPool(num_blocks=64, block_size=BLOCK, caching=False)
    prompt = pieces("n", 100)
    run_once(pool, prompt)
    assert run_once(pool, prompt) == 0


# --- the profiles -------------------------------------------------------------------------------


def test_a_profile_sets_the_prefill_rate_and_the_pool_and_explicit_knobs_win() -> None:
    argv = ["serve", "/m", "--max-model-len", "131072"]
    ascend = parse_config(argv, env={"VLLM_SIM_PROFILE": "ascend"})
    assert ascend.prefill_tokens_per_s == 5000.0  # 8,192-token steps within 1.59 s (the seed)
    assert ascend.pool_tokens == 4 * 131072
    rtx = parse_config(argv, env={"VLLM_SIM_PROFILE": "rtx5090"})
    assert rtx.pool_tokens == 149_796 // 16 * 16  # the seed's "GPU KV cache size: 149,796 tokens"
    mine = parse_config(
        argv,
        env={
            "VLLM_SIM_PROFILE": "ascend",
            "VLLM_SIM_PREFILL_TOKENS_PER_S": "123",
            "VLLM_SIM_KV_POOL_TOKENS": "640",
        },
    )
    assert (mine.prefill_tokens_per_s, mine.pool_tokens) == (123.0, 640)
    override = parse_config(
        [*argv, "--num-gpu-blocks-override", "160"], env={"VLLM_SIM_KV_POOL_TOKENS": "640"}
    )
    assert override.pool_tokens == 160 * 16  # vLLM's flag replaces the pool, as in vLLM
    with pytest.raises(UsageError, match="VLLM_SIM_PROFILE='h100'"):
        parse_config(argv, env={"VLLM_SIM_PROFILE": "h100"})


# --- over HTTP ----------------------------------------------------------------------------------


def unique(tag: str, words: int) -> str:
    return " ".join(f"{tag}{i % 1000}" for i in range(words))


def token_ids(s: Sim, messages: list) -> list:
    return s.http.post("/tokenize", json={"model": MODEL, "messages": messages}).json()["tokens"]


def shared(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def chat(s: Sim, messages: list, **extra: Any) -> dict:
    resp = s.http.post(CHAT, json={"model": MODEL, "messages": messages, "max_tokens": 4, **extra})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_a_conversations_second_turn_reports_its_cached_prefix(start_sim) -> None:
    s = start_sim(args=CACHED_ARGS)
    turn1 = [{"role": "user", "content": unique("c", 300)}]
    first = chat(s, turn1)
    assert first["usage"]["prompt_tokens_details"] is None  # a miss: vLLM leaves it null
    turn2 = [*turn1, first["choices"][0]["message"], {"role": "user", "content": "And then?"}]
    second = chat(s, turn2)
    common = shared(token_ids(s, turn1), token_ids(s, turn2))
    assert common > 250
    assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": common // BLOCK * BLOCK}
    # A different conversation finds nothing.
    other = chat(s, [{"role": "user", "content": unique("d", 300)}])
    assert other["usage"]["prompt_tokens_details"] is None
    # cache_salt keeps a prefix apart (vLLM: an extra key of the first block).
    salted = chat(s, turn1, cache_salt="tenant-b")
    assert salted["usage"]["prompt_tokens_details"] is None
    assert s.metric("vllm:prefix_cache_hits_total") == common // BLOCK * BLOCK


def test_the_streams_usage_chunk_carries_the_details(start_sim) -> None:
    s = start_sim(args=CACHED_ARGS)
    messages = [{"role": "user", "content": unique("s", 200)}]
    chat(s, messages)
    n = len(token_ids(s, messages))
    payload = {"model": MODEL, "messages": messages, "max_tokens": 3, "stream": True,
               "stream_options": {"include_usage": True}}  # fmt: skip
    with s.http.stream("POST", CHAT, json=payload) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    (usage,) = [e["usage"] for e in events if e.get("usage")]
    assert usage["prompt_tokens_details"] == {"cached_tokens": (n - 1) // BLOCK * BLOCK}


def test_without_the_flag_there_are_no_details(start_sim) -> None:
    """vLLM: ``enable_prompt_tokens_details`` off (its default) leaves the field null in a body and
    out of a stream's usage chunk (``exclude_none``), hit or not."""
    s = start_sim(args=[*PLAIN_ARGS[:-1]])
    messages = [{"role": "user", "content": unique("f", 200)}]
    chat(s, messages)
    assert chat(s, messages)["usage"]["prompt_tokens_details"] is None
    assert s.metric("vllm:prefix_cache_hits_total") > 0
    payload = {"model": MODEL, "messages": messages, "max_tokens": 3, "stream": True,
               "stream_options": {"include_usage": True}}  # fmt: skip
    with s.http.stream("POST", CHAT, json=payload) as r:
        usage = [json.loads(x[6:])["usage"] for x in r.iter_lines() if '"usage"' in x]
    assert "prompt_tokens_details" not in usage[-1]


def test_a_tiny_pool_evicts_the_oldest_conversation(start_sim) -> None:
    # 48 blocks of 16: three ~320-token prompts (20 blocks cached each) do not all stay.
    s = start_sim(args=CACHED_ARGS, env={"VLLM_SIM_KV_POOL_TOKENS": str(48 * BLOCK)})
    convs = [[{"role": "user", "content": unique(tag, 310)}] for tag in ("e", "g", "h")]
    for messages in convs:
        assert chat(s, messages, max_tokens=1)["usage"]["prompt_tokens_details"] is None
    newest = chat(s, convs[2], max_tokens=1)["usage"]["prompt_tokens_details"]
    assert newest == {"cached_tokens": (len(token_ids(s, convs[2])) - 1) // BLOCK * BLOCK}
    oldest = chat(s, convs[0], max_tokens=1)["usage"]["prompt_tokens_details"]
    assert oldest is None or oldest["cached_tokens"] < newest["cached_tokens"]


def test_time_to_first_token_falls_with_the_cached_tokens(start_sim) -> None:
    rate = 2500.0  # ~0.6 s alone: room for two threads' start and round trips on a loaded machine
    s = start_sim(
        args=CACHED_ARGS,
        env={"VLLM_SIM_PREFILL_TOKENS_PER_S": str(rate), "VLLM_SIM_DECODE_TOKEN_SECONDS": "0"},
    )
    turn1 = [{"role": "user", "content": unique("t", 2500)}]
    p1 = len(token_ids(s, turn1))
    start = time.monotonic()
    first = chat(s, turn1, max_tokens=1)
    cold = time.monotonic() - start
    turn2 = [*turn1, first["choices"][0]["message"], {"role": "user", "content": "Go on."}]
    start = time.monotonic()
    second = chat(s, turn2, max_tokens=1)
    warm = time.monotonic() - start
    uncached = second["usage"]["prompt_tokens"] - second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cold >= p1 / rate * 0.95  # the whole prompt at the prefill rate
    assert uncached < 40
    assert warm < cold / 4
    ttft = dict((lbl["le"], v) for lbl, v in s.metrics()["vllm:time_to_first_token_seconds_bucket"])
    assert ttft["0.06"] >= 1  # the warm turn's first token within 60 ms


@pytest.mark.parametrize("shared", [False, True], ids=["each-at-the-rate", "shared-rate"])
def test_shared_prefill_splits_the_rate_among_the_prefills_in_progress(start_sim, shared: bool) -> None:
    """VLLM_SIM_PREFILL_SHARED=1: two ~1,500-token prefills at once take about twice as long as one
    (one engine's compute); without it each runs at the whole rate."""
    rate = 2500.0  # ~0.6 s alone: room for two threads' start and round trips on a loaded machine
    env = {"VLLM_SIM_PREFILL_TOKENS_PER_S": str(rate), "VLLM_SIM_DECODE_TOKEN_SECONDS": "0",
           "VLLM_SIM_PREFILL_SHARED": "1" if shared else "0"}  # fmt: skip
    s = start_sim(args=CACHED_ARGS, env=env)
    prompts = [[{"role": "user", "content": unique(tag, 1500)}] for tag in ("x", "y")]
    alone = len(token_ids(s, prompts[0])) / rate
    elapsed: list[float] = []

    both_ready = threading.Barrier(2)

    def one(messages: list) -> None:
        both_ready.wait(5)
        start = time.monotonic()
        chat(s, messages, max_tokens=1)
        elapsed.append(time.monotonic() - start)

    threads = [threading.Thread(target=one, args=(m,)) for m in prompts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(elapsed) == 2
    if shared:
        assert min(elapsed) >= 1.8 * alone
    else:
        assert max(elapsed) < 1.5 * alone
