"""The simulator takes each hardware profile's own argv (what a rehearsal runs) and honours the flags
a client can see; every other flag of the a800, ascend and rtx5090 command lines is tolerated.

Expected values are the seeds' (../shared/SPEC.md §2), not the renderer's.
"""

from __future__ import annotations

import pytest
from simulator.config import parse_config
from simulator.hardware import HARDWARE

from components.config import build_stack_config
from components.profiles import PROFILES
from components.serving.spec import render_argv, render_env
from tests.conftest import TEST_HOST_KEY

HOST = {"hosts": [{"name": "box", "dockerHost": "ssh://deploy@box", "hostKey": TEST_HOST_KEY}]}
# served name, max-model-len, max-num-seqs, port, block size, KV dtype, MTP tokens, vLLM version
SEEDS = {
    "a800": ("zai-org/GLM-5.3-Flash", 1048576, 32, 8000, 16, "auto", 5, "0.33.0"),
    "ascend": ("glm5.3-flash", 131072, 16, 8077, 16, "auto", 0, "0.23.0"),
    "rtx5090": ("glm-5.3-flash", 131072, 4, 8000, 256, "fp8", 0, "0.28.1rc1.dev580+g385dce36b"),
}


@pytest.mark.parametrize("hardware", list(SEEDS))
def test_the_simulator_honours_a_rehearsed_profiles_argv(hardware: str) -> None:
    config = build_stack_config(
        {"hardware": hardware, "target": HOST, "rehearsal": True, "front": {"allowPlainHttp": True}}
    )
    cfg = parse_config(["vllm", "serve", *render_argv(config)], env=render_env(config))
    name, max_len, seqs, port, block, dtype, mtp, version = SEEDS[hardware]
    assert cfg.served_names == [name]
    assert (cfg.max_model_len, cfg.max_num_seqs, cfg.port) == (max_len, seqs, port)
    assert (cfg.block_size, cfg.kv_cache_dtype, cfg.spec_tokens) == (block, dtype, mtp)
    assert (cfg.reasoning_parser, cfg.tool_call_parser, cfg.auto_tool_choice) == ("glm45", "glm47", True)
    assert cfg.version == version, "the simulator speaks the profile's vLLM version"
    # What is not modelled is tolerated and logged, never a start-up failure.
    assert "--tensor-parallel-size=8" in cfg.ignored
    assert cfg.pool_tokens >= max_len, "the gate's KV-pool step must pass on a rehearsal"
    # The hardware's prefill and KV pool (SPEC §2; the ascend KV figure is not in tokens).
    assert cfg.prefill_tokens_per_s == 5000.0
    pool = {"a800": 2_004_983, "ascend": 4 * max_len, "rtx5090": 149_796}[hardware]
    assert pool - block < cfg.pool_tokens <= pool
    assert cfg.prompt_tokens_details, "usage carries cached_tokens for the meter"


def test_every_hardware_profile_has_the_simulators_figures() -> None:
    """A rehearsal starts the simulator with VLLM_SIM_PROFILE=<hardware>: an unknown name exits 2."""
    assert set(PROFILES) <= set(HARDWARE)
