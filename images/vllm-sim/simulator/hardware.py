"""The simulator's hardware profiles (``VLLM_SIM_PROFILE``): a prefill rate and a KV pool per
hardware kind of ``components/profiles.py``, each figure with its source.

A profile only sets defaults: ``VLLM_SIM_PREFILL_TOKENS_PER_S`` and ``VLLM_SIM_KV_POOL_TOKENS``
win over it. The figures make the simulator's time and capacity resemble the seeds'; they are no
prediction of the hardware (README "Not modelled").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SimHardware:
    prefill_tokens_per_s: float
    """Prompt tokens prefilled per second: time to first token = uncached tokens / this."""
    kv_pool_tokens: int | None
    """The KV pool in tokens; None: 4 x --max-model-len (the simulator's default)."""
    source: str


# The Ascend seed (ascend-910b3-six-rounds.txt, final config, --max-num-batched-tokens 8192): during a
# 120K-token prefill a 2-token request still answered in 1.59 s. With chunked prefill it joins
# the next step, so one step of up to 8,192 prompt tokens took at most ~1.59 s: at least 8,192 /
# 1.59 ≈ 5,150 tokens/s; 5,000 taken (the 1.59 s also holds the small request's own decode).
ASCEND_PREFILL_TOKENS_PER_S = 5000.0

HARDWARE: dict[str, SimHardware] = {
    "ascend": SimHardware(
        ASCEND_PREFILL_TOKENS_PER_S,
        # The seed's KV pool (8,956) is below its own 126,893-token cold pass, so its unit is not
        # tokens (SPEC §2; components/profiles.py marks it indicative): no pool from it.
        None,
        "ascend-910b3-six-rounds.txt: a 2-token request in 1.59 s during a 120K prefill, 8,192-token steps",
    ),
    "a800": SimHardware(
        # No prefill figure in a800-sm80-production.txt (its 79.0 tok/s is single-stream decode):
        # the Ascend figure is taken, stated, not measured (A800 and 910B3 are both ~310 dense
        # FP16/BF16 TFLOPS per card by their vendors' sheets).
        ASCEND_PREFILL_TOKENS_PER_S,
        2_004_983,  # a800-sm80-production.txt: "KV 池 2,004,983 tokens" at GMU 0.95
        "prefill: none in the seed, the Ascend figure taken; KV pool: a800-sm80-production.txt",
    ),
    "rtx5090": SimHardware(
        # No prefill figure in rtx5090-nvfp4-nightly.txt: the Ascend figure is taken, stated.
        ASCEND_PREFILL_TOKENS_PER_S,
        149_796,  # rtx5090-nvfp4-nightly.txt: "GPU KV cache size: 149,796 tokens"
        "prefill: none in the seed, the Ascend figure taken; KV pool: rtx5090-nvfp4-nightly.txt",
    ),
    # The simulator on its own (tests, the local stack): fast, so tests do not wait on it.
    "local": SimHardware(200_000.0, None, "the simulator's own default, no hardware"),
}
