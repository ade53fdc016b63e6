"""The weights check, run on the target host by ``python3 - DIR WEIGHTS_GIB [MODEL_TYPE ARCHITECTURE]``
(the preflight and the download step send this file's text; standard library only).

It prints ``weights check: …`` lines: one per problem (exit 1), or one saying the folder is complete.
With a weights size (``glm:model.weightsGib`` > 0) it also reads each shard's safetensors header
(8-byte little-endian length, then JSON whose ``data_offsets`` say how long the data is) to find
shards cut short by an interrupted copy, and sums the shards against that size; with a model type it
checks ``config.json``'s ``model_type`` and ``architectures``.
"""

from __future__ import annotations

import json
import os
import struct
import sys

INDEX = "model.safetensors.index.json"
SIZE_TOLERANCE = 0.10
"""How far the shards' total may be from ``glm:model.weightsGib``: the seeds give sizes to 2-3
digits (306 GiB, 185 GB); a half-copied folder is far outside this."""
GIB = 1024**3


def shard_problem(path: str) -> str | None:
    """Why the shard at ``path`` is unusable, or ``None``: its header must be readable and the file
    as long as the header says."""
    size = os.path.getsize(path)
    with open(path, "rb") as shard:
        head = shard.read(8)
        if len(head) < 8:
            return f"{path} is {size} bytes, shorter than a safetensors header"
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            return f"{path} is {size} bytes, its header alone says {length + 8}: the copy was cut short"
        try:
            header = json.loads(shard.read(length))
        except ValueError:
            return f"{path}: the safetensors header is not JSON (a damaged or foreign file)"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    want = 8 + length + end
    if size < want:
        return f"{path} is {size / GIB:.2f} GiB, its header says {want / GIB:.2f} GiB: the copy was cut short"
    return None


def problems(folder: str, weights_gib: float, model_type: str | None, architecture: str | None) -> list[str]:
    """Everything wrong with the weights in ``folder``, each naming the config key and the fix."""
    config_path = os.path.join(folder, "config.json")
    if not os.path.isfile(config_path):
        return [
            f"{config_path} is missing (glm:model.hostDir/directory). Fix: point them at the weights folder"
        ]
    found: list[str] = []
    if model_type is not None:
        with open(config_path) as file:
            config = json.load(file)
        types = (config.get("model_type"), config.get("architectures") or [])
        if types[0] != model_type or architecture not in types[1]:
            found.append(
                f"{config_path} says model_type {types[0]!r}, architectures {types[1]}; glm:hardware's "
                f"profile serves {model_type!r} ({architecture}). Fix: glm:model.directory must name the "
                "GLM-5.3-Flash weights for this profile"
            )
    index_path = os.path.join(folder, INDEX)
    if not os.path.isfile(index_path):
        return [
            *found,
            f"{index_path} is missing. Fix: copy the whole checkpoint (or enable glm:model.download)",
        ]
    with open(index_path) as file:
        shards = sorted(set(json.load(file)["weight_map"].values()))
    missing = [s for s in shards if not os.path.isfile(os.path.join(folder, s))]
    if missing:
        found.append(
            f"shards listed in the index are missing: {' '.join(missing)}. Fix: finish copying the "
            "weights (or enable glm:model.download)"
        )
    if weights_gib > 0:
        present = [os.path.join(folder, s) for s in shards if s not in missing]
        cut = [p for p in map(shard_problem, present) if p is not None]
        found += [
            f"{p}. Fix: copy that shard again into glm:model.hostDir/directory (or re-run the download)"
            for p in cut
        ]
        total = sum(os.path.getsize(p) for p in present) / GIB
        if abs(total - weights_gib) > SIZE_TOLERANCE * weights_gib:
            found.append(
                f"the shards in {folder} total {total:.1f} GiB, glm:model.weightsGib says {weights_gib:g} GiB "
                f"(more than {SIZE_TOLERANCE:.0%} apart). Fix: finish copying the weights, or set "
                f"glm:model.weightsGib to {total:.1f} (the preview's fit check uses it)"
            )
    if not found:
        print(f"weights check: {folder} complete ({len(shards)} shards)")
    return found


def main(argv: list[str]) -> int:
    folder, weights_gib = argv[0], float(argv[1])
    model_type, architecture = (argv[2], argv[3]) if len(argv) > 2 else (None, None)
    found = problems(folder, weights_gib, model_type, architecture)
    for problem in found:
        print(f"weights check: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
