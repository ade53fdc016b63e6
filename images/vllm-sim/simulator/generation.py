"""A request through the engine: one engine request per prompt and choice, run side by side.

vLLM runs each prompt of a ``/v1/completions`` list as an engine request of its own, and fans a
request with ``n > 1`` out into ``n`` child requests (0.25.0 ``completion/serving.py:162-217``,
``v1/engine/async_llm.py:381-398``). Each child prefills the prompt and counts it in
``vllm:prompt_tokens_total`` (its ``prefill_stats``, ``v1/request.py:177``,
``v1/core/sched/scheduler.py:777-783``, ``v1/metrics/stats.py:364-367``,
``v1/metrics/loggers.py:1157``), so the engine counts a prompt ``n`` times while ``usage`` counts
it once. The simulator does the same: each :class:`~simulator.replies.Sequence` runs in its own
thread through :meth:`Engine.execute`; what they generate comes back to the handler's thread,
the only one that writes to the client.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from simulator.engine import Aborted, SimRequest
from simulator.plan import Plan
from simulator.replies import Reply, Sequence
from simulator.request_fields import StreamShape
from simulator.server import Handler
from simulator.streaming import ChunkStream

_FINISHED = -1
_FAILED = -2


@dataclass
class Prompt:
    """One prompt of a request: its pieces, what to answer and how much it may generate."""

    pieces: list
    plan: Plan
    max_tokens: int | None
    cache_salt: str | None = None
    """vLLM's ``cache_salt`` request field: an extra key of the first block's hash."""


def sequences(prompts: list, n: int) -> list:
    """The engine requests of a reply: ``n`` per prompt, prompt by prompt."""
    seqs = []
    for p, prompt in enumerate(prompts):
        planned = len(prompt.plan.tokens) if prompt.max_tokens is None else prompt.max_tokens
        for c in range(n):
            req = SimRequest(
                request_id=uuid.uuid4().hex,
                prompt_pieces=prompt.pieces,
                plan=prompt.plan,
                reserve=len(prompt.pieces) + planned,
                cache_salt=prompt.cache_salt,
            )
            seqs.append(Sequence(req, p * n + c, c == 0))
    return seqs


def generate(http: Handler, prompts: list, n: int, chat: bool, shape: StreamShape) -> None:
    """Run the request's sequences and answer: chunk by chunk as their tokens come
    (``stream``), or in one body when all are done."""
    request_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    reply = Reply.of(http.server.cfg, request_id, sequences(prompts, n), chat)
    if shape.stream:
        stream = ChunkStream(http, reply, shape)
        # Headers go out at once (so access logs say 200 even if the engine never
        # schedules the request, as in the Ascend article); the body waits.
        stream.start()
        run_sequences(http, reply.seqs, stream.on_token, stream.finish_choice)
        stream.finish()
        return
    run_sequences(http, reply.seqs, lambda *_: None, lambda _: None)
    http.send_json(200, reply.chat_body() if chat else reply.completion_body())


def run_sequences(
    http: Handler,
    seqs: list,
    on_token: Callable[[Sequence, int, str, str], None],
    on_finish: Callable[[Sequence], None],
) -> None:
    """Each sequence through the engine in a thread of its own; ``on_token`` and ``on_finish``
    run on this (the handler's) thread. A client that leaves, or a callback that raises, aborts
    every sequence still running: the engine has counted the tokens generated until then, as
    vLLM's engine has when the frontend aborts (``v1/engine/output_processor.py:606-611``:
    what arrives after the abort is dropped, nothing is counted twice)."""
    engine = http.server.engine
    events: queue.Queue = queue.Queue()
    cancelled = threading.Event()

    def alive() -> bool:
        return not cancelled.is_set()

    def work(seq: Sequence) -> None:
        def emit(i: int, channel: str, piece: str) -> None:
            if cancelled.is_set():  # the engine's sleeps between tokens may be too short to look
                raise Aborted
            events.put((seq, i, channel, piece))

        try:
            engine.execute(seq.req, emit, alive)
            events.put((seq, _FINISHED, None, None))
        except BaseException as exc:  # handed to the handler's thread, which raises it
            events.put((seq, _FAILED, exc, None))

    threads = [threading.Thread(target=work, args=(seq,), daemon=True) for seq in seqs]
    for thread in threads:
        thread.start()
    running = len(seqs)
    try:
        while running:
            try:
                seq, i, channel, piece = events.get(timeout=0.1)
            except queue.Empty:
                if not http.alive():
                    raise Aborted from None
                continue
            if i == _FAILED:
                raise channel
            if i == _FINISHED:
                running -= 1
                on_finish(seq)
                continue
            seq.add(channel, piece)
            on_token(seq, i, channel, piece)
    finally:
        cancelled.set()
        for thread in threads:
            thread.join()
