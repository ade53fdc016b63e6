"""The profile registry: every place that lists hardware profiles reads ``PROFILES``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from capacity_probe import cli, seeds
from components.config import ConfigError, build_stack_config, deep_merge
from components.profiles import PROFILES, HardwareFacts, Profile, Seed, SeedFigure, register
from scripts import config_table, pulumi_yaml_config
from tests.conftest import PROJECT, profile_stacks

NEW = "testbox"


@pytest.fixture
def new_profile(monkeypatch: pytest.MonkeyPatch) -> Iterator[Profile]:
    """A profile registered for one test only: two 48 GiB NVIDIA cards running the simulator."""
    profile = Profile(
        name=NEW,
        facts=HardwareFacts(
            accelerator="nvidia",
            hbm_gib=48.0,
            known_engine_start_seconds=None,
            known_weights_load_seconds=None,
        ),
        defaults=deep_merge(
            dict(PROFILES["local"].defaults),
            {
                "serving": {"tensorParallelSize": 2},
                "container": {"name": "glm53-testbox", "accelerators": [0, 1]},
                "front": {"port": 8099},
            },
        ),
        seed=Seed(
            "testbox-seed.txt (2×48 GB)", (SeedFigure("kv_pool.tokens", "KV pool", 1000, "tokens", True),)
        ),
    )
    monkeypatch.setitem(PROFILES, NEW, profile)
    yield profile


def test_every_profile_has_its_committed_stack_file() -> None:
    for name in PROFILES:
        stack = yaml.safe_load((PROJECT / f"Pulumi.{name}.yaml").read_text())
        assert stack["config"]["glm:hardware"] == name


def test_every_stack_file_names_a_registered_profile() -> None:
    for path in PROJECT.glob("Pulumi.*.yaml"):
        hardware = yaml.safe_load(path.read_text())["config"]["glm:hardware"]
        assert hardware in PROFILES, f"{path.name}: glm:hardware {hardware!r} is not in PROFILES"


def test_a_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="'local' is already registered"):
        register(PROFILES["local"])


def test_a_new_profile_is_valid_config(new_profile: Profile) -> None:
    config = build_stack_config({"hardware": NEW})
    assert config.hardware == NEW and config.facts == new_profile.facts
    assert config.serving.tensor_parallel_size == 2 and config.front.port == 8099
    with pytest.raises(ConfigError, match=rf"glm:hardware='h100'.*{NEW}"):
        build_stack_config({"hardware": "h100"})


def test_a_new_profile_is_known_to_the_model_rules(new_profile: Profile) -> None:
    """The facts drive the rules: 2 cards of 48 GiB x 0.9 hold at most 86.4 GiB of weights."""
    with pytest.raises(ConfigError, match=r"glm:serving.tensorParallelSize=2"):
        build_stack_config({"hardware": NEW, "model": {"weightsGib": 100.0}})


def test_a_new_profile_is_in_the_probe(new_profile: Profile) -> None:
    assert NEW in seeds.with_figures()
    compared = seeds.compare(NEW, {"kv_pool": {"tokens": 1500}})
    assert compared["source"] == "testbox-seed.txt (2×48 GB)"
    assert compared["figures"][0]["ratio"] == 1.5
    assert NEW in " ".join(cli.parser().format_help().split())


def test_a_new_profile_is_in_the_docs(new_profile: Profile) -> None:
    assert NEW in pulumi_yaml_config.descriptions()["hardware"]
    [row] = [line for line in config_table.table().splitlines() if line.startswith("| `glm:hardware`")]
    assert f"`{NEW}`" in row and f"rtx5090, local or {NEW};" in row


def test_a_new_profile_is_a_stack_the_tests_render(new_profile: Profile) -> None:
    assert profile_stacks()[-1] == NEW


def test_the_committed_docs_name_exactly_the_registered_profiles() -> None:
    hardware = yaml.safe_load((PROJECT / "Pulumi.yaml").read_text())["config"]["hardware"]["description"]
    assert hardware == pulumi_yaml_config.descriptions()["hardware"]
    assert all(name in hardware for name in PROFILES)
