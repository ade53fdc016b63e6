"""The flag tables (components/vllm_flags/, made by scripts/vllm_flags.py from the real vLLM
parser) and the config's refusal of flags the profile's vLLM does not have."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.config import ConfigError
from components.profiles import PROFILES
from components.vllm_flags.tables import FLAG_TABLES, flag_table
from tests.stack_configs import make

PROJECT = Path(__file__).resolve().parent.parent

# Every flag of the seeds' `vllm serve` lines (SPEC §2: a800, ascend final script, rtx5090
# restored docker run), written out by hand from the seeds, not from the renderer.
SEED_FLAGS = {
    "0.33.0": [
        "--tensor-parallel-size", "--enable-expert-parallel", "--speculative-config",
        "--gpu-memory-utilization", "--max-num-seqs", "--max-model-len", "--served-model-name",
        "--port", "--enforce-eager",
    ],
    "0.23.0": [
        "--port", "--max-model-len", "--tensor-parallel-size", "--enable-expert-parallel", "--seed",
        "--served-model-name", "--safetensors-load-strategy", "--max-num-seqs",
        "--max-num-batched-tokens", "--trust-remote-code", "--tool-call-parser", "--reasoning-parser",
        "--enable-auto-tool-choice", "--quantization", "--limit-mm-per-prompt",
        "--gpu-memory-utilization", "--enable-prefix-caching", "--async-scheduling",
        "--compilation-config", "--additional-config", "--api-server-count",
    ],
    "0.28.1rc1.dev580+g385dce36b": [
        "--served-model-name", "--tensor-parallel-size", "--kv-cache-dtype", "--block-size",
        "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization",
        "--moe-backend", "--no-enable-flashinfer-autotune", "--tool-call-parser",
        "--enable-auto-tool-choice", "--reasoning-parser", "--trust-remote-code", "--enforce-eager",
    ],
}  # fmt: skip


@pytest.mark.parametrize("version", sorted(SEED_FLAGS))
def test_every_seed_flag_is_in_the_real_parser(version: str) -> None:
    found = flag_table(version)
    assert found is not None, f"no flag table near vLLM {version} in {FLAG_TABLES}"
    flags, _source = found
    assert [f for f in SEED_FLAGS[version] if f not in flags] == []


def test_the_tables_come_from_the_real_parser() -> None:
    """Things only the real parser knows: argparse's own --help, vLLM's hidden --no- spellings,
    the choices of --dtype as vLLM lists them."""
    table = json.loads((FLAG_TABLES / "0.33.0.json").read_text())
    flags = table["flags"]
    assert table["vllm_version"] == "0.33.0" and table["flag_count"] == len(flags) > 300
    assert "--help" in flags and "--no-enable-prefix-caching" in flags
    assert flags["--max-num-seqs"]["type"] == "int"
    assert {"auto", "bfloat16", "float16"} <= set(flags["--dtype"]["choices"])
    assert "make_arg_parser" in table["generated_by"]


def test_every_profile_version_has_a_table() -> None:
    versions = {p.defaults["image"]["vllmVersion"] for p in PROFILES.values()}
    assert [v for v in sorted(versions) if flag_table(v) is None] == []


def test_the_simulator_checks_against_the_same_table() -> None:
    sim_copy = PROJECT / "images" / "vllm-sim" / "vllm_flags.json"
    assert sim_copy.read_bytes() == (FLAG_TABLES / "0.33.0.json").read_bytes()


def test_a_misspelt_extra_arg_is_refused_naming_the_real_flag() -> None:
    with pytest.raises(ConfigError) as refused:
        make("a800", serving={"extraArgs": ["--enable-prefix-cacheing"]})
    message = str(refused.value)
    assert "glm:serving.extraArgs: --enable-prefix-cacheing is not a flag of vLLM 0.33.0" in message
    assert "did you mean --enable-prefix-caching?" in message


def test_an_abbreviation_is_refused_though_argparse_takes_it() -> None:
    # vLLM 0.33.0's parser has allow_abbrev=True: `--enable-prefix-cachin` starts the engine today,
    # and breaks once a later flag shares the prefix.
    with pytest.raises(ConfigError, match=r"--enable-prefix-cachin .*abbreviation.*--enable-prefix-caching"):
        make("a800", serving={"extraArgs": ["--enable-prefix-cachin"]})


def test_the_parsers_own_spellings_pass() -> None:
    # Flags the config does not render (those it renders are refused in extraArgs on their own).
    args = [
        "--max_logprobs=10",
        "--override-generation-config.temperature",
        "0.6",
        "--enable-chunked-prefill",
    ]
    assert make("a800", serving={"extraArgs": args}).serving.extra_args == args


def test_a_switch_the_image_adds_is_accepted_once_declared() -> None:
    with pytest.raises(ConfigError, match="--sparse-mla-force-mqa is not a flag"):
        make("a800", serving={"extraArgs": ["--sparse-mla-force-mqa"]})
    config = make(
        "a800",
        serving={"extraArgs": ["--sparse-mla-force-mqa"]},
        image={"addedFlags": ["--sparse-mla-force-mqa"]},
    )
    assert config.image.added_flags == ["--sparse-mla-force-mqa"]


def test_a_flag_the_older_ascend_vllm_lacks_is_refused() -> None:
    """--max-num-partial-prefills is in 0.23.0's parser and gone from 0.33.0's."""
    assert make("ascend", serving={"extraArgs": ["--max-num-partial-prefills=2"]})
    with pytest.raises(ConfigError, match=r"--max-num-partial-prefills is not a flag of vLLM 0\.33\.0"):
        make("a800", serving={"extraArgs": ["--max-num-partial-prefills=2"]})
    with pytest.raises(ConfigError, match=r"--tool-parser-plugn is not a flag of vLLM 0\.23\.0"):
        make("ascend", serving={"extraArgs": ["--tool-parser-plugn=x"]})
