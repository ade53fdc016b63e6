"""The SLO alerts (components/render/slo_rules.py) under ``promtool test rules``: for every profile, a
burn of the error budget fires the fast and the slow alert; a burn within the budget, a short
spike, and a burn that has ended do not. Bounds from the seeds: a800 0.5 s TTFT, ascend 2.5 s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.profiles import PROFILES
from components.render.prometheus_config import DEFAULT_JOB
from tests.conftest import PROJECT
from tests.promtool_rules import Expect, rules_of, run_promtool_tests, series, stack

TARGET = {"job": DEFAULT_JOB, "instance": "vllm:8000"}
MODEL = "glm"
SEEDS = {"a800": (0.5, 0.05), "ascend": (2.5, 0.075), "rtx5090": (0.5, 0.05), "local": (0.5, 0.05)}
"""(TTFT, ITL) bounds in seconds: the A100 seed's 500 ms and 20 tokens/s; ascend's own figures."""


def histogram(metric: str, bound: float, slow_per_minute: str, minutes: int) -> list[dict[str, str]]:
    """60 events a minute; ``slow_per_minute`` of them (a promtool series of increments, one per
    minute) over ``bound``. The ``le`` label as vLLM writes it (fixtures/vllm-0.25.0-h200)."""
    labels = {**TARGET, "model_name": MODEL, "engine": "0"}
    slow = [int(x) for x in slow_per_minute.split()]
    assert len(slow) == minutes
    good, count, total_good, total = [], [], 0, 0
    for n in slow:
        good.append(total_good)
        count.append(total)
        total_good += 60 - n
        total += 60
    return [
        series(f"{metric}_bucket", {**labels, "le": repr(bound)}, " ".join(map(str, good))),
        series(f"{metric}_bucket", {**labels, "le": "+Inf"}, " ".join(map(str, count))),
        series(f"{metric}_count", labels, " ".join(map(str, count))),
    ]


def case(
    metric: str,
    bound: float,
    slow: list[int],
    at: int,
    firing: dict[str, float | None],
    expect: Expect,
    stem: str,
) -> dict[str, Any]:
    checks = []
    for rate in ("Fast", "Slow"):
        name = f"{stem}{rate}Burn"
        value = firing.get(rate)
        alerts = [expect.alert(name, {"model_name": MODEL}, value)] if rate in firing else []
        checks.append(expect.check(at, name, *alerts))
    return {
        "interval": "1m",
        "input_series": histogram(metric, bound, " ".join(map(str, slow)), len(slow)),
        "alert_rule_test": checks,
    }


@pytest.mark.parametrize("hardware", sorted(SEEDS))
def test_latency_objectives_burn_fast_and_slow_on_two_windows(hardware: str, tmp_path: Path) -> None:
    config = stack(hardware)
    rules = rules_of(config, "glm-slo")
    assert set(rules) == {f"Vllm{s}Slo{r}Burn" for s in ("Ttft", "Itl") for r in ("Fast", "Slow")}
    assert (PROFILES[hardware].facts.ttft_slo_seconds, PROFILES[hardware].facts.itl_slo_seconds) == SEEDS[
        hardware
    ]
    expect = Expect(rules)
    tests = []
    for stem, metric, bound in (
        ("VllmTtftSlo", "vllm:time_to_first_token_seconds", SEEDS[hardware][0]),
        ("VllmItlSlo", "vllm:inter_token_latency_seconds", SEEDS[hardware][1]),
    ):
        assert f'le="{bound!r}"' in rules[f"{stem}FastBurn"]["expr"]
        # 12 of 60 over the bound for 80 min: 20 % > 14.4 % (fast) and > 6 % (slow), on both windows.
        tests.append(case(metric, bound, [12] * 80, 75, {"Fast": 0.2, "Slow": 0.2}, expect, stem))
        # 6 of 60 (10 %): above the slow burn (6 %), below the fast (14.4 %).
        tests.append(case(metric, bound, [6] * 80, 75, {"Slow": 0.1}, expect, stem))
        # Within the budget: 1 of 100 is allowed, 0.5 of 60 a minute is nothing.
        tests.append(case(metric, bound, [0, 1] * 40, 75, {}, expect, stem))
        # A spike of 5 min, all slow, after 5 h of fine: the short windows burn, the long ones do
        # not (1 h: 8.3 % < 14.4 %; 6 h: 1.6 % < 6 %): no alert for a blip.
        tests.append(case(metric, bound, [0] * 300 + [60] * 5 + [0] * 2, 306, {}, expect, stem))
        # A burn that ended 40 min ago: the 1 h window still says 16.7 % (over 14.4 %), the 5 min and
        # 30 min ones 0: quiet, the alert ended with its cause.
        tests.append(case(metric, bound, [30] * 60 + [0] * 41, 100, {}, expect, stem))
    result = run_promtool_tests(config, tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_bound_is_a_bucket_vllm_exports() -> None:
    """A bound that is not a bucket of vLLM's histogram matches no series: every alert would be silent."""
    metrics = (PROJECT / "tests" / "fixtures" / "vllm-0.25.0-h200" / "metrics.txt").read_text()
    for hardware, (ttft, itl) in SEEDS.items():
        assert f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{ttft!r}"' in metrics, hardware
        assert f'vllm:inter_token_latency_seconds_bucket{{engine="0",le="{itl!r}"' in metrics, hardware
