"""Prometheus' rules and config as a stack renders them, run through the real ``promtool``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from components.config import StackConfig, build_stack_config
from components.render.prometheus_config import ScrapeSpec
from components.render.prometheus_rules import render_alert_rules
from tests.conftest import TEST_HOST_KEY

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
GPU_HOST = {"hosts": [{"name": "gpu01", "dockerHost": "ssh://deploy@gpu01", "hostKey": TEST_HOST_KEY}]}


def stack(hardware: str, **overrides: Any) -> StackConfig:
    raw: dict[str, Any] = {"hardware": hardware, **overrides}
    if hardware != "local":
        raw["target"] = GPU_HOST
        # The profiles bind the front to 0.0.0.0; the stack files accept plain HTTP, so do these.
        raw["front"] = {"allowPlainHttp": True, **raw.get("front", {})}
    return build_stack_config(raw)


def rules_of(config: StackConfig, group: str = "glm-vllm") -> dict[str, dict[str, Any]]:
    """The rules of one group: ``glm-vllm`` (tested here) or ``glm-slo`` (tests/test_slo_rules.py)."""
    groups = yaml.safe_load(render_alert_rules(ScrapeSpec.of(config)))["groups"]
    [rules] = [g["rules"] for g in groups if g["name"] == f"{group}-{config.hardware}"]
    return {rule["alert"]: rule for rule in rules}


# ---- promtool check ---------------------------------------------------------------------------


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


# ---- promtool test rules: every alert fires and stays quiet --------------------------------

_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def expand(text: str, labels: dict[str, str], value: float | None) -> str:
    """What Prometheus renders for the few template forms the rules use (anything else fails)."""

    def one(match: re.Match[str]) -> str:
        expr = match.group(1)
        if expr.startswith("$labels."):
            return labels[expr.removeprefix("$labels.")]
        assert value is not None, f"{expr} needs the alert value"
        if expr == "$value":
            return f"{value:g}"
        if expr == "$value | humanizePercentage":
            return f"{value * 100:.4g}%"
        if expr == "$value | humanizeDuration":
            assert 1 <= value < 60, "only seconds are modelled here"
            return f"{value:.4g}s"
        raise AssertionError(f"template {expr!r} is not modelled by this test")

    return _TEMPLATE.sub(one, text)


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    rendered = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{rendered}}}", "values": values}


class Expect:
    """Builds promtool's exp_alerts from the rule's own annotations."""

    def __init__(self, rules: dict[str, dict[str, Any]]) -> None:
        self.rules = rules

    def alert(self, name: str, labels: dict[str, str], value: float | None = None) -> dict[str, Any]:
        rule = self.rules[name]
        full = {**labels, **rule["labels"]}
        return {
            "exp_labels": full,
            "exp_annotations": {k: expand(v, full, value) for k, v in rule["annotations"].items()},
        }

    def check(self, at: int, name: str, *alerts: dict[str, Any]) -> dict[str, Any]:
        return {"eval_time": f"{at}m", "alertname": name, "exp_alerts": list(alerts)}


def run_promtool_tests(
    config: StackConfig, tests: list[dict[str, Any]], directory: Path
) -> subprocess.CompletedProcess[str]:
    (directory / "rules.yml").write_text(render_alert_rules(ScrapeSpec.of(config)))
    document = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}
    (directory / "rules_test.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    return promtool("test", "rules", "rules_test.yml", cwd=directory)


def promql_at(tmp: Path, series: dict[str, str], expr: str, at: str, expected: dict[str, float]) -> str:
    """``promtool test rules``: ``expr`` over ``series`` (name -> values every 15 s) at ``at``
    equals ``expected`` (labels -> value). Returns promtool's output; asserts it passed."""
    test = {
        "rule_files": [],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [{"series": name, "values": values} for name, values in series.items()],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": at,
                        "exp_samples": [{"labels": labels, "value": v} for labels, v in expected.items()],
                    }
                ],
            }
        ],
    }
    (tmp / "test.yml").write_text(yaml.safe_dump(test))
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(tmp / "test.yml")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
