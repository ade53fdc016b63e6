"""Prometheus scrape config and alert rules, proven with the real ``promtool``.

For each stack: ``promtool check config`` (which loads the rules), ``promtool check rules``, and
``promtool test rules`` with generated series that make every alert fire and not fire, including
the KV-pool boundary for every block size (``num_gpu_blocks * block_size`` one block short of
``max_model_len`` fires, exactly ``max_model_len`` does not).
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import StackConfig, usage_meter_runs
from components.docker.prometheus_scrape import PrometheusScrape
from components.profiles import PROFILES
from components.render.prometheus_config import (
    CONFIG_PATH,
    DEFAULT_JOB,
    METER_JOB,
    PROMETHEUS_FLAGS,
    RULES_PATH,
    ScrapeSpec,
    render_prometheus_config,
)
from components.render.prometheus_rules import (
    alert_rules,
    checked_block_sizes,
    integers_below,
    kv_pool_below_expr,
    render_alert_rules,
)
from components.render.status_page import page_files
from tests.conftest import construct
from tests.promtool_rules import Expect, promtool, rules_of, run_promtool_tests, series, stack

HARDWARE = list(PROFILES)
TARGET = "vllm:8000"


# Real stacks, plus one with a block size that is not a power of two.
STACKS = {hw: (hw, {}) for hw in HARDWARE} | {"rtx5090-block96": ("rtx5090", {"serving": {"blockSize": 96}})}


# ---- the "integers below N" regex ------------------------------------------------------------


def matches(n: int, text: str) -> bool:
    return re.fullmatch(f"(?:{integers_below(n)})", text) is not None


def test_integers_below_exhaustively_for_small_n() -> None:
    for n in range(1, 1500):
        regex = re.compile(f"(?:{integers_below(n)})")
        for value in range(0, n + 25):
            assert (regex.fullmatch(str(value)) is not None) == (value < n), (n, value, regex.pattern)


def test_integers_below_property_for_large_n() -> None:
    rng = random.Random(20260529)
    specials = [10**k + d for k in range(1, 10) for d in (-1, 0, 1)]
    specials += [2**k + d for k in range(1, 31) for d in (-1, 0, 1)]
    specials += [8956, 2004983, 1048576, 131072, 149796]
    for n in specials + [rng.randint(1, 10**10) for _ in range(1500)]:
        regex = re.compile(f"(?:{integers_below(n)})")
        near = [n - 2, n - 1, n, n + 1, n + 2, n * 10, n // 10, 0, 9, 10]
        digits = len(str(n))
        samples = [rng.randint(0, 10**digits) for _ in range(40)] + [rng.randint(0, n) for _ in range(40)]
        for value in near + samples:
            if value >= 0:
                assert (regex.fullmatch(str(value)) is not None) == (value < n), (n, value, regex.pattern)


@pytest.mark.parametrize("text", ["", "-1", "+1", "01", "00", "007", "1.0", " 1", "1 ", "1e3", "0x1"])
def test_integers_below_accepts_only_canonical_decimals(text: str) -> None:
    assert not matches(10**6, text)


def test_integers_below_refuses_an_empty_range() -> None:
    with pytest.raises(ValueError, match="no non-negative integer is below 0"):
        integers_below(0)


# ---- rendered rules --------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(STACKS))
def test_kv_pool_rule_is_exact_at_the_boundary_for_every_block_size(name: str) -> None:
    hardware, overrides = STACKS[name]
    config = stack(hardware, **overrides)
    length = config.serving.max_model_len
    expr = rules_of(config)["VllmKvPoolBelowMaxModelLen"]["expr"]
    assert expr.strip() == kv_pool_below_expr(length, checked_block_sizes(config.serving.block_size))
    regexes = dict(re.findall(r'block_size="(\d+)",num_gpu_blocks=~"([^"]+)"', expr))
    assert sorted(map(int, regexes)) == checked_block_sizes(config.serving.block_size)
    for size, regex in regexes.items():
        needed = math.ceil(length / int(size))  # fewest blocks that hold max_model_len
        assert (needed - 1) * int(size) < length <= needed * int(size)
        assert re.fullmatch(f"(?:{regex})", str(needed - 1)), (size, needed)
        assert not re.fullmatch(f"(?:{regex})", str(needed)), (size, needed)


def test_block_sizes_are_powers_of_two_plus_the_configured_one() -> None:
    for hardware in ("a800", "rtx5090"):
        block_size = stack(hardware).serving.block_size
        assert checked_block_sizes(block_size) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    odd = stack("rtx5090", serving={"blockSize": 96})
    assert 96 in checked_block_sizes(odd.serving.block_size)
    rules = rules_of(odd)
    assert 'block_size="96",num_gpu_blocks=~"' in rules["VllmKvPoolBelowMaxModelLen"]["expr"]
    assert "|96|" in rules["VllmKvPoolUnchecked"]["expr"]


def test_spec_decode_alert_exists_only_with_mtp() -> None:
    assert "VllmSpecDecodeAcceptanceLow" in rules_of(stack("a800"))  # MTP 5 tokens
    for hardware in ("ascend", "rtx5090", "local"):
        assert "VllmSpecDecodeAcceptanceLow" not in rules_of(stack(hardware))
    assert "VllmSpecDecodeAcceptanceLow" in rules_of(stack("ascend", serving={"numSpeculativeTokens": 1}))


@pytest.mark.parametrize("hardware", HARDWARE)
def test_rules_name_the_stack_limits_and_the_levers(hardware: str) -> None:
    config = stack(hardware)
    rules = rules_of(config)
    kv = rules["VllmKvPoolBelowMaxModelLen"]["annotations"]
    text = kv["summary"] + kv["description"]
    assert str(config.serving.max_model_len) in kv["summary"]
    for lever in ["--max-num-batched-tokens", "--gpu-memory-utilization", "MTP", "--max-model-len"]:
        assert lever in text, lever
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        job = (
            "usage-meter"
            if name.startswith("GlmUsageMeter")
            else "semantic-probe"
            if name.startswith("Glm")
            else "vllm"
        )
        assert f'job="{job}"' in rule["expr"]
    assert rules["VllmCapacityWaitNothingRunning"]["for"] == "2m"
    assert "and on (job, instance, model_name, engine)" in rules["VllmCapacityWaitNothingRunning"]["expr"]
    assert rules["VllmKvCacheNearlyFull"]["expr"] == 'vllm:kv_cache_usage_perc{job="vllm"} > 0.9'
    assert rules["VllmTtftP99High"]["expr"].startswith(
        "histogram_quantile(0.99, sum by (le, model_name) "
        '(rate(vllm:time_to_first_token_seconds_bucket{job="vllm"}[5m])))'
    )


def test_thresholds_come_from_the_stack_config() -> None:
    thresholds = {
        "kvCacheUsage": 0.8, "ttftP99Seconds": 3.5, "specAcceptanceMin": 0.45, "capacityWaitFor": "7m",
    }  # fmt: skip
    rules = rules_of(stack("a800", monitoring={"thresholds": thresholds}))
    assert rules["VllmKvCacheNearlyFull"]["expr"].endswith("> 0.8")
    assert rules["VllmTtftP99High"]["expr"].endswith("> 3.5")
    assert rules["VllmSpecDecodeAcceptanceLow"]["expr"].endswith("< 0.45")
    assert rules["VllmCapacityWaitNothingRunning"]["for"] == "7m"


def test_target_down_waits_for_the_known_engine_start() -> None:
    # a800 starts in ~371 s and rtx5090 in ~720 s (seeds); +20 %, at least 5 minutes.
    assert rules_of(stack("a800"))["VllmTargetDown"]["for"] == "8m"
    assert rules_of(stack("rtx5090"))["VllmTargetDown"]["for"] == "15m"
    assert rules_of(stack("ascend"))["VllmTargetDown"]["for"] == "5m"


def test_prometheus_config_scrapes_vllm_and_loads_the_rules() -> None:
    monitoring = stack("local", monitoring={"scrapeInterval": "5s"}).monitoring
    config = yaml.safe_load(render_prometheus_config(monitoring, TARGET, DEFAULT_JOB))
    assert config["global"] == {"scrape_interval": "5s", "evaluation_interval": "5s"}
    assert config["rule_files"] == [RULES_PATH]
    [scrape] = config["scrape_configs"]
    assert scrape == {
        "job_name": "vllm",
        "metrics_path": "/metrics",
        "static_configs": [{"targets": [TARGET]}],
    }


def test_prometheus_config_scrapes_the_semantic_probe_when_given() -> None:
    monitoring = stack("local").monitoring
    probe_target = "glm53-flash-local-semantic-probe:9101"
    config = yaml.safe_load(
        render_prometheus_config(monitoring, TARGET, DEFAULT_JOB, probe_target=probe_target)
    )
    assert [job["job_name"] for job in config["scrape_configs"]] == ["vllm", "semantic-probe"]
    assert config["scrape_configs"][1]["static_configs"] == [{"targets": [probe_target]}]


def test_semantic_probe_rules_follow_the_stack_config() -> None:
    rules = rules_of(stack("local", semanticProbe={"intervalSeconds": 30, "failuresBeforeAlert": 5}))
    wrong = rules["GlmModelAnswersWrong"]
    assert wrong["expr"].startswith(
        'glm_semantic_probe_step_consecutive_failures{job="semantic-probe",step="arithmetic"} >= 5'
    )
    assert 'unless on () (up{job="vllm"} == 0)' in wrong["expr"]
    assert wrong["annotations"]["summary"].startswith("On host {{ $labels.host }} ({{ $labels.path }} path)")
    assert "'221'" in wrong["annotations"]["description"]
    assert rules["GlmSemanticProbeSilent"]["for"] == "30s"
    assert "> 90" in rules["GlmSemanticProbeSilent"]["expr"]  # 2 x 30 s + 2 x 15 s
    off = rules_of(stack("local", semanticProbe={"enabled": False}))
    assert not [name for name in off if name.startswith("Glm") and not name.startswith("GlmUsageMeter")]
    # Behind a TLS front the probe runs too (issue 23), and so do its rules.
    tls = stack("local", front={"tls": True})
    assert ScrapeSpec.of(tls).semantic_probe == tls.semantic_probe
    assert rules_of(tls).keys() == rules_of(stack("local")).keys()


def test_flags_suit_the_official_image() -> None:
    """prom/prometheus has ENTRYPOINT /bin/prometheus, so `command` replaces only its flags."""
    assert [
        f"--config.file={CONFIG_PATH}",
        "--storage.tsdb.path=/prometheus",
        "--web.listen-address=:9090",
    ] == PROMETHEUS_FLAGS


def write_files(config: StackConfig, directory: Path) -> tuple[Path, Path]:
    rules = directory / "rules.yml"
    rules.write_text(render_alert_rules(ScrapeSpec.of(config)))
    prometheus = directory / "prometheus.yml"
    prometheus.write_text(
        render_prometheus_config(config.monitoring, TARGET, DEFAULT_JOB, rules_path=str(rules))
    )
    return prometheus, rules


@pytest.mark.parametrize("name", list(STACKS))
def test_promtool_checks_config_and_rules(name: str, tmp_path: Path) -> None:
    hardware, overrides = STACKS[name]
    config = stack(hardware, **overrides)
    prometheus, rules = write_files(config, tmp_path)
    checked = promtool("check", "config", str(prometheus))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (
        f"SUCCESS: {len(rules_of(config)) + len(rules_of(config, 'glm-slo'))} rules found" in checked.stdout
    )
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_promtool_check_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The checks above can fail."""
    broken = render_alert_rules(ScrapeSpec.of(stack("local"))).replace(
        "histogram_quantile(0.99, sum by", "histogram_quantile(0.99 sum by"
    )
    (tmp_path / "rules.yml").write_text(broken)
    assert promtool("check", "rules", str(tmp_path / "rules.yml")).returncode != 0


