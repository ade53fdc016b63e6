"""Unknown ``glm:*`` keys, at any depth, are refused before anything is created, each with the
nearest real key (components/config/loading.py)."""

from __future__ import annotations

import pytest

from components.config import ConfigError, build_stack_config
from tests.conftest import run_program


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ({"servng": {"maxNumSeqs": 4}}, "glm:servng is not a known key; did you mean glm:serving?"),
        ({"serving": {"maxNumSeq": 4}}, "glm:serving.maxNumSeq is not a known key; did you mean glm:serving.maxNumSeqs?"),
        ({"front": {"rateLimit": {"burts": 3}}}, "did you mean glm:front.rateLimit.burst?"),
        ({"smoke": {"deadlinesecond": 9}}, "did you mean glm:smoke.deadlineSeconds?"),
        ({"image": {"build": {"baseimage": "x"}}}, "did you mean glm:image.build.baseImage?"),
        ({"apikeys": {"a": "b"}}, "did you mean glm:apiKeys?"),
    ],
)  # fmt: skip
def test_a_misspelt_key_is_refused_with_the_nearest_real_one(overrides: dict, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        build_stack_config({"hardware": "local", **overrides})
    assert said in str(refused.value)
    assert "Fix: rename it (`scripts/pulumi.sh config rm --path 'glm:" in str(refused.value)


def test_a_key_in_a_list_item_is_named_by_its_config_path() -> None:
    host = {"name": "a", "dockerHost": "unix:///var/run/docker.sock", "hostKy": "k"}
    with pytest.raises(
        ConfigError,
        match=r"glm:target\.hosts\[0\]\.hostKy is not a known key; did you mean glm:target\.hosts\[0\]\.hostKey\?",
    ):
        build_stack_config({"hardware": "local", "target": {"hosts": [host]}})


def test_a_key_like_no_other_is_refused_without_a_guess() -> None:
    with pytest.raises(ConfigError, match=r"glm:zzzz is not a known key\. Fix: remove it"):
        build_stack_config({"hardware": "local", "zzzz": 1})


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as refused:
        build_stack_config({"hardware": "local", "servng": {}, "serving": {"maxModelLen": 0}})
    assert "glm:servng" in str(refused.value) and "glm:serving.maxModelLen" in str(refused.value)


def test_the_program_refuses_a_misspelt_top_level_key_before_creating_anything() -> None:
    """The stack file's ``glm:servng: {maxNumSeqs: 4}``: the engine hands it over like any key."""
    with pytest.raises(Exception, match=r"glm:servng is not a known key; did you mean glm:serving\?"):
        run_program("local", overrides={"glm:servng": {"maxNumSeqs": 4}})
