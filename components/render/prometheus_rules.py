"""Prometheus' alert rules (``rules.yml``): the failure modes the seeds lived through.

None of the surveyed stacks ships vLLM engine alerts (SPEC §5). The rules here cover, each for a
reason written down in SPEC §2-3:

* a KV pool smaller than ``--max-model-len`` (the Ascend hang: long requests wait forever, HTTP
  still says 200, and one such request blocks all others);
* requests waiting for capacity while nothing runs (the same hang, seen from the scheduler);
* KV cache nearly full, TTFT p99 too high, MTP drafts mostly rejected, and the target down;
* the semantic probe's findings: wrong answers, broken tool calls, and the probe itself silent;
* in a group of their own, what users feel: TTFT and inter-token latency objectives burning their
  error budget (components/render/slo_rules.py).

The render functions are pure; the tests run them through the real ``promtool``.
"""

from __future__ import annotations

import math
from typing import Any

from components import semantic_probe
from components.config import MonitoringConfig, SemanticProbeConfig, SmokeConfig
from components.render.meter_rules import usage_meter_rules
from components.render.prometheus_config import DEFAULT_JOB, AlertLookAt, ScrapeSpec, alert_rule, to_yaml
from components.render.slo_rules import slo_rules

PROBE_SEEN_WINDOW = "7d"
"""``GlmSemanticProbeSilent`` counts an unscraped probe only if Prometheus scraped it within this
window (within its 15-day retention): the probe starts after the gate, Prometheus before it."""


# vLLM's block sizes are powers of two (attention backends: 16, 64 for MLA, 128 on Ascend, 256 for
# the RTX 5090 profile); the configured --block-size is added when it is not one of them.
POWER_OF_TWO_BLOCK_SIZES = [2**i for i in range(11)]  # 1 .. 1024


def integers_below(n: int) -> str:
    """An RE2 regex (Prometheus anchors it) matching exactly the decimal integers 0 .. n-1.

    Canonical spelling only: no sign, no leading zeros (vLLM writes ``str(int)``).

    >>> integers_below(1)
    '0'
    >>> integers_below(70)
    '[0-9]|[1-6][0-9]'
    >>> integers_below(1024)
    '[0-9]|[1-9][0-9]|[1-9][0-9]{2}|10[0-1][0-9]|102[0-3]'
    """
    if n < 1:
        raise ValueError(f"no non-negative integer is below {n}")
    top = str(n - 1)
    if len(top) == 1:
        return "0" if top == "0" else f"[0-{top}]"
    # Every shorter length in full: 0-9, then [1-9] followed by k-1 digits.
    alternatives = ["[0-9]"] + [f"[1-9]{_digits(k - 1)}" for k in range(2, len(top))]
    # Same length as `top`: for each position, `top`'s prefix, a smaller digit, anything after;
    # once only 9s follow, the digit itself is included and that alternative reaches `top`.
    for i, ch in enumerate(top):
        lowest = 1 if i == 0 else 0
        rest = top[i + 1 :]
        if rest.strip("9") == "":
            alternatives.append(top[:i] + _digit_range(lowest, int(ch)) + _digits(len(rest)))
            break
        if int(ch) > lowest:
            alternatives.append(top[:i] + _digit_range(lowest, int(ch) - 1) + _digits(len(rest)))
    return "|".join(alternatives)


def _digit_range(low: int, high: int) -> str:
    return str(low) if low == high else f"[{low}-{high}]"


def _digits(count: int) -> str:
    return {0: "", 1: "[0-9]"}.get(count, f"[0-9]{{{count}}}")


def checked_block_sizes(block_size: int | None) -> list[int]:
    """Block sizes the KV-pool rule can judge exactly: the powers of two, plus the configured
    ``block_size`` (``glm:serving.blockSize``) when there is one."""
    sizes = set(POWER_OF_TWO_BLOCK_SIZES)
    if block_size:
        sizes.add(block_size)
    return sorted(sizes)


