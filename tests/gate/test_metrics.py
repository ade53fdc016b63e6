"""Prometheus text through ``prometheus_client.parser`` (``components/gate/metrics.py``), as the gate
and the probe read it: vLLM's /metrics and a Prometheus /federate."""

from __future__ import annotations

import pytest

from components.gate.metrics import kv_pools, parse_samples, total

VLLM = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="567"} 1.0\n'
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
)
FEDERATED = (
    "# TYPE vllm:cache_config_info untyped\n"
    'vllm:cache_config_info{block_size="128",engine="1",instance="vllm:8000",job="vllm",'
    'num_gpu_blocks="70"} 1 1732896000000\n'
)


def test_kv_pools_from_vllm_and_from_a_federation() -> None:
    [pool] = kv_pools(parse_samples(VLLM))
    assert (pool["engine"], pool["num_gpu_blocks"], pool["block_size"], pool["tokens"]) == (
        "0",
        567,
        16,
        9072,
    )
    [federated] = kv_pools(parse_samples(FEDERATED))
    assert federated["tokens"] == 8960 and federated["instance"] == "vllm:8000"
    assert kv_pools(parse_samples("vllm:num_requests_running 0\n")) == []


def test_total_sums_matching_series_and_says_none_when_absent() -> None:
    samples = parse_samples(VLLM)
    assert total(samples, "vllm:num_requests_running") == 2.0
    assert total(samples, "vllm:num_requests_running", model_name="other") is None
    assert total(samples, "vllm:num_requests_waiting") is None


def test_text_that_is_not_prometheus_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_samples('{"version": "0.33.0"}')
