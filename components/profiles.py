"""Hardware profiles: the seeds' production deployments as data, in one registry.

Each ``Profile`` in ``PROFILES`` is everything the project knows about one hardware kind:

* ``facts`` — what the hardware and the pinned software *are* (HBM per card, how long the seed
  measured the weights load to take, the card it is for, the image's CUDA; ``components/hardware.py``). Stack files cannot change them;
  validation measures the configuration against them.
* ``defaults`` — the seed's production settings, in the same shape as the stack config (camelCase
  keys, one entry per ``glm:<key>``). A stack file's values are deep-merged over them, so a stack
  says only what differs for its environment (host, paths, ports, secrets).
* ``seed`` — what the seed article measured, for the capacity probe's measured/seed ratios.

Everything else is derived from ``PROFILES``: the values ``glm:hardware`` accepts
(``components/config/values.py``), its description in README and ``Pulumi.yaml``
(``scripts/config_table.py``, ``scripts/pulumi_yaml_config.py``), the capacity probe's seed table and
``--profile`` help (``capacity_probe/``), and the stacks the tests run under mocks (one committed
``Pulumi.<name>.yaml`` per profile). README "Adding a hardware profile" walks through it.

Sources are named next to each number (``../shared/SPEC.md`` §2 and ``../shared/seeds/``).
Past 400 lines on purpose: the registry is data, one ``register`` per hardware kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.hardware import GLM53_FLASH, AcceleratorModel, HardwareFacts

EIGHT_CARDS = [0, 1, 2, 3, 4, 5, 6, 7]


@dataclass(frozen=True)
class SeedFigure:
    """One figure a seed article measured, in the capacity probe's terms. A ratio above 1 is better for a
    "higher is better" figure (tok/s, tokens) and worse for a latency."""

    key: str
    """Where the measured value lives in probe-result.json: ``<section>.<field>``."""
    label: str
    value: float
    unit: str
    higher_is_better: bool
    note: str = ""


@dataclass(frozen=True)
class Seed:
    """The seed article a profile comes from and the figures it measured."""

    source: str
    """The article and the setup it measured, e.g. ``a800-sm80-production.txt (8×A800 80 GB, …)``."""
    figures: tuple[SeedFigure, ...]


@dataclass(frozen=True)
class Profile:
    """One hardware kind: its facts, the seed's production defaults and the seed's figures."""

    name: str
    """The value of ``glm:hardware``, and the name of the profile's committed stack file
    (``Pulumi.<name>.yaml``)."""
    facts: HardwareFacts
    defaults: Mapping[str, Any]
    """``glm:*`` values (camelCase, as in a stack file) that a stack file's values are merged over."""
    seed: Seed | None = None
    """What the seed measured; ``None`` where there is nothing to compare with (the simulator)."""


PROFILES: dict[str, Profile] = {}
"""Every hardware profile by name, in the order they are registered (the docs list them so)."""


def register(profile: Profile) -> Profile:
    """Add ``profile`` to ``PROFILES``; a name is registered once."""
    if profile.name in PROFILES:
        raise ValueError(f"hardware profile {profile.name!r} is already registered")
    PROFILES[profile.name] = profile
    return profile


def spoken_list(names: list[str]) -> str:
    """``a, b or c``, for messages and docs.

    >>> spoken_list(["a800", "ascend", "local"])
    'a800, ascend or local'
    """
    return " or ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else ""


