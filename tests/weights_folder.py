"""A weights folder as a checkpoint on the hub lays it out: ``config.json``, the safetensors index and
shards in the safetensors format (8-byte little-endian header length, JSON header, data), sparse so a
306 GiB checkpoint costs no disk. The format is the safetensors spec's, not the weights check's.

    python3 tests/weights_folder.py DIR GIB [--shards N] [--cut-short]   # for a real host (device runs)
"""

from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

GLM53_CONFIG = {"architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next"}
"""config.json's identity as the rtx5090 seed quotes it."""


def write_weights(
    folder: Path,
    gib: float,
    shards: int = 2,
    missing: int = 0,
    cut_short: bool = False,
    config: dict[str, object] | None = None,
) -> Path:
    """``shards`` shards totalling ``gib`` GiB; the first ``missing`` left out; with ``cut_short`` the
    last one holds half the data its header declares (an interrupted copy)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(GLM53_CONFIG if config is None else config))
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    data = max(int(gib * 1024**3) // shards, 1)
    index = {
        "metadata": {"total_size": data * shards},
        "weight_map": {f"model.layers.{i}.weight": name for i, name in enumerate(names)},
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    for i, name in enumerate(names[missing:], start=missing):
        header = json.dumps(
            {f"model.layers.{i}.weight": {"dtype": "U8", "shape": [data], "data_offsets": [0, data]}}
        )
        path = folder / name
        path.write_bytes(struct.pack("<Q", len(header)) + header.encode())
        last = i == shards - 1
        with path.open("r+b") as shard:
            shard.truncate(8 + len(header) + (data // 2 if cut_short and last else data))
    return folder


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("gib", type=float)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--cut-short", action="store_true")
    args = parser.parse_args()
    write_weights(args.folder, args.gib, args.shards, cut_short=args.cut_short)
