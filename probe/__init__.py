"""Post-deploy capacity and performance probe for a GLM-5.3-Flash (vLLM) stack.

The Ascend 910B3 article's capacity method, automated (docs/probe.md): read the KV pool from
``vllm:cache_config_info``, find the real context ceiling with unique text, time the over-limit 400,
look for head-of-line blocking, measure decode speed, a concurrency sweep and the prefix-cache
effect, then compare with the seed articles' figures.

Run it with ``python -m probe --stack <stack>`` or ``python -m probe --endpoint URL --api-key-env VAR``.
Modules, one concern each: :mod:`probe.cli` (flags, the run), :mod:`probe.stack` (Pulumi look-ups),
:mod:`probe.client` (requests with deadlines, the load budget), :mod:`probe.metrics` (Prometheus
text), :mod:`probe.prompts` (unique text), :mod:`probe.measure` (the run, one module per measurement),
:mod:`probe.seeds` (the articles' figures), :mod:`probe.report` (JSON, Markdown, plots).
"""

PROBE_VERSION = "1"