# a800-sm80-production.txt: weights 39.8 GiB/card in ~36 s (warm); engine init 335.5 s.
register(
    Profile(
        name="a800",
        facts=HardwareFacts(
            accelerator="nvidia",
            hbm_gib=80.0,
            known_engine_start_seconds=36.0 + 335.5,
            known_weights_load_seconds=36.0,
            time_to_serve=(
                "~6.2 min (seed a800-sm80-production: weights ~36 s with a warm page cache, then engine "
                "init ~5.5 min (335.5 s) including the ~66 s CUDA-graph capture at max_num_seqs 32)"
            ),
            accelerator_model=AcceleratorModel(
                "A800", "8.0", "a800-sm80-production.txt: 8×A800 (sm_80); the image is patched for sm_80"
            ),
            # SPEC §7: the a800 stack's CUDA is 12.x (the base vllm/vllm-openai image; minor not pinned).
            image_cuda="12",
            served=GLM53_FLASH,
        ),
        defaults={
            "image": {
                # Dockerfile.glm53-sm80 in the seed: a base vLLM image plus ~10 patch files.
                "build": {
                    "context": "images/a800",
                    "dockerfile": "images/a800/Dockerfile",
                    "patchesDir": "images/a800/patches",
                    "baseImage": "vllm/vllm-openai:v0.33.0",
                    "repository": "glm53-flash-sm80",
                },
                "vllmVersion": "0.33.0",
            },
            "model": {
                "hostDir": "/data/models",
                "mountPath": "/models",
                "directory": "GLM-5.3-Flash",
                "servedName": "zai-org/GLM-5.3-Flash",
                "weightsGib": 306.0,
                "maxContextLength": 1048576,
                "download": {"source": "huggingface", "repo": "zai-org/GLM-5.3-Flash"},
            },
            "serving": {
                "port": 8000,
                "tensorParallelSize": 8,
                "enableExpertParallel": True,
                "numSpeculativeTokens": 5,
                "gpuMemoryUtilization": 0.95,
                "maxNumSeqs": 32,
                "maxModelLen": 1048576,
                "toolCallParser": "glm47",
                "reasoningParser": "glm45",
                "enableAutoToolChoice": True,
                "trustRemoteCode": True,
            },
            "container": {
                "name": "glm53-flash-a800-8008",
                "accelerators": EIGHT_CARDS,
            },
            "front": {"port": 8008},
            "smoke": {"chatTemplateKwargs": {"reasoning_effort": "low"}},
        },
        seed=Seed(
            "a800-sm80-production.txt (8×A800 80 GB, TP 8 + EP, MTP 5, GMU 0.95)",
            (
                SeedFigure("single_stream.decode_tok_s", "single-stream decode", 79.0, "tok/s", True),
                SeedFigure("kv_pool.tokens", "KV pool", 2_004_983, "tokens", True, "at GMU 0.95"),
            ),
        ),
    )
)

