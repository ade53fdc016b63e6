"""vLLM's Prometheus text, read straight from ``/metrics`` or from a Prometheus ``/federate``.

Parsed by ``prometheus_client.parser`` through the gate's :func:`~components.gate.metrics.parse_samples`
(federation's ``job``/``instance`` labels and timestamps included). Counters are summed over every
series (engines, instances) of a name.
"""

from __future__ import annotations

from typing import Any

from components.gate import metrics as prom
from components.gate.metrics import KV_INFO as KV_INFO  # the probe reads it as metrics.KV_INFO
from components.gate.metrics import Sample

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
KV_USAGE = "vllm:kv_cache_usage_perc"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


def parse(text: str) -> list[Sample]:
    """Every sample in Prometheus text; ``ValueError`` when ``text`` is not Prometheus text.

    >>> parse('vllm:num_requests_running{engine="0",model_name="m"} 1.0 1732900000000')
    [Sample(name='vllm:num_requests_running', labels={'engine': '0', 'model_name': 'm'}, value=1.0)]
    """
    return prom.parse_samples(text)


class Snapshot:
    """One scrape of the metrics URL."""

    def __init__(self, text: str):
        self.samples = parse(text)

    def has(self, name: str) -> bool:
        return any(s.name == name for s in self.samples)

    def total(self, name: str, **labels: str) -> float | None:
        """Sum of every series of ``name`` whose labels match; None when the metric is absent."""
        return prom.total(self.samples, name, **labels)

    def kv_pools(self) -> list[dict[str, Any]]:
        """The KV pool of each engine: ``num_gpu_blocks * block_size`` from vllm:cache_config_info."""
        return [
            {
                **{k: v for k, v in pool.items() if k != "labels"},
                "enable_prefix_caching": pool["labels"].get("enable_prefix_caching"),
                "cache_dtype": pool["labels"].get("cache_dtype"),
                "gpu_memory_utilization": pool["labels"].get("gpu_memory_utilization"),
            }
            for pool in prom.kv_pools(self.samples)
        ]

    def info_label(self, label: str) -> str | None:
        """A label of any ``*_info`` metric (e.g. ``max_num_seqs`` where vLLM exports it)."""
        for s in self.samples:
            if s.name.endswith("_info") and label in s.labels:
                return s.labels[label]
        return None

    def scheduler(self) -> dict[str, float | None]:
        """Running, waiting, waiting for capacity, KV usage: the article's step 2 (idle = all 0)."""
        return {
            "running": self.total(RUNNING),
            "waiting": self.total(WAITING),
            "waiting_capacity": self.total(WAITING_BY_REASON, reason="capacity"),
            "kv_cache_usage": max((s.value for s in self.samples if s.name == KV_USAGE), default=None),
        }


def delta(before: Snapshot, after: Snapshot, name: str) -> float | None:
    """How much a counter grew between two scrapes; None when either lacks it."""
    a, b = before.total(name), after.total(name)
    return None if a is None or b is None else b - a
