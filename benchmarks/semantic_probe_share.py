"""The semantic probe's share of a replica's capacity at the default settings (issue 23).

A replica gives each probe chat one of its ``--max-num-seqs`` slots for as long as the chat runs.
Per replica and minute, at the default interval, it answers its own direct run (two chats) plus its
share of the front path's run (two chats, on one replica of N). The share is

    chats per minute x seconds per chat / (60 s x maxNumSeqs)

printed per profile for 1, 2 and 8 replicas, with two figures for seconds per chat:

- typical: the seed's measured chat where it has one (a800: 13x17 answered in 0.43 s; ascend: an
  agent call with tool_calls in 6.43 s); rtx5090's seed has none (``-``);
- bound: the most a chat may take, ``min(timeoutSeconds, maxTokens / single-stream tokens/s)``
  (a800 79.0 tok/s, ascend 20.9 tok/s; rtx5090: no figure in the seed, so ``timeoutSeconds``).

``--measured FILE`` adds what the stand-in host run counted (``GLM_FLEET_REPORT`` of
tests/test_fleet_healing_engine.py): chats per direct run, as the simulator answered them.

    .venv/bin/python benchmarks/semantic_probe_share.py [--measured /tmp/fleet.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.config import SEMANTIC_PROBE_CHAT_STEPS, build_stack_config

SINGLE_STREAM_TOKENS_PER_S = {"a800": 79.0, "ascend": 20.9}
"""SPEC.md: a800 "single stream 79.0 tok/s"; ascend "20.9 tok/s"."""
SEED_CHAT_SECONDS = {"a800": 0.43, "ascend": 6.43}
"""SPEC.md: a800 "sanity 13x17 in 0.43 s"; ascend "agent call 6.43 s with tool_calls"."""
PROFILES = ("a800", "ascend", "rtx5090")


ROOT = Path(__file__).resolve().parent.parent


def committed_stack(hardware: str) -> dict[str, object]:
    """The committed ``Pulumi.<hardware>.yaml``'s glm:* values, secrets left out."""
    values = yaml.safe_load((ROOT / f"Pulumi.{hardware}.yaml").read_text())["config"]
    return {
        k.split(":", 1)[1]: v for k, v in values.items() if k.startswith("glm:") and "secure" not in str(v)
    }


def shares(hardware: str, replicas: int) -> dict[str, float | None]:
    config = build_stack_config(committed_stack(hardware))
    probe, slots = config.semantic_probe, config.serving.max_num_seqs
    per_minute = (
        (SEMANTIC_PROBE_CHAT_STEPS + SEMANTIC_PROBE_CHAT_STEPS / replicas) * 60 / probe.interval_seconds
    )
    speed = SINGLE_STREAM_TOKENS_PER_S.get(hardware)
    bound = min(probe.timeout_seconds, probe.max_tokens / speed) if speed else probe.timeout_seconds
    typical = SEED_CHAT_SECONDS.get(hardware)
    return {
        "max_num_seqs": slots,
        "interval_s": probe.interval_seconds,
        "chats_per_minute": round(per_minute, 2),
        "typical_share": per_minute * typical / (60 * slots) if typical is not None else None,
        "bound_share": per_minute * bound / (60 * slots),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measured", type=Path, help="GLM_FLEET_REPORT of the stand-in host run")
    args = parser.parse_args()
    print(f"{'profile':8} {'replicas':>8} {'slots':>5} {'chats/min':>9} {'typical':>8} {'bound':>8}")
    for hardware in PROFILES:
        for replicas in (1, 2, 8):
            s = shares(hardware, replicas)
            print(
                f"{hardware:8} {replicas:8} {s['max_num_seqs']:5.0f} {s['chats_per_minute']:9.2f} "
                f"{'-' if s['typical_share'] is None else format(s['typical_share'], '.2%'):>8} "
                f"{s['bound_share']:8.2%}"
            )
    if args.measured:
        alone = json.loads(args.measured.read_text())["probe_alone"]
        for host, figures in sorted(alone.items()):
            print(
                f"measured on {host}: {figures['chats_per_run']} chats per direct run "
                f"(front path's share included), {figures['tokens_per_chat']} tokens per chat (simulator)"
            )


if __name__ == "__main__":
    main()
