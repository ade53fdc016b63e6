"""VllmServer renders each profile's seed: argv, env, devices, mounts and the container's runtime
settings (Pulumi mocks, the committed stack files).

The expected values are written out from the seeds (../shared/SPEC.md §2), not derived from the
code under test. Flags are compared in ``--flag=value`` form: the seeds write ``--flag value``.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import CONTAINER, Deployment, run_program, serving_container

CACHE_ENV = [
    "HF_HOME=/var/cache/glm53/huggingface",
    "TILELANG_CACHE_DIR=/var/cache/glm53/tilelang",
    "TRITON_CACHE_DIR=/var/cache/glm53/triton",
    "VLLM_CACHE_ROOT=/var/cache/glm53/vllm",
]

SEED_ARGS = {
    # a800-sm80-production.txt (v8, production): TP 8 + EP + MTP x5, GMU 0.95, 32 seqs, 1M context.
    "a800": """
        --served-model-name zai-org/GLM-5.3-Flash --port 8000
        --tensor-parallel-size 8 --enable-expert-parallel
        --speculative-config {"method":"mtp","num_speculative_tokens":5}
        --gpu-memory-utilization 0.95 --max-num-seqs 32 --max-model-len 1048576
        --tool-call-parser glm47 --reasoning-parser glm45 --enable-auto-tool-choice
        --trust-remote-code
    """,
    # ascend-910b3-six-rounds.txt §4, the final script.
    "ascend": """
        --host 0.0.0.0 --port 8077 --max-model-len 131072 --tensor-parallel-size 8
        --enable-expert-parallel --seed 1024 --served-model-name glm5.3-flash
        --safetensors-load-strategy prefetch --max-num-seqs 16 --max-num-batched-tokens 8192
        --trust-remote-code --tool-call-parser glm47 --reasoning-parser glm45
        --enable-auto-tool-choice --quantization ascend --limit-mm-per-prompt {"image":1,"video":0}
        --gpu-memory-utilization 0.95 --enable-prefix-caching --async-scheduling
        --compilation-config {"cudagraph_mode":"FULL_DECODE_ONLY","cudagraph_capture_sizes":[1,2,4,8,12,16]}
        --additional-config {"ascend_compilation_config":{"enable_npugraph_ex":true,"enable_static_kernel":false},"enable_cpu_binding":true,"enable_flashcomm1":true,"multistream_overlap_shared_expert":true}
        --api-server-count 1
    """,
    # rtx5090-nvfp4-nightly.txt §3, restored from docker inspect.
    "rtx5090": """
        --served-model-name glm-5.3-flash --tensor-parallel-size 8 --kv-cache-dtype fp8
        --block-size 256 --max-model-len 131072 --max-num-seqs 4 --max-num-batched-tokens 512
        --gpu-memory-utilization 0.82 --moe-backend flashinfer_cutlass --no-enable-flashinfer-autotune
        --tool-call-parser glm47 --enable-auto-tool-choice --reasoning-parser glm45
        --trust-remote-code --enforce-eager --port 8000
    """,
}

# What the program adds to a seed's argv and env, and why.
HARDENING_ARGS = {
    # Image input: vLLM fetches image URLs, from the private network too (issue 26, item 8); only
    # inline images, through a name that never resolves (RFC 6761), and no redirects.
    "ascend": ["--allowed-media-domains", "no-remote-media.invalid"],
}
HARDENING_ENV = {"ascend": ["VLLM_MEDIA_URL_ALLOW_REDIRECTS=0"]}

SEED_MODEL_PATH = {
    "a800": "/models/GLM-5.3-Flash",
    "ascend": "/root/.cache/GLM-5.3-Flash-w8a8",
    "rtx5090": "/models/GLM-5.3-Flash-NVFP4",
}

# --gpus all (pulumi-docker 4.11 takes no other value, SPEC §6) plus the listed cards pinned.
NVIDIA_PINNING = [
    "CUDA_DEVICE_ORDER=PCI_BUS_ID",
    "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
    "NVIDIA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
]
SEED_ENV = {
    # The seed's GPUS 0..7 knob, pinned in the container.
    "a800": NVIDIA_PINNING,
    "ascend": [
        "OMP_PROC_BIND=false",
        "OMP_NUM_THREADS=128",
        "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True",
        "LD_PRELOAD=/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
        "HCCL_BUFFSIZE=1024",
        "HCCL_OP_EXPANSION_MODE=AIV",
        "VLLM_ASCEND_ENABLE_FLASHCOMM1=1",
        "TASK_QUEUE_ENABLE=1",
        "VLLM_RPC_TIMEOUT=3600000",
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=3000",
        "HCCL_EXEC_TIMEOUT=3600",
        "HCCL_CONNECT_TIMEOUT=1200",
        "ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
    ],
    "rtx5090": [
        "VLLM_GLM53_CUDA_SPARSE_MLA=1",
        "VLLM_GLM53_MOE_INPUT_SCALE=1.0",
        "VLLM_ENGINE_READY_TIMEOUT_S=3600",
        "VLLM_USE_BREAKABLE_CUDAGRAPH=1",
        "NCCL_MIN_NCHANNELS=32",
        "NCCL_P2P_LEVEL=PXB",
        *NVIDIA_PINNING,
    ],
}

SEED_DEVICES = {
    "a800": [],
    "ascend": [f"/dev/davinci{i}" for i in range(8)]
    + ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"],
    "rtx5090": [],
}

SEED_MOUNTS = {  # (source, target, read-only); the JIT cache volume is added to every stack
    "a800": [("/data/models", "/models", True)],
    "ascend": [
        ("/mnt/sdb", "/root/.cache", True),
        # Read-only: a root container running --trust-remote-code must not rewrite the host's driver.
        ("/usr/local/Ascend/driver", "/usr/local/Ascend/driver", True),
        ("/usr/local/Ascend/firmware", "/usr/local/Ascend/firmware", True),
        ("/usr/local/sbin/npu-smi", "/usr/local/sbin/npu-smi", True),
        ("/etc/hccn.conf", "/etc/hccn.conf", True),
    ],
    "rtx5090": [
        ("/home/x640/models", "/models", True),
        ("/home/x640/glm53_site", "/site", True),
    ],
}

SEED_CONTAINER = {  # name, shm in MB, ipc, privileged, gpus
    "a800": ("glm53-flash-a800-8008", 64 * 1024, None, False, "all"),
    # The seed's --shm-size=500g; --privileged/--net=host dropped (least privilege).
    "ascend": ("vllm-ascend-glm5.3", 500 * 1024, None, False, None),
    # The seed had no shm setting (64 MB default crashes TP 8): 64g is the better default.
    "rtx5090": ("glm53-flash", 64 * 1024, None, False, "all"),
}


def seed_flags(text: str) -> list[str]:
    """``--flag value`` pairs and bare switches → ``--flag=value`` elements, JSON compacted."""
    words = text.split()
    flags: list[str] = []
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None
        if value is None:
            flags.append(word)
        else:
            if value[0] in "[{":
                value = json.dumps(json.loads(value), separators=(",", ":"))
            flags.append(f"{word}={value}")
    return flags


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090"])
def test_argv_is_the_seeds(deployed: dict[str, Deployment], stack: str) -> None:
    inputs = serving_container(deployed[stack])
    assert inputs["entrypoints"] == ["vllm", "serve"]
    command = inputs["command"]
    assert command[0] == SEED_MODEL_PATH[stack]
    # Besides the hardening: vLLM's graceful stop (v0.18+), 5 s inside Docker's stop grace
    # (glm:container.stopGraceSeconds, 30): defence in depth behind the front's drain.
    # And the cached-token counts the meter reads (issue 50): off by default in vLLM.
    rendered = [
        *seed_flags(SEED_ARGS[stack]),
        *HARDENING_ARGS.get(stack, []),
        "--shutdown-timeout=25",
        "--enable-prompt-tokens-details",
    ]
    assert sorted(command[1:]) == sorted(rendered)
    assert len(set(command)) == len(command), "a flag is rendered twice"


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090"])
def test_env_is_the_seeds_plus_the_cache_dirs(deployed: dict[str, Deployment], stack: str) -> None:
    envs = serving_container(deployed[stack])["envs"]
    assert sorted(envs) == sorted(SEED_ENV[stack] + CACHE_ENV + HARDENING_ENV.get(stack, []))
    assert envs == sorted(envs), "env must render in a stable (sorted) order"


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090"])
def test_devices_and_mounts_are_the_seeds(deployed: dict[str, Deployment], stack: str) -> None:
    inputs = serving_container(deployed[stack])
    devices = [d["hostPath"] for d in inputs.get("devices") or []]
    assert devices == SEED_DEVICES[stack]
    assert all(d["containerPath"] == d["hostPath"] for d in inputs.get("devices") or [])
    binds = [
        (m["source"], m["target"], bool(m.get("readOnly"))) for m in inputs["mounts"] if m["type"] == "bind"
    ]
    assert binds == SEED_MOUNTS[stack]
    [cache] = [m for m in inputs["mounts"] if m["type"] == "volume"]
    assert cache["target"] == "/var/cache/glm53"


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090"])
def test_container_runtime_settings(deployed: dict[str, Deployment], stack: str) -> None:
    inputs = serving_container(deployed[stack])
    name, shm, ipc, privileged, gpus = SEED_CONTAINER[stack]
    assert inputs["name"] == name
    assert inputs["shmSize"] == shm
    assert inputs.get("ipcMode") == ipc
    assert inputs["privileged"] is privileged
    assert inputs.get("gpus") == gpus
    assert inputs["restart"] == "unless-stopped"
    assert inputs["logDriver"] == "json-file"
    assert inputs["logOpts"] == {"max-size": "100m", "max-file": "5"}
    assert not inputs.get("ports"), "vLLM must publish no port: the front owns the public port"
    assert inputs["networkMode"] == "bridge"
    [network] = inputs["networksAdvanced"]
    assert network["aliases"] == ["vllm"]
    # A fixed address: Nginx resolves its upstream once, so a replaced vLLM must keep it.
    subnet = deployed[stack].one("docker:index/network:Network").inputs["ipamConfigs"][0]["subnet"]
    assert subnet.startswith("172.30.") and subnet.endswith(".0/24")
    assert network["ipv4Address"] == subnet.replace(".0/24", ".10")
    assert deployed[stack].options[f"{stack}-serving-vllm"].delete_before_replace is True
    assert inputs["healthcheck"]["tests"][:2] == ["CMD", "python3"]
    # Go's duration spelling, as the provider reads it back (else every preview shows a change).
    assert inputs["healthcheck"]["startPeriod"] == "30m0s"
    assert inputs["healthcheck"]["interval"] == "30s"


def test_ascend_seed_privileges_are_one_line_away() -> None:
    deployment = run_program(
        "ascend",
        overrides={
            "glm:container": {"privileged": True, "networkMode": "host"},
            "glm:serving": {"host": "172.17.0.1"},
            "glm:front": {"port": 8078, "allowPlainHttp": True},
        },
    )
    inputs = serving_container(deployment)
    assert inputs["privileged"] is True
    assert inputs["networkMode"] == "host"
    assert not inputs.get("networksAdvanced")
    # The front and Prometheus reach vLLM on the host through the gateway.
    for suffix in ("-nginx", "-prometheus"):
        hosts = deployment.one(CONTAINER, suffix).inputs["hosts"]
        assert hosts == [{"host": "host.docker.internal", "ip": "host-gateway"}]


def test_extra_args_and_env_pass_through() -> None:
    deployment = run_program(
        "a800",
        overrides={
            "glm:serving": {
                "extraArgs": ["--sparse-mla-force-mqa"],
                "extraEnv": {"TZ": "Asia/Shanghai"},
            },
            # The patch set's own switch: not in vLLM 0.33.0's parser, declared as the image's.
            "glm:image": {"addedFlags": ["--sparse-mla-force-mqa"]},
        },
    )
    inputs = serving_container(deployment)
    assert inputs["command"][-1] == "--sparse-mla-force-mqa"
    assert "TZ=Asia/Shanghai" in inputs["envs"]


def test_nvidia_cards_outside_the_first_ones_are_pinned() -> None:
    """A 16-GPU box serving on cards 8-15: vLLM must not land on 0-7, which another service uses."""
    cards = list(range(8, 16))
    inputs = serving_container(run_program("a800", overrides={"glm:container": {"accelerators": cards}}))
    assert inputs["gpus"] == "all"
    envs = inputs["envs"]
    assert "CUDA_VISIBLE_DEVICES=8,9,10,11,12,13,14,15" in envs
    assert "NVIDIA_VISIBLE_DEVICES=8,9,10,11,12,13,14,15" in envs
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in envs  # CUDA's own order may differ from nvidia-smi's


def test_configured_mounts_are_read_only_unless_asked() -> None:
    mounts = [{"source": "/srv/a", "target": "/a"}, {"source": "/srv/b", "target": "/b", "readOnly": False}]
    inputs = serving_container(run_program("rtx5090", overrides={"glm:container": {"mounts": mounts}}))
    binds = {m["target"]: m.get("readOnly") for m in inputs["mounts"] if m["type"] == "bind"}
    assert binds["/a"] is True and not binds["/b"]


def test_the_private_network_is_deleted_before_it_is_replaced(deployed: dict[str, Deployment]) -> None:
    """A fixed name cannot exist twice (Docker >= 25 refuses; 20.10 makes lookups ambiguous)."""
    for stack in ("a800", "local"):
        assert deployed[stack].options[f"{stack}-serving-network"].delete_before_replace is True


def test_an_env_number_as_config_set_stores_it_reaches_the_container_as_its_text() -> None:
    """`pulumi config set --path glm:serving.extraEnv.NCCL_IB_TIMEOUT 22` writes the number 22 into
    the stack file (the CLI reads the value as YAML): the container gets the text the user typed."""
    serving = {"extraEnv": {"NCCL_IB_TIMEOUT": 22, "VLLM_SLEEP_WHEN_IDLE": 1, "NCCL_X_RATIO": 0.5}}
    envs = serving_container(run_program("a800", overrides={"glm:serving": serving}))["envs"]
    assert {"NCCL_IB_TIMEOUT=22", "VLLM_SLEEP_WHEN_IDLE=1", "NCCL_X_RATIO=0.5"} <= set(envs)
