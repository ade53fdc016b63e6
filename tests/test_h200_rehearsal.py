"""The H200 rehearsal's argv (scripts/h200/render_argv.py): the a800 profile's rendered argv, fitted
to one card and a tiny Qwen2, with every change said. Checked against the profile's own rendering
and against vLLM's parser tables either side of 0.25.0 (the version that runs there)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from components.vllm_flags.checks import unknown_flags
from components.vllm_flags.tables import flag_table

PROJECT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("render_argv", PROJECT / "scripts/h200/render_argv.py")
assert _spec is not None and _spec.loader is not None
render_argv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render_argv)


def test_every_rendered_flag_is_kept_or_its_change_said() -> None:
    fitted = render_argv.fitted("a800")
    said = {c["flag"] for c in fitted["changed"] if c["flag"]}
    kept = set(fitted["argv"])
    assert [t for t in fitted["rendered"][1:] if t not in kept and t not in said] == []
    assert all(c["why"] for c in fitted["changed"])
    # what one card and a 2-layer dense model cannot take (the a800 seed renders each)
    dropped = {c["flag"].split("=")[0] for c in fitted["changed"] if c["flag"] and c["now"] is None}
    assert dropped == {
        "--tensor-parallel-size",
        "--speculative-config",
        "--reasoning-parser",
        "--enable-expert-parallel",
    }
    assert {"--max-num-seqs=32", "--shutdown-timeout=25", "--load-format=dummy"} <= kept
    assert fitted["argv"][0] == "/tmp/model" and fitted["env"]["CUDA_VISIBLE_DEVICES"] == "0"


def test_the_fitted_argv_is_vllm_0_25_0s() -> None:
    table = flag_table("0.25.0")
    assert table is not None
    assert unknown_flags(render_argv.fitted("a800")["argv"][1:], table[0]) == []