def kv_pool_below_expr(max_model_len: int, block_sizes: list[int], job: str = DEFAULT_JOB) -> str:
    """PromQL that is non-empty exactly when ``num_gpu_blocks * block_size < max_model_len``.

    Both factors are label values (strings) of ``vllm:cache_config_info``, and PromQL cannot
    multiply labels. For a fixed block size B, ``blocks * B < L`` holds exactly when
    ``blocks < ceil(L / B)``, so one selector per B with a regex for "integers below ceil(L/B)".
    """
    selectors = [
        f'vllm:cache_config_info{{job="{job}",block_size="{size}",'
        f'num_gpu_blocks=~"{integers_below(math.ceil(max_model_len / size))}"}}'
        for size in block_sizes
    ]
    return "\n  or ".join(selectors)


def _for_target_down(monitoring: MonitoringConfig, engine_start_seconds: float | None) -> str:
    """Down-time that is not yet news: a restart takes as long as the seeds measured, plus 20 %
    (or ``glm:monitoring.targetDownFor``)."""
    if monitoring.target_down_for is not None:
        return monitoring.target_down_for
    return f"{max(5, math.ceil((engine_start_seconds or 0) * 1.2 / 60))}m"


def alert_rules(spec: ScrapeSpec, job: str = DEFAULT_JOB, *, by_host: bool = False) -> list[dict[str, Any]]:
    """The alerting rules for this stack, as Prometheus rule dicts (see ``render_alert_rules``).

    ``by_host``: several replicas, each scraped with a ``host`` label; every alert names its host.
    """
    rules = _kv_pool_rules(spec, job) + _load_rules(spec, job) + [_target_down_rule(spec, job)]
    if by_host:
        rules = [_on_host(rule) for rule in rules]
    if spec.semantic_probe is not None:
        rules += semantic_probe_rules(spec.semantic_probe, spec.look_at, spec.smoke, job, by_host=by_host)
    if spec.usage_meter is not None:
        rules += usage_meter_rules(spec.look_at)
    return rules


def _kv_pool_rules(spec: ScrapeSpec, job: str) -> list[dict[str, Any]]:
    """The KV pool against ``--max-model-len``: a pool too small for one long request (the Ascend
    hang), a pool the rule cannot judge, and the hang itself (requests waiting, none running)."""
    serving = spec.serving
    thresholds = spec.monitoring.thresholds
    max_len = serving.max_model_len
    sel = f'job="{job}"'
    sizes = checked_block_sizes(serving.block_size)
    levers = (
        "Levers, in the order the Ascend seed found them: lower glm:serving.maxNumBatchedTokens "
        "(--max-num-batched-tokens; 32768 -> 8192 took the pool from 4,584 to 9,072 tokens), raise "
        "glm:serving.gpuMemoryUtilization (--gpu-memory-utilization), drop MTP "
        "(glm:serving.numSpeculativeTokens, --speculative-config), or lower "
        f"glm:serving.maxModelLen (--max-model-len, now {max_len}) to what the pool holds."
    )
    return [
        alert_rule(
            "VllmKvPoolBelowMaxModelLen",
            kv_pool_below_expr(max_len, sizes, job),
            "critical",
            f"KV pool is smaller than max_model_len {max_len}: long requests will wait forever",
            "vLLM reserved {{ $labels.num_gpu_blocks }} KV blocks x {{ $labels.block_size }} "
            f"tokens, below --max-model-len {max_len}. A request longer than the pool is accepted "
            "(HTTP 200), waits for capacity forever and blocks every request behind it (one hang "
            f"lasted 2,171 s on Ascend). {levers}",
            None,
        ),
        alert_rule(
            "VllmKvPoolUnchecked",
            f'vllm:cache_config_info{{{sel},block_size!~"{"|".join(map(str, sizes))}"}}\n'
            f'  or vllm:cache_config_info{{{sel},num_gpu_blocks!~"[0-9]+"}}',
            "warning",
            "KV pool size cannot be checked against max_model_len",
            "vllm:cache_config_info reports block_size {{ $labels.block_size }} and num_gpu_blocks "
            "{{ $labels.num_gpu_blocks }}, which the VllmKvPoolBelowMaxModelLen rule does not cover. "
            "Set glm:serving.blockSize to the block size vLLM uses so the rule is rendered for it.",
            None,
        ),
        alert_rule(
            "VllmCapacityWaitNothingRunning",
            f'vllm:num_requests_waiting_by_reason{{{sel},reason="capacity"}} > 0\n'
            "  and on (job, instance, model_name, engine)\n"
            f"vllm:num_requests_running{{{sel}}} == 0",
            "critical",
            "Requests wait for KV capacity while nothing runs: the engine is stuck",
            "{{ $value }} request(s) of {{ $labels.model_name }} have waited for capacity with no "
            f"request running for {thresholds.capacity_wait_for}: a request needs more KV than the "
            f"whole pool (the Ascend hang). Cancel the long request to unblock the others, then "
            f"make the pool at least max_model_len {max_len}. {levers}",
            thresholds.capacity_wait_for,
        ),
    ]


