"""In-process tests of the simulator's pure parts: command line, arithmetic, tokens, tools."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from simulator.arithmetic import find_arithmetic, format_number
from simulator.config import UsageError, parse_config, parse_human_int
from simulator.metrics import fmt_float
from simulator.plan import filler_pieces
from simulator.tokenizer import tokenize
from simulator.tools import build_arguments, choose_function

from .conftest import FULL_ARGS, MODEL, MODEL_PATH


def test_full_vllm_argv_is_accepted_and_unknown_flags_ignored() -> None:
    cfg = parse_config(FULL_ARGS, env={})
    assert cfg.model == MODEL_PATH
    assert cfg.served_names == [MODEL]
    assert (cfg.max_model_len, cfg.max_num_seqs, cfg.block_size) == (4096, 8, 16)
    assert cfg.gpu_memory_utilization == 0.95
    assert cfg.spec_tokens == 5
    assert cfg.reasoning_parser == "glm45"
    assert cfg.tool_call_parser == "glm47"
    assert cfg.auto_tool_choice is True
    assert cfg.prefix_caching is True
    ignored = " ".join(cfg.ignored)
    for flag in ("--tensor-parallel-size 8", "--enable-expert-parallel", "--seed 1024"):
        assert flag in ignored
    assert '--limit-mm-per-prompt {"image":1,"video":0}' in ignored
    assert cfg.kv_pool_tokens == 4 * 4096
    assert cfg.num_gpu_blocks == 4 * 4096 // 16


@pytest.mark.parametrize(
    "argv",
    [
        ["vllm", "serve", "/m", "--max_model_len=128K"],
        ["serve", "/m", "--trust-remote-code", "--max-model-len", "128K"],
        ["/m", "--max-model-len", "131072", "-tp", "8"],
        ["--model", "/m", "--enforce-eager", "--max-model-len", "128K"],
    ],
)
def test_argv_shapes(argv: list[str]) -> None:
    cfg = parse_config(argv, env={})
    assert cfg.model == "/m"
    assert cfg.served_names == ["/m"]
    assert cfg.max_model_len == 131072


def test_human_readable_lengths() -> None:
    assert parse_human_int("128k") == 128000
    assert parse_human_int("1M") == 1048576
    assert parse_human_int("1048576") == 1048576


def test_no_prefix_caching_and_env_knobs() -> None:
    env = {
        "VLLM_SIM_KV_POOL_TOKENS": "9000",
        "VLLM_SIM_FAULT": "wrong-answer, silent",
        "VLLM_SIM_VERSION": "0.14.0",
        "VLLM_SIM_HOL_BLOCKING": "1",
    }
    cfg = parse_config(["serve", "/m", "--block-size", "128", "--no-enable-prefix-caching"], env)
    assert cfg.prefix_caching is False
    assert cfg.num_gpu_blocks == 70 and cfg.pool_tokens == 8960
    assert cfg.faults == {"wrong-answer", "silent"}
    assert cfg.version == "0.14.0" and cfg.hol_blocking is True


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["serve", "/m", "--enable-auto-tool-choice"], {}),
        (["serve", "/m", "--port", "eighty"], {}),
        (["serve", "/m", "--speculative-config", "{not json"], {}),
        (["serve", "/m"], {"VLLM_SIM_FAULT": "explode"}),
        (["serve", "/m"], {"VLLM_SIM_DECODE_TOKEN_SECONDS": "fast"}),
    ],
)
def test_bad_configuration_is_refused(argv: list[str], env: dict[str, str]) -> None:
    with pytest.raises(UsageError):
        parse_config(argv, env)


@pytest.mark.parametrize(
    ("text", "expression", "result"),
    [
        ("What is 13×17?", "13*17", "221"),
        ("13*17", "13*17", "221"),
        ("Compute 13 x 17.", "13*17", "221"),
        ("what is 12+30", "12+30", "42"),
        ("What is 7 times 6?", "7*6", "42"),
        ("(2+3)*4 = ?", "(2+3)*4", "20"),
        ("10/4", "10/4", "2.5"),
        ("2^10", "2^10", "1024"),
        ("请计算 13×17", "13*17", "221"),
        ("1/3", "1/3", "0.3333333333"),
    ],
)
def test_arithmetic_is_computed(text: str, expression: str, result: str) -> None:
    found = find_arithmetic(text)
    assert found is not None
    assert (found.expression, found.result) == (expression, result)


@pytest.mark.parametrize("text", ["hello there", "GLM-5.3-Flash", "version 2", "", "9^999999"])
def test_no_arithmetic(text: str) -> None:
    assert find_arithmetic(text) is None


def test_division_by_zero() -> None:
    found = find_arithmetic("what is 1/0")
    assert found is not None and found.value is None and found.result == "undefined"
    assert format_number(Fraction(221)) == "221"


def test_tokenizer_is_lossless_and_counted() -> None:
    text = "Hello, world: 13*17=221 weather"
    pieces = tokenize(text)
    assert "".join(pieces) == text
    assert pieces == ["Hell", "o", ",", " worl", "d", ":", " 13", "*", "17", "=", "221", " weat", "her"]
    assert len(filler_pieces(37)) == 37


def test_tool_arguments_from_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "detailed": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "extra": {"type": "string"},
        },
        "required": ["city", "unit", "days", "detailed", "tags"],
    }
    args = build_arguments(schema, "What's the weather in San Francisco for 3 days, in fahrenheit?")
    assert args["city"] == "San Francisco"
    assert args["unit"] == "fahrenheit"
    assert args["days"] == 3
    assert args["detailed"] is False
    assert len(args["tags"]) == 1
    assert "extra" not in args  # optional: left out
    json.dumps(args)


def test_tool_choice_prefers_a_function_named_in_the_prompt() -> None:
    tools = [
        {"type": "function", "function": {"name": "get_time", "parameters": {}}},
        {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
    ]
    assert choose_function(tools, "auto", "the weather in Paris")["name"] == "get_weather"
    assert choose_function(tools, "auto", "hi")["name"] == "get_time"
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert choose_function(tools, named, "hi")["name"] == "get_weather"


def test_metric_float_formatting_matches_prometheus_client() -> None:
    assert fmt_float(1) == "1.0"
    assert fmt_float(5052943) == "5.052943e+06"
    assert fmt_float(float("inf")) == "+Inf"
