"""vLLM's Prometheus text, from its ``/metrics`` or a Prometheus ``/federate``, parsed by
``prometheus_client.parser`` (federation's ``job``/``instance`` labels and timestamps included).

The one parser the gate and the capacity probe (``capacity_probe/vllm_metrics.py``) share.
"""

from __future__ import annotations

from typing import Any, NamedTuple

KV_INFO = "vllm:cache_config_info"


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


def parse_samples(text: str) -> list[Sample]:
    """Every sample in Prometheus text; ``ValueError`` when ``text`` is not Prometheus text.

    >>> parse_samples('vllm:num_requests_running{engine="0",model_name="m"} 1.0 1732900000000')
    [Sample(name='vllm:num_requests_running', labels={'engine': '0', 'model_name': 'm'}, value=1.0)]
    """
    from prometheus_client.parser import text_string_to_metric_families

    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def kv_pools(samples: list[Sample]) -> list[dict[str, Any]]:
    """The KV pool of each engine from ``vllm:cache_config_info``: ``num_gpu_blocks * block_size``.

    >>> text = 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="567"} 1'
    >>> [pool["tokens"] for pool in kv_pools(parse_samples(text))]
    [9072]
    """
    pools = []
    for s in samples:
        if s.name != KV_INFO:
            continue
        try:
            blocks, block_size = int(s.labels["num_gpu_blocks"]), int(s.labels["block_size"])
        except (KeyError, ValueError):
            continue
        pools.append(
            {
                "engine": s.labels.get("engine", "0"),
                "instance": s.labels.get("instance"),
                "num_gpu_blocks": blocks,
                "block_size": block_size,
                "tokens": blocks * block_size,
                "labels": s.labels,
            }
        )
    return pools


def total(samples: list[Sample], name: str, **labels: str) -> float | None:
    """Sum of every series of ``name`` whose labels match; None when the metric is absent."""
    values = [
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return sum(values) if values else None
