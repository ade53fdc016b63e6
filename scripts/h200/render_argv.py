#!/usr/bin/env python3
"""The argv the project renders for a profile, fitted to one H200 and a tiny model, as JSON.

    .venv/bin/python scripts/h200/render_argv.py a800 > .h200/serve.json

Runs here, in the project's virtualenv, before anything goes to the GPU host: the profile's
own ``render_serving`` argv and env, then each flag that cannot apply to one card and a 2-layer
Qwen2 with random weights replaced or dropped, with the reason (``changed``), so the rehearsal
starts vLLM on the project's argv and says exactly how it differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from components.config import build_stack_config
from components.serving.spec import render_serving
from components.vllm_flags.render import FlagValue, flag_args

# A host the config needs to validate; nothing contacts it (the rehearsal runs vLLM by hand).
TARGET = {
    "hosts": [
        {
            "name": "h200",
            "dockerHost": "ssh://root@h200.invalid",
            "hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHnMCdx2tAklQakPlTKN7xOAsSF/GaYw9A6F9p6B/Z0C",
        }
    ]
}
MODEL = "/tmp/model"
# flag → (value or None to drop, why)
FIT = {
    "--tensor-parallel-size": (None, "one card, not 8"),
    "--enable-expert-parallel": (None, "a dense 2-layer Qwen2: no experts to spread"),
    "--speculative-config": (None, "MTP needs the checkpoint's MTP layers; the tiny Qwen2 has none"),
    "--reasoning-parser": (None, "glm45 looks for <think> tokens the 312-token test tokenizer lacks"),
    "--tool-call-parser": ("hermes", "glm47 looks for GLM's tool tokens; hermes ran on this model before"),
    "--max-model-len": (
        "2048",
        "the recipe's; the tiny config allows 4096, and the a800's 1,048,576 is past it",
    ),
    "--gpu-memory-utilization": ("0.30", "the recipe's; 0.95 of 143 GiB would size a 140-million-token pool"),
}
ADDED = [
    ("--load-format=dummy", "random weights: no checkpoint travels"),
    ("--host=127.0.0.1", "the gate asks it on the loopback"),
    (
        "--attention-backend=TRITON_ATTN",
        "vLLM's FlashAttention .so files (343 MB) do not travel; Triton is there",
    ),
]


def fitted(hardware: str) -> dict[str, object]:
    config = build_stack_config({"hardware": hardware, "target": TARGET, "front": {"allowPlainHttp": True}})
    spec = render_serving(config)
    flags: dict[str, FlagValue] = {}
    changed: list[dict[str, str | None]] = []
    for flag, value in spec.flags.items():
        if flag in FIT:
            new, why = FIT[flag]
            changed.append(
                {
                    "flag": " ".join(flag_args({flag: value})),
                    "now": f"{flag}={new}" if new else None,
                    "why": why,
                }
            )
            if new:
                flags[flag] = new
        else:
            flags[flag] = value
    argv = [MODEL, *flag_args(flags), *spec.extra_args]
    for token, why in ADDED:
        argv.append(token)
        changed.append({"flag": None, "now": token, "why": why})
    env = {k: v for k, v in spec.env.items() if not k.endswith(("_DIR", "_HOME", "_ROOT"))}
    env.update(CUDA_VISIBLE_DEVICES="0", NVIDIA_VISIBLE_DEVICES="0")
    return {
        "hardware": hardware,
        "rendered": spec.argv,
        "argv": argv,
        "env": env,
        "changed": changed,
        "served_name": spec.served_name,
        "max_num_seqs": int(str(flags["--max-num-seqs"])),
        "shutdown_timeout": int(str(flags["--shutdown-timeout"])),
        "port": spec.port,
        # What the profile knows of its start (the gate prints each milestone beside it).
        "known": {
            "known_weights_seconds": config.facts.known_weights_load_seconds,
            "known_start_seconds": config.facts.known_engine_start_seconds,
        },
    }


if __name__ == "__main__":
    json.dump(fitted(sys.argv[1] if len(sys.argv) > 1 else "a800"), sys.stdout, indent=1)
    print()