# ascend-910b3-six-rounds.txt: 64 GB HBM per 910B3; MTP accepted 12.2 % of drafts.
register(
    Profile(
        name="ascend",
        facts=HardwareFacts(
            accelerator="ascend",
            hbm_gib=64.0,
            known_engine_start_seconds=None,
            known_weights_load_seconds=None,
            time_to_serve=(
                "not timed in the seed (ascend-910b3-six-rounds: the first start loads the weights and "
                "compiles graphs and 'takes long'; the seed allows it an hour, VLLM_RPC_TIMEOUT 3600000 ms)"
            ),
            mtp_warning=(
                "the Ascend seed measured MTP accepting only 12.2 % of drafted tokens while its KV "
                "reservation cost ~3.4x of usable context (KV pool 8,956 tokens without it); "
                "the seed's production config runs without --speculative-config"
            ),
            accelerator_model=AcceleratorModel(
                "910B3", None, "ascend-910b3-six-rounds.txt: 8 × 昇腾 910B3（64GB HBM/卡）"
            ),
            served=GLM53_FLASH,
            # The seed's final config: a 2-token request answered in 1.59 s during a 120K prefill,
            # and 20.9 tokens/s single-stream (47.8 ms a token, at the A100 seed's 20 tokens/s bar):
            # the next bounds of vLLM's histograms up.
            ttft_slo_seconds=2.5,
            itl_slo_seconds=0.075,
        ),
        defaults={
            "image": {
                "reference": "quay.io/ascend/vllm-ascend:glm-5.3-flash",
                "vllmVersion": "0.23.0",
            },
            "model": {
                "hostDir": "/mnt/sdb",
                "mountPath": "/root/.cache",
                "directory": "GLM-5.3-Flash-w8a8",
                "servedName": "glm5.3-flash",
                # Not measured in the seed: w8a8 of the same ~320B MoE, taken as the a800 figure.
                "weightsGib": 306.0,
                "maxContextLength": 1048576,
                "download": {"source": "modelscope", "repo": "Eco-Tech/GLM-5.3-Flash-w8a8"},
            },
            "serving": {
                "host": "0.0.0.0",
                "port": 8077,
                "maxModelLen": 131072,
                "tensorParallelSize": 8,
                "enableExpertParallel": True,
                "seed": 1024,
                "safetensorsLoadStrategy": "prefetch",
                "maxNumSeqs": 16,
                "maxNumBatchedTokens": 8192,
                "trustRemoteCode": True,
                "toolCallParser": "glm47",
                "reasoningParser": "glm45",
                "enableAutoToolChoice": True,
                "quantization": "ascend",
                "limitMmPerPrompt": {"image": 1, "video": 0},
                # Images only inline (data: URLs): an image URL would make vLLM fetch it, from the
                # private network too (Prometheus, the replicas, a metadata address). `.invalid`
                # never resolves (RFC 6761); list trusted hosts here to allow their URLs.
                "allowedMediaDomains": ["no-remote-media.invalid"],
                "gpuMemoryUtilization": 0.95,
                "enablePrefixCaching": True,
                "asyncScheduling": True,
                "compilationConfig": {
                    "cudagraph_mode": "FULL_DECODE_ONLY",
                    "cudagraph_capture_sizes": [1, 2, 4, 8, 12, 16],
                },
                "additionalConfig": {
                    "ascend_compilation_config": {
                        "enable_npugraph_ex": True,
                        "enable_static_kernel": False,
                    },
                    "enable_cpu_binding": True,
                    "enable_flashcomm1": True,
                    "multistream_overlap_shared_expert": True,
                },
                "apiServerCount": 1,
                "env": {
                    "OMP_PROC_BIND": "false",
                    "OMP_NUM_THREADS": "128",
                    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
                    "LD_PRELOAD": "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
                    "HCCL_BUFFSIZE": "1024",
                    "HCCL_OP_EXPANSION_MODE": "AIV",
                    "VLLM_ASCEND_ENABLE_FLASHCOMM1": "1",
                    "TASK_QUEUE_ENABLE": "1",
                    "VLLM_RPC_TIMEOUT": "3600000",
                    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "3000",
                    "HCCL_EXEC_TIMEOUT": "3600",
                    "HCCL_CONNECT_TIMEOUT": "1200",
                },
            },
            "container": {
                "name": "vllm-ascend-glm5.3",
                "accelerators": EIGHT_CARDS,
                "shmSize": "500g",
                # The seed ran --privileged --net=host; the devices below suffice for one box.
                "privileged": False,
                "networkMode": "bridge",
                "devices": ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"],
                "mounts": [
                    {"source": "/usr/local/Ascend/driver", "target": "/usr/local/Ascend/driver"},
                    {"source": "/usr/local/Ascend/firmware", "target": "/usr/local/Ascend/firmware"},
                    {"source": "/usr/local/sbin/npu-smi", "target": "/usr/local/sbin/npu-smi"},
                    {"source": "/etc/hccn.conf", "target": "/etc/hccn.conf", "readOnly": True},
                ],
            },
            "front": {"port": 8077},
        },
        seed=Seed(
            "ascend-910b3-six-rounds.txt (8×Ascend 910B3, round 6 final config)",
            (
                SeedFigure(
                    "context.ceiling_tokens",
                    "cold unique-text context passing",
                    126_893,
                    "tokens",
                    True,
                    "the article's largest cold pass (no cliff up to 131,072), not a ceiling",
                ),
                SeedFigure(
                    "kv_pool.tokens",
                    "KV pool",
                    8_956,
                    "tokens",
                    True,
                    "the article's figure is below its own 126,893-token pass, so its unit differs: indicative only",
                ),
                SeedFigure("over_limit.seconds", "over-limit 400", 0.8, "s", False),
                SeedFigure(
                    "hol.small_seconds",
                    "2-token request during a large prefill",
                    1.59,
                    "s",
                    False,
                    "during a 120K-token prefill",
                ),
                SeedFigure("single_stream.decode_tok_s", "single-stream decode", 20.9, "tok/s", True),
                SeedFigure(
                    "spec_decode.acceptance",
                    "MTP draft acceptance",
                    0.122,
                    "",
                    True,
                    "round 5 (234 of 1,911 drafts); the final config has MTP off",
                ),
            ),
        ),
    )
)

