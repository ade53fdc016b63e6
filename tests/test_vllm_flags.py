"""vLLM's command line in one home (components/vllm_flags/): the key each flag came from exists in
the config, the table agrees with the real parser, and the argv keeps a list a list.

The config model is walked here by its fields' aliases (what a stack file writes), not through the
table under test; the two keys issue 38 found wrong are written out from the issue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel

from components.config import SECRET_KEYS, StackConfig, build_stack_config
from components.profiles import PROFILES
from components.serving.spec import render_serving
from components.vllm_flags.owned import OWNED, owned_flags
from components.vllm_flags.owned import config_key as key_of_flag
from components.vllm_flags.tables import FLAG_TABLES
from tests.conftest import stack_config
from tests.stack_configs import make

PROJECT = Path(__file__).resolve().parent.parent
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in PROJECT.glob("Pulumi.*.yaml"))


def config_model_has(key: str) -> bool:
    """``glm:a.b`` names a field of the config models, by the alias a stack file uses."""
    model: Any = StackConfig
    for part in key.removeprefix("glm:").split("."):
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return False
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        if part not in fields:
            return False
        annotation = fields[part].annotation
        model = next(
            (
                a
                for a in (annotation, *get_args(annotation))
                if isinstance(a, type) and issubclass(a, BaseModel)
            ),
            None,
        )
    return True


def stack_file_config(stack: str) -> StackConfig:
    raw = {k.removeprefix("glm:"): v for k, v in stack_config(stack).items() if k.startswith("glm:")}
    return build_stack_config({k: v for k, v in raw.items() if k != "apiKeys"})


def test_the_walk_tells_a_key_from_a_near_miss() -> None:
    assert config_model_has("glm:model.servedName") and config_model_has("glm:serving.maxNumSeqs")
    assert not config_model_has("glm:serving.servedModelName")
    assert not config_model_has("glm:serving.speculativeConfig")  # a property, not a key


def test_every_profile_has_a_stack_file_here() -> None:
    assert set(PROFILES) <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_flag_names_a_key_of_the_config(stack: str) -> None:
    """A start-up failure on a flag names the key it came from (issue 38): `--served-model-name`
    was named `glm:serving.servedModelName` and `--speculative-config`
    `glm:serving.speculativeConfig`, keys that do not exist. Every flag of every committed stack
    file (one per profile, and the staging stack)."""
    rendered = set(render_serving(stack_file_config(stack)).flags)
    named = {flag: key_of_flag(flag, rendered) for flag in rendered}
    assert {flag: key for flag, key in named.items() if not config_model_has(key)} == {}
    assert "glm:serving.extraArgs" not in named.values()  # every rendered flag is the config's own
    if "--served-model-name" in rendered:
        assert named["--served-model-name"] == "glm:model.servedName"
    if "--speculative-config" in rendered:
        assert named["--speculative-config"] == "glm:serving.numSpeculativeTokens"


def test_both_flags_issue_38_found_are_rendered_by_some_stack() -> None:
    rendered = {flag for s in STACKS for flag in render_serving(stack_file_config(s)).flags}
    assert {"--served-model-name", "--speculative-config"} <= rendered


def test_every_key_the_table_names_exists() -> None:
    """Flags no stack renders today too (both spellings of a toggle, the short forms); the API keys
    are a secret input, beside the model."""
    keys = {flag: key.split(" ", 1)[0] for flag, key in owned_flags().items()}
    secret = {f"glm:{name}" for name in SECRET_KEYS}
    assert {flag: key for flag, key in keys.items() if not config_model_has(key) and key not in secret} == {}


def test_a_flag_from_extra_args_names_extra_args() -> None:
    config = build_stack_config({"hardware": "local", "serving": {"extraArgs": ["--max-log-len=10"]}})
    rendered = {arg.split("=", 1)[0] for arg in render_serving(config).argv if arg.startswith("--")}
    assert "--max-log-len" in rendered
    assert key_of_flag("--max-log-len", rendered) == "glm:serving.extraArgs"


@pytest.mark.parametrize("table", sorted(FLAG_TABLES.glob("*.json")), ids=lambda p: p.stem)
def test_the_table_renders_each_flag_as_the_real_parser_reads_it(table: Path) -> None:
    """A switch or toggle takes no value, a flag of several words takes several (nargs "+")."""
    flags = json.loads(table.read_text())["flags"]
    wrong = []
    for row in OWNED:
        for spelling in row.spellings:
            entry = flags.get(spelling)
            if entry is None:
                continue  # not in this version: the known-flags check refuses it there
            bare = entry["type"] == "bool"
            if bare != (row.kind in ("switch", "toggle")) or (
                row.kind == "values" and entry.get("nargs") != "+"
            ):
                wrong.append((spelling, row.kind, entry))
    assert wrong == []


def test_several_media_domains_are_several_argv_items() -> None:
    domains = ["upload.wikimedia.org", "images.example.com"]
    config = make("ascend", serving={"allowedMediaDomains": domains})
    serving = render_serving(config)
    at = serving.argv.index("--allowed-media-domains")
    assert serving.argv[at : at + 3] == ["--allowed-media-domains", *domains]
    assert serving.shown_flags["--allowed-media-domains"] == "upload.wikimedia.org images.example.com"