def minutes(duration: str) -> int:
    number, unit = int(duration[:-1]), duration[-1]
    return {"s": math.ceil(number / 60), "m": number, "h": number * 60}[unit]


def meter_alert_test(expect: Expect) -> dict[str, Any]:
    """The usage meter: a request passed on unmetered fires its warning while it is in the last 10
    minutes, and its counters unreadable for 2 minutes fire the critical one."""
    meter = {"job": METER_JOB, "instance": "glm53-flash-nginx:9146"}
    alice = {**meter, "client": "alice"}
    unmetered, down = "GlmUsageMeterUnmetered", "GlmUsageMeterDown"
    return {
        "input_series": [
            series("glm_key_unmetered_total", alice, "0x5 1x20"),
            series("glm_key_unmetered_total", {**meter, "client": "bob"}, "0x25"),
            series("up", meter, "1x6 0x10"),
            series("glm_key_budget_limit", {**alice, "window": "tokens_per_day"}, "1000x25"),
            series("glm_key_budget_used", {**alice, "window": "tokens_per_day"}, "700x4 800x20"),
        ],
        "interval": "1m",
        "alert_rule_test": [
            expect.check(3, "GlmUsageMeterDayBudgetMostlyUsed"),
            expect.check(
                5,
                "GlmUsageMeterDayBudgetMostlyUsed",
                expect.alert("GlmUsageMeterDayBudgetMostlyUsed", {**alice, "window": "tokens_per_day"}, 0.8),
            ),
            expect.check(5, unmetered),
            expect.check(7, unmetered, expect.alert(unmetered, alice)),
            expect.check(20, unmetered),
            expect.check(8, down),
            expect.check(9, down, expect.alert(down, meter)),
        ],
    }


