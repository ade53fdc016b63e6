"""Tests of the vLLM-protocol simulator (images/vllm-sim)."""
