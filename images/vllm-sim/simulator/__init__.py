"""vllm-sim -- a vLLM-protocol simulator.

THIS IS A TEST DOUBLE, NOT A MODEL.  It loads no weights, runs no neural network and
knows nothing.  It speaks vLLM's OpenAI-compatible HTTP protocol (the 0.33.0 wire
format) closely enough that the local stack, the Nginx front, the smoke gate, the
Prometheus rules and the tests can run against it instead of a real 8-accelerator box:

* it is started with vLLM's own command line (``vllm_sim.py serve <model> --port ...``),
  understands the flags that change what a client can observe and ignores the rest;
* it refuses connections while "loading", like vLLM does while weights load;
* it computes simple arithmetic for real (``13*17`` -> ``221``, also with a ``x`` sign), answers tool calls built
  from the request's own JSON schema, and otherwise returns deterministic filler text;
* it models time and capacity: prefill rate, per-token decode latency, a prefix cache,
  ``--max-num-seqs``, a KV pool in tokens with FCFS admission (a request bigger than
  the pool waits forever, as in the Ascend 910B3 article) and optional head-of-line
  blocking;
* it exposes ``/metrics`` with vLLM's metric names, and can be told to misbehave in the
  ways the seeds saw (``VLLM_SIM_FAULT``).

Python standard library only: it runs in a minimal Debian image that has python3 and
nothing else.  See README.md beside this package for the CLI and every ``VLLM_SIM_*`` knob.

Modules, from the command line to the wire:

- :mod:`simulator.config` -- vLLM's argv and the ``VLLM_SIM_*`` environment as a ``Config``;
- :mod:`simulator.hardware` -- the hardware profiles' prefill rates and KV pools (``VLLM_SIM_PROFILE``);
- :mod:`simulator.strict_flags` -- the real parser's refusals (``VLLM_SIM_STRICT_FLAGS``);
- :mod:`simulator.startup` -- start-up milestones, start-up failures, the crash timer, the log;
- :mod:`simulator.tokenizer` -- pieces of text as tokens, the chat template;
- :mod:`simulator.arithmetic` -- the arithmetic in a prompt, evaluated without ``eval``;
- :mod:`simulator.tools` -- tool-call arguments from the request's JSON schema;
- :mod:`simulator.plan` -- what to answer: tokens on the reasoning, content and tool channels;
- :mod:`simulator.metrics` -- ``/metrics`` with vLLM's names;
- :mod:`simulator.kv_blocks` -- the KV pool in blocks with vLLM's prefix cache (chained block hashes, LRU);
- :mod:`simulator.prefill` -- prefills sharing one engine's rate (``VLLM_SIM_PREFILL_SHARED``);
- :mod:`simulator.engine` -- FCFS admission into the KV pool, prefill of the uncached tokens, decode;
- :mod:`simulator.server` -- the HTTP server and its request handler (reading, sending, dispatch);
- :mod:`simulator.errors` -- error replies in vLLM's shape;
- :mod:`simulator.routes` -- one function per endpoint;
- :mod:`simulator.replies` -- what a completion's reply says, whole or chunk by chunk;
- :mod:`simulator.streaming` -- the server-sent events of a streamed reply;
- :mod:`simulator.cli` -- ``main``: parse, start up, serve, stop.
"""