def promtool_tests(config: StackConfig) -> list[dict[str, Any]]:
    rules = rules_of(config)
    expect = Expect(rules)
    length = config.serving.max_model_len
    target = {"job": DEFAULT_JOB, "instance": TARGET}
    model = {**target, "model_name": config.model.served_name, "engine": "0"}
    tests: list[dict[str, Any]] = []

    # KV pool: per block size, one block short of max_model_len fires; exactly enough does not.
    # Plus the seeds: Ascend's 8,956-token pool fires; A800's 2,004,983 tokens do not.
    pools: dict[tuple[str, str], bool] = {}
    for size in checked_block_sizes(config.serving.block_size):
        needed = math.ceil(length / size)
        pools[str(size), str(needed - 1)] = True
        pools[str(size), str(needed)] = False
        pools[str(size), str(needed * 3)] = False
    pools["4", "2239"] = length > 2239 * 4  # 8,956 tokens
    pools["1", "2004983"] = length > 2004983
    pools["64", "31327"] = length > 31327 * 64  # 2,004,928: the A800 pool in whole 64-token blocks
    assert pools["4", "2239"] and not pools["1", "2004983"]
    info = [
        {**target, "block_size": size, "num_gpu_blocks": blocks, "cache_dtype": "auto"}
        for size, blocks in pools
    ]
    firing = [labels for labels, (key, fires) in zip(info, pools.items(), strict=True) if fires]
    tests.append(
        {
            "input_series": [series("vllm:cache_config_info", labels, "1x5") for labels in info],
            "alert_rule_test": [
                expect.check(
                    1,
                    "VllmKvPoolBelowMaxModelLen",
                    *(expect.alert("VllmKvPoolBelowMaxModelLen", f) for f in firing),
                ),
                expect.check(1, "VllmKvPoolUnchecked"),
            ],
        }
    )
    # A block size the rule was not rendered for, or no block count: said so, not silently passed.
    odd = [
        {**target, "block_size": "48", "num_gpu_blocks": "10", "cache_dtype": "auto"},
        {**target, "block_size": "16", "num_gpu_blocks": "None", "cache_dtype": "auto"},
    ]
    tests.append(
        {
            "input_series": [series("vllm:cache_config_info", labels, "1x5") for labels in odd],
            "alert_rule_test": [
                expect.check(
                    1, "VllmKvPoolUnchecked", *(expect.alert("VllmKvPoolUnchecked", o) for o in odd)
                ),
                expect.check(1, "VllmKvPoolBelowMaxModelLen"),
            ],
        }
    )

    # Capacity wait with nothing running: engine 0 is stuck; engine 1 waits but runs; deferred
    # waiting does not count.
    hold = minutes(config.monitoring.thresholds.capacity_wait_for)
    stuck = {**model, "reason": "capacity"}
    busy = {**model, "engine": "1", "reason": "capacity"}
    tests.append(
        {
            "input_series": [
                series("vllm:num_requests_waiting_by_reason", stuck, "1x40"),
                series("vllm:num_requests_waiting_by_reason", {**model, "reason": "deferred"}, "3x40"),
                series("vllm:num_requests_running", model, "0x40"),
                series("vllm:num_requests_waiting_by_reason", busy, "1x40"),
                series("vllm:num_requests_running", {**model, "engine": "1"}, "2x40"),
            ],
            "alert_rule_test": [
                expect.check(hold - 1, "VllmCapacityWaitNothingRunning"),
                expect.check(
                    hold + 1,
                    "VllmCapacityWaitNothingRunning",
                    expect.alert("VllmCapacityWaitNothingRunning", stuck, 1),
                ),
            ],
        }
    )
    tests.append(
        {
            "input_series": [
                series("vllm:num_requests_waiting_by_reason", stuck, "0x40"),
                series("vllm:num_requests_running", model, "0x40"),
            ],
            "alert_rule_test": [expect.check(hold + 1, "VllmCapacityWaitNothingRunning")],
        }
    )

    # KV cache usage: above the threshold for 5 minutes fires, below does not.
    threshold = config.monitoring.thresholds.kv_cache_usage
    high = round(threshold + (1 - threshold) / 2, 3)
    tests.append(
        {
            "input_series": [
                series("vllm:kv_cache_usage_perc", model, f"{high}x20"),
                series("vllm:kv_cache_usage_perc", {**model, "engine": "1"}, f"{threshold / 2}x20"),
            ],
            "alert_rule_test": [
                expect.check(3, "VllmKvCacheNearlyFull"),
                expect.check(10, "VllmKvCacheNearlyFull", expect.alert("VllmKvCacheNearlyFull", model, high)),
            ],
        }
    )

    # TTFT p99: every first token in (10 s, 20 s] puts p99 at 19.9 s; in (0, 0.5 s] at 0.495 s.
    def ttft(model_name: str, slow: bool) -> list[dict[str, str]]:
        out = []
        for le in ["0.5", "1", "10", "20", "+Inf"]:
            counts = "0+60x40" if (le in ("20", "+Inf") or not slow) else "0x40"
            labels = {**target, "model_name": model_name, "engine": "0", "le": le}
            out.append(series("vllm:time_to_first_token_seconds_bucket", labels, counts))
        return out

    assert config.monitoring.thresholds.ttft_p99_seconds < 19.9
    tests.append(
        {
            "input_series": ttft("slow-model", True) + ttft("fast-model", False),
            "alert_rule_test": [
                expect.check(
                    20, "VllmTtftP99High", expect.alert("VllmTtftP99High", {"model_name": "slow-model"}, 19.9)
                ),
            ],
        }
    )

    # MTP acceptance (only where the stack drafts): 10 % fires, 80 % does not, idle (0/0) does not.
    if "VllmSpecDecodeAcceptanceLow" in rules:
        assert config.monitoring.thresholds.spec_acceptance_min > 0.1
        tests.append(
            {
                "input_series": [
                    series("vllm:spec_decode_num_accepted_tokens_total", model, "0+6x40"),
                    series("vllm:spec_decode_num_draft_tokens_total", model, "0+60x40"),
                    series(
                        "vllm:spec_decode_num_accepted_tokens_total",
                        {**model, "model_name": "good"},
                        "0+48x40",
                    ),
                    series(
                        "vllm:spec_decode_num_draft_tokens_total", {**model, "model_name": "good"}, "0+60x40"
                    ),
                    series(
                        "vllm:spec_decode_num_accepted_tokens_total", {**model, "model_name": "idle"}, "0x40"
                    ),
                    series(
                        "vllm:spec_decode_num_draft_tokens_total", {**model, "model_name": "idle"}, "0x40"
                    ),
                ],
                "alert_rule_test": [
                    expect.check(
                        25,
                        "VllmSpecDecodeAcceptanceLow",
                        expect.alert(
                            "VllmSpecDecodeAcceptanceLow", {**target, "model_name": model["model_name"]}, 0.1
                        ),
                    ),
                ],
            }
        )

    # Target down: quiet while a start may still be loading, then fires; up never fires.
    down_for = minutes(rules["VllmTargetDown"]["for"])
    tests.append(
        {
            "input_series": [
                series("up", target, "0x40"),
                series("up", {**target, "instance": "other:8000"}, "1x40"),
            ],
            "alert_rule_test": [
                expect.check(down_for - 1, "VllmTargetDown"),
                expect.check(down_for + 1, "VllmTargetDown", expect.alert("VllmTargetDown", target)),
            ],
        }
    )
    if config.semantic_probe.enabled:
        tests += semantic_probe_promtool_tests(config, expect, target)
    for test in tests:
        test["interval"] = "1m"
    if usage_meter_runs(config):
        tests.append(meter_alert_test(expect))
    return tests


