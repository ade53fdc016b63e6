"""Post-deploy capacity and performance probe for a GLM-5.3-Flash (vLLM) stack.

The Ascend 910B3 article's capacity method, automated (docs/capacity-probe.md): read the KV pool from
``vllm:cache_config_info``, find the real context ceiling with unique text, time the over-limit 400,
look for head-of-line blocking, measure decode speed, a concurrency sweep and the prefix-cache
effect, then compare with the seed articles' figures.

Run it with ``python -m capacity_probe --stack <stack>`` or ``python -m capacity_probe --endpoint URL --api-key-env VAR``.
Modules, one concern each: :mod:`capacity_probe.cli` (flags, the run), :mod:`capacity_probe.pulumi_stack` (Pulumi look-ups),
:mod:`capacity_probe.client` (requests with deadlines, the load budget), :mod:`capacity_probe.vllm_metrics` (Prometheus
text), :mod:`capacity_probe.prompts` (unique text), :mod:`capacity_probe.measure` (the run, one module per measurement),
:mod:`capacity_probe.seeds` (the articles' figures), :mod:`capacity_probe.report` (JSON, Markdown, plots).
"""

PROBE_VERSION = "1"