def _load_rules(spec: ScrapeSpec, job: str) -> list[dict[str, Any]]:
    """Load carried badly: a nearly full KV cache, a slow first token, (MTP) drafts mostly rejected."""
    serving = spec.serving
    thresholds = spec.monitoring.thresholds
    sel = f'job="{job}"'
    rules = [
        alert_rule(
            "VllmKvCacheNearlyFull",
            f"vllm:kv_cache_usage_perc{{{sel}}} > {thresholds.kv_cache_usage:g}",
            "warning",
            f"KV cache above {thresholds.kv_cache_usage:.0%} for 5 minutes",
            "KV cache usage of {{ $labels.model_name }} is {{ $value | humanizePercentage }} "
            f"(threshold glm:monitoring.thresholds.kvCacheUsage = {thresholds.kv_cache_usage:g}). "
            "New requests queue or preempt running ones. Lower glm:serving.maxNumSeqs, enlarge the "
            "pool (glm:serving.gpuMemoryUtilization, maxNumBatchedTokens), or add capacity.",
            "5m",
        ),
        alert_rule(
            "VllmTtftP99High",
            "histogram_quantile(0.99, sum by (le, model_name) "
            f"(rate(vllm:time_to_first_token_seconds_bucket{{{sel}}}[5m])))\n"
            f"  > {thresholds.ttft_p99_seconds:g}",
            "warning",
            f"Time to first token p99 above {thresholds.ttft_p99_seconds:g} s",
            "TTFT p99 of {{ $labels.model_name }} is {{ $value | humanizeDuration }} "
            f"(threshold glm:monitoring.thresholds.ttftP99Seconds = {thresholds.ttft_p99_seconds:g}). "
            "Long prefills block the queue: check vllm:num_requests_waiting, lower "
            "glm:serving.maxNumBatchedTokens for chunked prefill, or shed load.",
            "10m",
        ),
    ]
    if serving.num_speculative_tokens:
        rules.append(
            alert_rule(
                "VllmSpecDecodeAcceptanceLow",
                "sum by (job, instance, model_name) "
                f"(rate(vllm:spec_decode_num_accepted_tokens_total{{{sel}}}[5m]))\n"
                "  / sum by (job, instance, model_name) "
                f"(rate(vllm:spec_decode_num_draft_tokens_total{{{sel}}}[5m]))\n"
                f"  < {thresholds.spec_acceptance_min:g}",
                "warning",
                f"MTP accepts under {thresholds.spec_acceptance_min:.0%} of drafted tokens",
                "Speculative decoding of {{ $labels.model_name }} accepts {{ $value | "
                "humanizePercentage }} of drafted tokens (threshold "
                "glm:monitoring.thresholds.specAcceptanceMin = "
                f"{thresholds.spec_acceptance_min:g}; {serving.num_speculative_tokens} tokens "
                "drafted per step). Drafts cost compute and KV; the Ascend seed measured 12.2 % "
                "and removed MTP. Lower or unset glm:serving.numSpeculativeTokens.",
                "15m",
            )
        )
    return rules


def _target_down_rule(spec: ScrapeSpec, job: str) -> dict[str, Any]:
    """The engine unreachable for longer than a start takes (``_for_target_down``)."""
    down_for = _for_target_down(spec.monitoring, spec.engine_start_seconds)
    return alert_rule(
        "VllmTargetDown",
        f'up{{job="{job}"}} == 0',
        "critical",
        "vLLM /metrics is unreachable: the engine is down or still loading",
        "Prometheus cannot scrape {{ $labels.instance }}. vLLM refuses connections while the "
        f"weights load; on {spec.hardware} a start is allowed {down_for} "
        f"before this fires. Check {spec.look_at.serving_log} (OOM, engine-ready timeout, "
        f"NCCL/HCCL errors) and {spec.look_at.restarts}.",
        down_for,
    )