def semantic_probe_promtool_tests(
    config: StackConfig, expect: Expect, vllm: dict[str, str]
) -> list[dict[str, Any]]:
    """K-1 failed runs in a row stay quiet, K fire; not while vLLM's /metrics is down (VllmTargetDown
    speaks then); the probe silent fires when unscraped or stale, not while it keeps running."""
    probe_config = config.semantic_probe
    k = probe_config.failures_before_alert
    probe = {"job": "semantic-probe", "instance": f"{config.container.name}-semantic-probe:9101"}
    failures = "glm_semantic_probe_step_consecutive_failures"
    # The replica asked directly (issue 23): its series name it.
    at = {**probe, "host": "local", "path": "replica"}

    def runs(step: str, values: str) -> dict[str, str]:
        return series(failures, {**at, "step": step}, values)

    # One more failed run every minute for the failing steps; kv_pool keeps passing.
    counting = [runs(s, "0+1x30") for s in ("readiness", "arithmetic", "tool_call")]
    counting.append(runs("kv_pool", "0x30"))
    step_alerts = {"GlmModelAnswersWrong": "arithmetic", "GlmToolCallsBroken": "tool_call"}
    step_alerts["GlmSemanticProbeStepFailing"] = "readiness"
    checks = []
    for name, step in step_alerts.items():
        if k > 1:
            checks.append(expect.check(k - 1, name))
        checks.append(expect.check(k, name, expect.alert(name, {**at, "step": step}, k)))
    tests = [{"input_series": [*counting, series("up", vllm, "1x30")], "alert_rule_test": checks}]
    # The same failures while vLLM's /metrics is down: the step alerts hold back.
    tests.append(
        {
            "input_series": [*counting, series("up", vllm, "0x30")],
            "alert_rule_test": [expect.check(k + 5, name) for name in step_alerts],
        }
    )

    silent = "GlmSemanticProbeSilent"
    last_run = "glm_semantic_probe_last_run_timestamp_seconds"
    hold = minutes(f"{probe_config.interval_seconds}s")
    # Running: scraped, and the last run keeps up with the clock.
    tests.append(
        {
            "input_series": [series("up", probe, "1x30"), series(last_run, at, "0+60x30")],
            "alert_rule_test": [expect.check(20, silent)],
        }
    )
    # Unscraped after it ran (the container is gone): fires once `for` has passed.
    tests.append(
        {
            "input_series": [series("up", probe, "1x4 0x30")],
            "alert_rule_test": [
                expect.check(5, silent),
                expect.check(5 + hold + 1, silent, expect.alert(silent, probe)),
                expect.check(30, silent, expect.alert(silent, probe)),
            ],
        }
    )
    # Never scraped yet (a first deploy: the probe starts once the gate passed): quiet.
    tests.append(
        {"input_series": [series("up", probe, "0x30")], "alert_rule_test": [expect.check(30, silent)]}
    )
    # Scraped but stuck (the loop hangs): quiet until silent_after, then fires after `for`.
    quiet_until = probe_config.silent_after_seconds // 60
    tests.append(
        {
            "input_series": [series("up", probe, "1x30"), series(last_run, at, "0x30")],
            "alert_rule_test": [
                expect.check(quiet_until, silent),
                expect.check(quiet_until + 1 + hold, silent, expect.alert(silent, at)),
                expect.check(quiet_until + 1 + hold, "GlmReplicaUnprobed"),
            ],
        }
    )
    # Skipped at every run (saturated): not silent, but unprobed once ten intervals have passed.
    unprobed = "GlmReplicaUnprobed"
    unprobed_after = max(10 * probe_config.interval_seconds, probe_config.silent_after_seconds) // 60
    skipped = series("glm_semantic_probe_runs_total", {**at, "result": "skipped"}, "0+1x60")
    tests.append(
        {
            "input_series": [series("up", probe, "1x60"), series(last_run, at, "0x60"), skipped],
            "alert_rule_test": [
                expect.check(unprobed_after, unprobed),
                expect.check(unprobed_after + 1 + hold, unprobed, expect.alert(unprobed, at)),
                expect.check(unprobed_after + 1 + hold, silent),
            ],
        }
    )
    return tests


