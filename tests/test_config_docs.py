"""README's config table, Pulumi.yaml's config schema and the models agree."""

from __future__ import annotations

import subprocess
import sys

import yaml

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