def semantic_probe_rules(
    probe: SemanticProbeConfig,
    look_at: AlertLookAt,
    smoke: SmokeConfig,
    vllm_job: str = DEFAULT_JOB,
    *,
    by_host: bool = False,
) -> list[dict[str, Any]]:
    """The semantic probe's alerts (issue 18): wrong answers or broken tool calls for K runs in a
    row, a readiness or KV-pool step failing as long, and the probe itself silent.

    ``look_at``: the commands that show the probe on the stack's target (its log, what runs);
    ``smoke``: the arithmetic question and answer the probe asks.

    Every series names its target (issue 23): ``host`` (a replica's host name, or ``front``) and
    ``path`` (``replica``: asked directly; ``front``: through the front), and so does every alert's
    summary. While vLLM's /metrics is down, VllmTargetDown speaks (after the engine's known start
    time): the step alerts hold back, so a restart or a deploy does not page twice; with several
    hosts a replica's own alerts hold back only while its own engine is down (``by_host``).
    """
    where = (
        f"The probe's log says what came back and what to look at: {look_at.probe_log}. The probe "
        f"runs every {probe.interval_seconds} s (glm:semanticProbe.intervalSeconds); K = {probe.failures_before_alert} "
        "(glm:semanticProbe.failuresBeforeAlert)."
    )
    return _probe_failure_rules(probe, smoke, vllm_job, where, by_host) + _probe_silence_rules(probe, look_at)


_ON_HOST = "On host {{ $labels.host }} ({{ $labels.path }} path): "
"""How a probe alert's summary names its target (issue 23)."""


def _probe_failure_rules(
    probe: SemanticProbeConfig, smoke: SmokeConfig, vllm_job: str, where: str, by_host: bool
) -> list[dict[str, Any]]:
    """Answers, tool calls, readiness, the KV pool: failing K runs in a row while the engine is up."""
    k = probe.failures_before_alert
    sel = f'job="{semantic_probe.SCRAPE_JOB}"'
    failures = f"{semantic_probe.METRIC_PREFIX}_step_consecutive_failures"
    up = f'(up{{job="{vllm_job}"}} == 0)'

    def failing(steps: str) -> str:
        """Failed K runs in a row, unless the engine it reached is down."""
        if not by_host:  # one engine: its /metrics down silences both paths
            return f"{failures}{{{sel},{steps}}} >= {k}\n  unless on () {up}"
        return (
            f'({failures}{{{sel},path="replica",{steps}}} >= {k}\n  unless on (host) {up})\n'
            f'or\n({failures}{{{sel},path="front",{steps}}} >= {k}\n  unless on () {up})'
        )

    return [
        alert_rule(
            "GlmModelAnswersWrong",
            failing('step="arithmetic"'),
            "critical",
            _ON_HOST
            + f"the model failed the arithmetic check {k} runs in a row: answers are wrong or missing",
            f"Asked {smoke.prompt!r} (through the front, or the replica directly), the model did not answer "
            f"{smoke.expected_answer!r} with its reasoning in its own field for "
            "{{ $value }} runs in a row (a wrong answer, a 5xx, a timeout or an inline reasoning). "
            "/health may well be green (vLLM #24207). " + where,
            None,
        ),
        alert_rule(
            "GlmToolCallsBroken",
            failing('step="tool_call"'),
            "critical",
            _ON_HOST + f"tool calls failed {k} probe runs in a row",
            "Asked for the weather with a get_weather tool, the model returned no well-formed "
            "get_weather call for {{ $value }} runs in a row (no tool_calls, bad arguments, a 5xx "
            "or a timeout). Look at --tool-call-parser and --enable-auto-tool-choice. " + where,
            None,
        ),
        alert_rule(
            "GlmSemanticProbeStepFailing",
            failing('step=~"readiness|kv_pool"'),
            "warning",
            _ON_HOST + "the probe's {{ $labels.step }} step failed " + f"{k} runs in a row",
            "readiness: the front did not list the model through the probe's key; kv_pool: vLLM's "
            "KV pool is below --max-model-len or its metrics are unreadable. {{ $value }} runs in a "
            "row. " + where,
            None,
        ),
    ]