@pytest.mark.parametrize("name", list(STACKS))
def test_promtool_every_alert_fires_and_stays_quiet(name: str, tmp_path: Path) -> None:
    hardware, overrides = STACKS[name]
    config = stack(hardware, **overrides)
    tests = promtool_tests(config)
    tested = {check["alertname"] for test in tests for check in test["alert_rule_test"]}
    assert tested == set(rules_of(config)), "every rule of the stack is exercised"
    fired = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c["exp_alerts"]}
    assert fired == set(rules_of(config)), "every rule is seen firing"
    result = run_promtool_tests(config, tests, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_several_hosts_each_replica_alerts_under_its_own_host(tmp_path: Path) -> None:
    """Issue 23: box2 answering wrong K runs in a row fires naming box2 while box1's engine is down;
    it holds back only while box2's own engine is down; the front path holds back while any is."""
    config = stack("local", semanticProbe={"failuresBeforeAlert": 2})
    rules = {r["alert"]: r for r in alert_rules(ScrapeSpec.of(config), by_host=True)}
    expect = Expect(rules)
    probe = {"job": "semantic-probe", "instance": "p:9101"}
    box2 = {**probe, "host": "box2", "path": "replica", "step": "arithmetic"}
    front = {**probe, "host": "front", "path": "front", "step": "arithmetic"}
    failures = "glm_semantic_probe_step_consecutive_failures"
    up = {"job": DEFAULT_JOB, "instance": "10.0.0.1:8000", "host": "box1"}
    up2 = {"job": DEFAULT_JOB, "instance": "10.0.0.2:8000", "host": "box2"}
    name = "GlmModelAnswersWrong"
    tests = [
        {  # box1's engine down: box2's own wrong answers still fire, and name box2
            "input_series": [
                series(failures, box2, "0+1x10"),
                series(failures, front, "0+1x10"),
                series("up", up, "0x10"),
                series("up", up2, "1x10"),
            ],
            "alert_rule_test": [expect.check(1, name), expect.check(2, name, expect.alert(name, box2, 2))],
        },
        {  # box2's engine down: VllmTargetDown's business, box2's probe alert holds back
            "input_series": [
                series(failures, box2, "0+1x10"),
                series("up", up, "1x10"),
                series("up", up2, "0x10"),
            ],
            "alert_rule_test": [expect.check(5, name)],
        },
        {  # every engine up: the front path fires too, as host "front"
            "input_series": [
                series(failures, box2, "0+1x10"),
                series(failures, front, "0+1x10"),
                series("up", up, "1x10"),
                series("up", up2, "1x10"),
            ],
            "alert_rule_test": [
                expect.check(2, name, expect.alert(name, box2, 2), expect.alert(name, front, 2))
            ],
        },
    ]
    for test in tests:
        test["interval"] = "1m"
    (tmp_path / "rules.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "g", "rules": list(rules.values())}]})
    )
    document = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "rules_test.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    result = promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = expect.alert(name, box2, 2)["exp_annotations"]["summary"]
    assert summary.startswith("On host box2 (replica path): the model failed the arithmetic check 2 runs")


def test_promtool_test_catches_a_wrong_expectation(tmp_path: Path) -> None:
    """Control: expecting the KV-pool alert for a pool of exactly max_model_len fails."""
    config = stack("ascend")
    expect = Expect(rules_of(config))
    exact = {"job": DEFAULT_JOB, "instance": TARGET, "block_size": "128", "num_gpu_blocks": "1024"}
    assert config.serving.max_model_len == 1024 * 128
    wrong = [
        {
            "interval": "1m",
            "input_series": [series("vllm:cache_config_info", exact, "1x5")],
            "alert_rule_test": [
                expect.check(
                    1, "VllmKvPoolBelowMaxModelLen", expect.alert("VllmKvPoolBelowMaxModelLen", exact)
                )
            ],
        }
    ]
    result = run_promtool_tests(config, wrong, tmp_path)
    assert result.returncode != 0
    assert "VllmKvPoolBelowMaxModelLen" in result.stdout + result.stderr


# ---- the component under Pulumi mocks --------------------------------------------------------


@pytest.mark.parametrize("hardware", HARDWARE)
def test_prometheus_scrape_under_mocks(hardware: str) -> None:
    config = stack(hardware)
    mocks, seen = construct(
        lambda: PrometheusScrape("metrics", ScrapeSpec.of(config), "glm-net", f"vllm:{config.serving.port}")
    )
    assert {name: typ for name, (typ, _) in mocks.registered.items()} == {
        "metrics": "glm:monitoring:PrometheusScrape",
        "metrics-image": "docker:index/remoteImage:RemoteImage",
        "metrics-prometheus": "docker:index/container:Container",
        "metrics-files": "pulumi-python:dynamic:Resource",
    }
    assert mocks.registered["metrics-image"][1] == {"name": "prom/prometheus:v2.53.0", "keepLocally": True}
    inputs = mocks.registered["metrics-prometheus"][1]
    assert inputs["name"] == f"{config.container.name}-prometheus"
    # The container depends on no file: it waits for the first release, then runs Prometheus on it,
    # the status page's files served at /user/ for the front's /status/ (components/render/status_page.py).
    assert inputs["entrypoints"] == ["/bin/sh", "-c"]
    assert inputs["command"] == [
        "while [ ! -e /etc/prometheus/glm53/current/prometheus.yml ]; do sleep 0.1; done; exec /bin/prometheus "
        "--config.file=/etc/prometheus/glm53/current/prometheus.yml --storage.tsdb.path=/prometheus "
        "--web.listen-address=:9090 --web.user-assets=/etc/prometheus/glm53/current/status-page"
    ]
    assert "uploads" not in inputs
    assert inputs["image"] == f"sha256:{'ab' * 32}"
    assert inputs["networksAdvanced"] == [{"name": "glm-net"}]
    assert [{k: p[k] for k in ("internal", "external", "ip")} for p in inputs["ports"]] == [
        {"internal": 9090, "external": 9090, "ip": "127.0.0.1"}
    ]
    assert "volumes" not in inputs and "mounts" not in inputs  # TSDB: the image's own volume
    # The files: a release the container reloads (components/docker/prometheus_release.py).
    release = mocks.registered["metrics-files"][1]
    assert release["container"] == f"{config.container.name}-prometheus"
    # On the stack's Docker host: through ssh with the provider's options on a GPU box's stack.
    assert release["docker_host"] == config.target.host.docker_host
    assert (release.get("ssh") is None) == (hardware == "local"), release.get("ssh")
    uploads = release["contents"]
    assert sorted(uploads) == [
        "prometheus.yml", "rules.yml", "status-page/status.css", "status-page/status.html", "status-page/status.js"
    ]  # fmt: skip
    assert uploads["rules.yml"] == render_alert_rules(ScrapeSpec.of(config))
    for name, content in page_files().items():
        assert uploads[f"status-page/{name}"] == content
    scraped = yaml.safe_load(uploads["prometheus.yml"])
    assert scraped["scrape_configs"][0]["static_configs"] == [{"targets": [f"vllm:{config.serving.port}"]}]
    assert scraped["scrape_configs"][1]["static_configs"] == [
        {"targets": [f"{config.container.name}-semantic-probe:9101"]}
    ]
    # The front's status port on the private network (never published): the rotation's state.
    assert scraped["scrape_configs"][2] == {
        "job_name": "front-rotation",
        "metrics_path": "/metrics",
        "static_configs": [{"targets": [f"{config.container.name}-nginx:9146"]}],
    }
    # The usage meter in the front's nginx (on by default on Docker hosts): usage per API key name,
    # on the same status port.
    assert scraped["scrape_configs"][3:] == [
        {
            "job_name": "usage-meter",
            "metrics_path": "/metrics/usage",
            "static_configs": [{"targets": [f"{config.container.name}-nginx:9146"]}],
        }
    ]
    # Relative: read beside prometheus.yml, in the release promtool checks before it is current.
    assert scraped["rule_files"] == ["rules.yml"]
    assert inputs["restart"] == "unless-stopped" and inputs["logDriver"] == "json-file"
    assert seen == {"url": "http://127.0.0.1:9090", "container_name": f"{config.container.name}-prometheus"}
    json.dumps(inputs, default=str)  # plain data: nothing secret in Prometheus' inputs


def test_prometheus_scrapes_no_meter_where_the_stack_turns_it_off() -> None:
    config = stack("local", front={"usageMeter": {"enabled": False}})
    mocks, _ = construct(lambda: PrometheusScrape("metrics", ScrapeSpec.of(config), "glm-net", "vllm:8000"))
    uploads = mocks.registered["metrics-files"][1]["contents"]
    jobs = [job["job_name"] for job in yaml.safe_load(uploads["prometheus.yml"])["scrape_configs"]]
    assert jobs == ["vllm", "semantic-probe", "front-rotation"]
