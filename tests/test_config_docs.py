"""README's config table, Pulumi.yaml's config schema and the models agree."""

from __future__ import annotations

import re
import subprocess
import sys
import typing

import yaml
from pydantic import BaseModel

from components.config import StackConfig
from tests.conftest import PROJECT


def test_pulumi_yaml_declares_exactly_the_model_keys() -> None:
    declared = set(yaml.safe_load((PROJECT / "Pulumi.yaml").read_text())["config"])
    model_keys = {field.alias or name for name, field in StackConfig.model_fields.items()}
    assert declared == model_keys


def test_pulumi_yaml_descriptions_are_present() -> None:
    for key, spec in yaml.safe_load((PROJECT / "Pulumi.yaml").read_text())["config"].items():
        assert spec.get("description"), f"Pulumi.yaml config {key} has no description"


def test_readme_config_table_is_generated_from_the_models() -> None:
    result = subprocess.run(
        [sys.executable, str(PROJECT / "scripts" / "config_table.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_every_model_field_is_in_the_readme() -> None:
    readme = (PROJECT / "README.md").read_text()
    for name, field in StackConfig.model_fields.items():
        assert f"`glm:{field.alias or name}" in readme


def test_pulumi_yaml_descriptions_are_generated_from_the_models() -> None:
    result = subprocess.run(
        [sys.executable, str(PROJECT / "scripts" / "pulumi_yaml_config.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def _nested_keys(model: type[BaseModel], prefix: str) -> list[tuple[str, str]]:
    """(top-level key, nested key) for every field below the top level, lists of models included."""
    found = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        nested = next(
            (
                a
                for a in (field.annotation, *typing.get_args(field.annotation))
                if isinstance(a, type) and issubclass(a, BaseModel)
            ),
            None,
        )
        if prefix:
            found.append((prefix, key))
        if nested is not None:
            found += _nested_keys(nested, prefix or key)
    return found


def test_pulumi_yaml_names_every_nested_key() -> None:
    """e.g. container.networkSubnet, smoke.metricsUrl, image.keepLocally, front.rateLimit.burst."""
    config = yaml.safe_load((PROJECT / "Pulumi.yaml").read_text())["config"]
    missing = [
        f"{top}.{key}"
        for top, key in _nested_keys(StackConfig, "")
        if re.search(rf"\b{re.escape(key)}\b", config[top]["description"]) is None
    ]
    assert not missing, f"Pulumi.yaml's descriptions lack {missing}"
    for key in ("networkSubnet", "metricsUrl", "keepLocally", "allowPlainHttp"):
        assert any(key in spec["description"] for spec in config.values())


def test_readme_names_every_nested_key() -> None:
    readme = (PROJECT / "README.md").read_text()
    assert "`glm:container.networkSubnet`" in readme and "`glm:front.rateLimit.burst`" in readme
    assert "`glm:servingSecretEnv`" in readme and "GLM_DOCKER_HOST" in readme