def _probe_silence_rules(probe: SemanticProbeConfig, look_at: AlertLookAt) -> list[dict[str, Any]]:
    """The probe itself: silent, or a replica it skipped (saturated) at every run."""
    sel = f'job="{semantic_probe.SCRAPE_JOB}"'
    # The probe starts once the gate passed, and Prometheus before it: a probe never scraped yet is
    # a deploy under way (the gate's business), not a silent probe.
    last_run = f"{semantic_probe.METRIC_PREFIX}_last_run_timestamp_seconds"

    def skipping(seconds: int) -> str:
        return (
            f'increase({semantic_probe.METRIC_PREFIX}_runs_total{{{sel},result="skipped"}}[{seconds}s]) > 0'
        )

    return [
        alert_rule(
            "GlmSemanticProbeSilent",
            f"(up{{{sel}}} == 0 and max_over_time(up{{{sel}}}[{PROBE_SEEN_WINDOW}]) == 1)\n  or\n"
            f"(time() - {last_run}{{{sel}}} > {probe.silent_after_seconds}\n"
            f"  unless on (host, path) {skipping(probe.silent_after_seconds)})",
            "warning",
            "The semantic probe is silent: nobody checks the model's answers",
            "Prometheus cannot scrape the probe (which it did before), or its last finished run is older than "
            f"{probe.silent_after_seconds} s (two intervals plus two request timeouts). Wrong answers "
            f"would not alert. Look at: {look_at.running} and {look_at.probe_log}.",
            f"{probe.interval_seconds}s",
        ),
        alert_rule(
            "GlmReplicaUnprobed",
            f"time() - {last_run}{{{sel}}} > {probe.unprobed_after_seconds}\n"
            f"  and on (host, path) {skipping(probe.unprobed_after_seconds)}",
            "warning",
            _ON_HOST + f"not probed for over {probe.unprobed_after_seconds} s: saturated at every run",
            "The probe skips a replica whose vLLM has requests waiting or runs --max-num-seqs "
            "(at most two runs in a row; the third asks all the same, and a run that only timed out "
            "while saturated counts as skipped too); every run of this one ended so for "
            f"{probe.unprobed_after_seconds} s (ten intervals), so nobody checked its answers. "
            "Look at its load (vllm:num_requests_waiting) and capacity: a replica that is always "
            "saturated needs more replicas or a lower glm:front.rateLimit.",
            f"{probe.interval_seconds}s",
        ),
    ]


def _on_host(rule: dict[str, Any]) -> dict[str, Any]:
    """The rule per replica: aggregations keep ``host``, and the annotations start with it."""
    expr = rule["expr"].replace("sum by (le, model_name)", "sum by (le, model_name, host)")
    expr = expr.replace("sum by (job, instance, model_name)", "sum by (job, instance, model_name, host)")
    notes = {key: f"On host {{{{ $labels.host }}}}: {text}" for key, text in rule["annotations"].items()}
    return {**rule, "expr": expr, "annotations": notes}


def rule_groups(spec: ScrapeSpec, job: str = DEFAULT_JOB, *, by_host: bool = False) -> dict[str, Any]:
    """The rule groups: the seeds' failure modes, and the latency objectives (components/render/slo_rules.py)."""
    return {
        "groups": [
            {"name": f"glm-vllm-{spec.hardware}", "rules": alert_rules(spec, job, by_host=by_host)},
            {
                "name": f"glm-slo-{spec.hardware}",
                "rules": slo_rules(spec.facts, spec.hardware, job, by_host=by_host),
            },
        ]
    }


def render_alert_rules(spec: ScrapeSpec, job: str = DEFAULT_JOB, *, by_host: bool = False) -> str:
    """The Prometheus rule file (``rules.yml``) for this stack."""
    return to_yaml(rule_groups(spec, job, by_host=by_host))