# rtx5090-nvfp4-nightly.txt: weights load 632.8 s; start 11-12 min; 32 GB per card.
register(
    Profile(
        name="rtx5090",
        facts=HardwareFacts(
            accelerator="nvidia",
            hbm_gib=32.0,
            known_engine_start_seconds=720.0,
            known_weights_load_seconds=632.8,
            time_to_serve=(
                "11-12 min (seed rtx5090-nvfp4-nightly: the weights alone load in 632.8 s before the "
                "engine is ready)"
            ),
            accelerator_model=AcceleratorModel(
                "RTX 5090", "12.0", "rtx5090-nvfp4-nightly.txt: 8 × RTX 5090 32G, Blackwell (SM120)"
            ),
            image_cuda="13.0.2",  # the seed: nightly-385dce36b, CUDA 13.0.2
            served=GLM53_FLASH,
        ),
        defaults={
            "image": {
                "reference": "vllm/vllm-openai:nightly-385dce36b",
                "vllmVersion": "0.28.1rc1.dev580+g385dce36b",
            },
            "model": {
                "hostDir": "/home/glm/models",
                "mountPath": "/models",
                "directory": "GLM-5.3-Flash-NVFP4",
                "servedName": "glm-5.3-flash",
                # 185 GB on disk (NVFP4 experts, bf16 rest).
                "weightsGib": 172.3,
                "maxContextLength": 131072,
            },
            "serving": {
                "tensorParallelSize": 8,
                "kvCacheDtype": "fp8",
                "blockSize": 256,
                "maxModelLen": 131072,
                "maxNumSeqs": 4,
                "maxNumBatchedTokens": 512,
                "gpuMemoryUtilization": 0.82,
                "moeBackend": "flashinfer_cutlass",
                "enableFlashinferAutotune": False,
                "toolCallParser": "glm47",
                "enableAutoToolChoice": True,
                "reasoningParser": "glm45",
                "trustRemoteCode": True,
                "enforceEager": True,
                "env": {
                    "VLLM_GLM53_CUDA_SPARSE_MLA": "1",
                    "VLLM_GLM53_MOE_INPUT_SCALE": "1.0",
                    "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
                    "VLLM_USE_BREAKABLE_CUDAGRAPH": "1",
                    "NCCL_MIN_NCHANNELS": "32",
                    "NCCL_P2P_LEVEL": "PXB",
                },
            },
            "container": {
                "name": "glm53-flash",
                "accelerators": EIGHT_CARDS,
                "mounts": [{"source": "/home/glm/glm53_site", "target": "/site"}],
            },
            "front": {"port": 8000},
        },
        seed=Seed(
            "rtx5090-nvfp4-nightly.txt (8×RTX 5090, NVFP4, fp8 KV, GMU 0.82)",
            (SeedFigure("kv_pool.tokens", "KV pool", 149_796, "tokens", True),),
        ),
    )
)

# The vLLM-protocol simulator on the local Docker engine (images/vllm-sim): no accelerator.
register(
    Profile(
        name="local",
        facts=HardwareFacts(
            accelerator="none",
            hbm_gib=0.0,
            known_engine_start_seconds=None,
            known_weights_load_seconds=None,
            time_to_serve="a few seconds (the vLLM-protocol simulator)",
        ),
        defaults={
            "target": {"hosts": [{"name": "localhost", "dockerHost": "unix:///var/run/docker.sock"}]},
            "image": {
                "build": {
                    "context": "images/vllm-sim",
                    "dockerfile": "images/vllm-sim/Dockerfile",
                    "baseImage": "python:3.11-slim",
                    "repository": "glm53-vllm-sim",
                },
                "vllmVersion": "0.33.0",
            },
            "model": {
                "hostDir": "/var/lib/glm53-local/models",
                "mountPath": "/models",
                "directory": "GLM-5.3-Flash-sim",
                "servedName": "glm-5.3-flash",
                "weightsGib": 0.0,
                "maxContextLength": 131072,
            },
            "serving": {
                "tensorParallelSize": 1,
                "maxModelLen": 32768,
                "maxNumSeqs": 8,
                "gpuMemoryUtilization": 0.9,
                "toolCallParser": "glm47",
                "reasoningParser": "glm45",
                "enableAutoToolChoice": True,
                "enablePrefixCaching": True,
            },
            "container": {"name": "glm53-flash-local", "accelerators": []},
            "front": {"port": 8080, "bindAddress": "127.0.0.1"},
            # The gate reads the KV pool through Prometheus here: scrape soon after vLLM starts.
            "monitoring": {"scrapeInterval": "5s"},
            "preflight": {"minFreeDiskGib": 1, "minShmGib": 0},
            "smoke": {"deadlineSeconds": 300},
        },
    )
)
