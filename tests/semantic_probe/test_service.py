"""The probe loop against the simulator behind the real Nginx front: the gate's steps, one by one,
switched between faults at runtime, and the metrics Prometheus reads."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import cast

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from components.config import build_stack_config
from components.semantic_probe import PROBE_STEPS
from components.semantic_probe.service import ProbeMetrics, run_forever, run_once, serve_metrics
from components.semantic_probe.settings import ProbeSettings
from components.serving.spec import render_serving
from components.verification.semantic_probe_spec import ProbeReplica, SemanticProbeSpec, probe_settings
from tests.gate.support import KEY, Sim, free_port, local_config

RUNTIME = {"VLLM_SIM_RUNTIME_FAULTS": "1"}


def settings_for(endpoint: str, sim: Sim, **probe: int) -> ProbeSettings:
    config = local_config()
    spec = SemanticProbeSpec(
        probe=config.semantic_probe.model_copy(update=probe),
        smoke=config.smoke,
        served_name=config.model.served_name,
        max_model_len=config.serving.max_model_len,
        max_num_seqs=config.serving.max_num_seqs,
        container=config.container,
    )
    base = probe_settings(spec, "unused", f"127.0.0.1:{sim.port}")
    return dataclasses.replace(base, endpoint=endpoint)


def samples(metrics: ProbeMetrics) -> dict[tuple[str, str], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, s.labels.get("step") or s.labels.get("result", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def replica_runs(metrics: ProbeMetrics, host: str) -> dict[str, float]:
    """The probe's runs of one replica, by result (ok, failed, skipped)."""
    text = generate_latest(metrics.registry).decode()
    return {
        s.labels["result"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "glm_semantic_probe_runs_total" and s.labels["host"] == host
    }


def set_faults(sim: Sim, *faults: str) -> None:
    httpx.put(f"{sim.url}/sim/faults", json={"faults": list(faults)}).raise_for_status()


def test_a_healthy_model_passes_every_step(sims: Callable[..., Sim], front: Callable[[Sim], str]) -> None:
    sim = sims(**RUNTIME)
    settings = settings_for(front(sim), sim)
    metrics = ProbeMetrics(settings)
    outcomes = run_once(settings, KEY, metrics)
    assert [(o.step, o.ok) for o in outcomes] == [(s, True) for s in PROBE_STEPS]
    seen = samples(metrics)
    for step in PROBE_STEPS:
        assert seen["glm_semantic_probe_step_success", step] == 1
        assert seen["glm_semantic_probe_step_consecutive_failures", step] == 0
        assert seen["glm_semantic_probe_step_latency_seconds", step] > 0
    assert seen["glm_semantic_probe_last_success_timestamp_seconds", ""] > time.time() - 60
    assert seen["glm_semantic_probe_runs_total", "ok"] == 1


def test_each_fault_fails_its_step_and_counts_runs_in_a_row(
    sims: Callable[..., Sim], front: Callable[[Sim], str]
) -> None:
    sim = sims(**RUNTIME)
    settings = settings_for(front(sim), sim, timeout_seconds=1, interval_seconds=2)
    metrics = ProbeMetrics(settings)
    expected = {
        "wrong-answer": ({"arithmetic"}, "expected content '221'"),
        "no-tool-calls": ({"tool_call"}, "finish_reason=stop, 0 tool_calls"),
        "http-500": ({"arithmetic", "tool_call"}, "answered 500"),
        "silent": ({"arithmetic", "tool_call"}, "no complete answer within 1 s"),
    }
    for fault, (failing, message) in expected.items():
        set_faults(sim, fault)
        for run in (1, 2):
            started = time.monotonic()
            outcomes = {o.step: o for o in run_once(settings, KEY, metrics)}
            assert {s for s, o in outcomes.items() if not o.ok} == failing, fault
            assert all(message in (outcomes[s].failure or "") for s in failing), (fault, outcomes)
            seen = samples(metrics)
            for step in PROBE_STEPS:
                assert seen["glm_semantic_probe_step_consecutive_failures", step] == (
                    run if step in failing else 0
                )
            assert seen["glm_semantic_probe_last_failure_step", sorted(failing)[-1]] == 1
            # A stall holds each chat step for the request timeout, no longer.
            assert time.monotonic() - started < 2 * settings.smoke["request_timeout_seconds"] + 2
        set_faults(sim)
        assert all(o.ok for o in run_once(settings, KEY, metrics)), f"healed after {fault}"
        assert all(
            samples(metrics)["glm_semantic_probe_step_consecutive_failures", s] == 0 for s in PROBE_STEPS
        )


def test_the_probe_sends_its_small_max_tokens(sims: Callable[..., Sim], front: Callable[[Sim], str]) -> None:
    sim = sims()
    settings = settings_for(front(sim), sim, max_tokens=2)
    outcomes = {o.step: o for o in run_once(settings, KEY, ProbeMetrics(settings))}
    assert not outcomes["arithmetic"].ok
    assert "max_tokens=2" in (outcomes["arithmetic"].failure or "")


def test_a_wrong_key_fails_readiness_with_the_reason(
    sims: Callable[..., Sim], front: Callable[[Sim], str]
) -> None:
    sim = sims()
    settings = settings_for(front(sim), sim)
    outcomes = {
        o.step: o for o in run_once(settings, "sk-not-a-key-of-this-front-0000", ProbeMetrics(settings))
    }
    assert not outcomes["readiness"].ok and "refused the gate's API key" in (
        outcomes["readiness"].failure or ""
    )


def test_runs_at_a_fixed_rate_and_serves_metrics(
    sims: Callable[..., Sim], front: Callable[[Sim], str]
) -> None:
    sim = sims()
    settings = dataclasses.replace(settings_for(front(sim), sim), interval_seconds=0.5, port=free_port())
    metrics = ProbeMetrics(settings)
    serve_metrics(metrics, settings.port)
    stop = threading.Event()
    loop = threading.Thread(target=run_forever, args=(settings, KEY, metrics, stop), daemon=True)
    loop.start()
    time.sleep(1.9)
    stop.set()
    loop.join(timeout=10)
    text = httpx.get(f"http://127.0.0.1:{settings.port}/metrics").text
    runs = {
        s.labels["result"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "glm_semantic_probe_runs_total"
    }
    assert runs["failed"] == 0 and 3 <= runs["ok"] <= 5, runs
    assert "glm_semantic_probe_interval_seconds 0.5" in text
    assert "glm_semantic_probe_failures_before_alert 3.0" in text


def test_each_replica_is_asked_directly_and_its_results_name_its_host(
    sims: Callable[..., Sim], front: Callable[[Sim], str]
) -> None:
    """Issue 23: box2 switched to wrong answers at runtime fails under host="box2" only; box1 and
    the front path (here in front of box1) keep passing."""
    box1, box2 = sims(**RUNTIME), sims(**RUNTIME)
    config = local_config()
    spec = SemanticProbeSpec(
        probe=config.semantic_probe,
        smoke=config.smoke,
        served_name=config.model.served_name,
        max_model_len=config.serving.max_model_len,
        max_num_seqs=config.serving.max_num_seqs,
        container=config.container,
    )
    replicas = (
        ProbeReplica("box1", f"127.0.0.1:{box1.port}", guarded=False),
        ProbeReplica("box2", f"127.0.0.1:{box2.port}", guarded=False),
    )
    settings = dataclasses.replace(
        probe_settings(spec, "unused", f"127.0.0.1:{box1.port}", replicas), endpoint=front(box1)
    )
    assert [(t.host, t.path) for t in settings.targets] == [
        ("front", "front"),
        ("box1", "replica"),
        ("box2", "replica"),
    ]
    metrics = ProbeMetrics(settings)
    set_faults(box2, "wrong-answer")
    failed = {
        t.host: sorted(o.step for o in run_once(settings, KEY, metrics, t) if not o.ok)
        for t in settings.targets
    }
    assert failed == {"front": [], "box1": [], "box2": ["arithmetic"]}
    text = generate_latest(metrics.registry).decode()
    consecutive = {
        (s.labels["host"], s.labels["path"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "glm_semantic_probe_step_consecutive_failures" and s.labels["step"] == "arithmetic"
    }
    assert consecutive == {("front", "front"): 0, ("box1", "replica"): 0, ("box2", "replica"): 1}


def test_a_guarded_replica_without_the_replica_key_is_refused_before_asking() -> None:
    config = local_config()
    spec = SemanticProbeSpec(
        probe=config.semantic_probe,
        smoke=config.smoke,
        served_name=config.model.served_name,
        max_model_len=config.serving.max_model_len,
        max_num_seqs=config.serving.max_num_seqs,
        container=config.container,
    )
    settings = probe_settings(spec, "f", "v:8000", (ProbeReplica("box2", "10.0.0.2:8000", guarded=True),))
    assert settings.replica_key_file == "/etc/semantic-probe/replica-key"
    assert settings.scrape_key_file == "/etc/semantic-probe/scrape-key"
    with pytest.raises(ValueError, match="replica 'box2' is guarded but the probe has no replica keys"):
        run_once(settings, KEY, ProbeMetrics(settings), settings.targets[1])


def test_a_saturated_replica_is_skipped_not_failed(sims: Callable[..., Sim]) -> None:
    """Issue 23: while the replica runs --max-num-seqs requests, or has one waiting, the probe does
    not ask it: the run counts as skipped, the failure counts stay, nothing is ejected."""
    config = build_stack_config(
        {
            "hardware": "local",
            "serving": {"maxNumSeqs": 2},
            "smoke": {"chatTemplateKwargs": {"reasoning_effort": "low"}},
        }
    )
    sim = sims(config=config, VLLM_SIM_DECODE_TOKEN_SECONDS="0.05")
    spec = SemanticProbeSpec(
        probe=config.semantic_probe,
        smoke=config.smoke,
        served_name=config.model.served_name,
        max_model_len=config.serving.max_model_len,
        max_num_seqs=config.serving.max_num_seqs,
        container=config.container,
    )
    settings = probe_settings(
        spec,
        "unused",
        f"127.0.0.1:{sim.port}",
        (ProbeReplica("box1", f"127.0.0.1:{sim.port}", guarded=False),),
    )
    assert settings.max_num_seqs == 2
    replica = settings.targets[1]
    metrics = ProbeMetrics(settings)

    def user(tokens: int) -> None:
        body = {
            "model": config.model.served_name,
            "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": tokens,
            "ignore_eos": True,
        }
        httpx.post(f"{sim.url}/v1/chat/completions", json=body, timeout=60)

    for users in (2, 3):  # at --max-num-seqs, then with one waiting
        threads = [threading.Thread(target=user, args=(120,)) for _ in range(users)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        assert run_once(settings, KEY, metrics, replica) == [], f"{users} users: not skipped"
        for t in threads:
            t.join(timeout=60)
    assert replica_runs(metrics, "box1") == {"ok": 0, "failed": 0, "skipped": 2}
    # Past its skip budget: asked although saturated; it waits for a slot and passes.
    threads = [threading.Thread(target=user, args=(40,)) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    assert all(o.ok for o in run_once(settings, KEY, metrics, replica, may_skip=False))
    for t in threads:
        t.join(timeout=60)
    assert replica_runs(metrics, "box1") == {"ok": 1, "failed": 0, "skipped": 2}
    # Idle again: asked, and it passes.
    assert all(o.ok for o in run_once(settings, KEY, metrics, replica))
    assert replica_runs(metrics, "box1") == {"ok": 2, "failed": 0, "skipped": 2}


def test_saturation_skips_at_most_two_runs_in_a_row_and_none_after_a_failure() -> None:
    """CI: the last replica in rotation, carrying every client, was skipped at every run and
    answered wrong for over a minute. The budget bounds how long load can hide a bad replica."""
    from components.gate.checks import StepOutcome
    from components.semantic_probe.saturation import MAX_SKIPS_IN_A_ROW, SkipBudget

    def outcome(ok: bool) -> StepOutcome:
        return StepOutcome(step="arithmetic", ok=ok, seconds=0.1, failure=None if ok else "got 222")

    budget = SkipBudget()
    allowed = []
    for _ in range(MAX_SKIPS_IN_A_ROW + 1):
        allowed.append(budget.may_skip())
        budget.ran([])  # skipped
    assert allowed == [True, True, False]
    budget.ran([outcome(False)])  # asked: wrong
    assert not budget.may_skip()
    budget.ran([])  # a timeout while saturated counts as skipped: still no skip allowed
    assert not budget.may_skip()
    budget.ran([outcome(False)])
    assert not budget.may_skip()
    budget.ran([outcome(True)])  # passed: skips allowed again
    assert budget.may_skip()


def test_a_full_engine_that_generates_nothing_is_probed_not_skipped() -> None:
    """A hung engine looks saturated (its requests never leave ``running``); only one that still
    generates tokens between two readings is busy. Served as vLLM's own text format."""
    import http.server

    from components.semantic_probe.saturation import saturation
    from components.semantic_probe.settings import ProbeTarget

    state = {"generated": 100.0}

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = (
                "# TYPE vllm:num_requests_running gauge\n"
                'vllm:num_requests_running{model_name="glm-5.3-flash"} 2.0\n'
                "# TYPE vllm:num_requests_waiting gauge\n"
                'vllm:num_requests_waiting{model_name="glm-5.3-flash"} 0.0\n'
                "# TYPE vllm:generation_tokens counter\n"
                f'vllm:generation_tokens_total{{model_name="glm-5.3-flash"}} {state["generated"]}\n'
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        target = ProbeTarget(host="box1", path="replica", endpoint=f"{url}/v1", metrics_url=f"{url}/metrics")
        settings = dataclasses.replace(
            settings_for(f"{url}/v1", cast(Sim, SimpleNamespace(port=1))), max_num_seqs=2
        )
        progress: dict[tuple[str, str], float] = {}
        assert saturation(settings, target, None, progress) == "2 running = --max-num-seqs"
        state["generated"] = 160.0  # generating: busy
        assert saturation(settings, target, None, progress) == "2 running = --max-num-seqs"
        # Not one token since: stalled, so the run goes ahead (and fails, and alerts).
        assert saturation(settings, target, None, progress) is None
    finally:
        server.shutdown()


def test_a_timeout_after_asking_a_target_known_saturated_counts_as_skipped(
    sims: Callable[..., Sim], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked past its skip budget, a saturated replica's chats queue; their timeouts are no evidence
    even when its metrics cannot be read again after the run (CI: the one failure of a saturated
    phase came from asking a busy replica)."""
    from components.semantic_probe import service

    config = build_stack_config({"hardware": "local", "semanticProbe": {"timeoutSeconds": 1}})
    sim = sims(config=config, VLLM_SIM_DECODE_TOKEN_SECONDS="0.2")
    spec = SemanticProbeSpec.of(config, render_serving(config))
    settings = probe_settings(
        spec,
        "unused",
        f"127.0.0.1:{sim.port}",
        (ProbeReplica("box1", f"127.0.0.1:{sim.port}", guarded=False),),
    )
    readings = iter(["2 running = --max-num-seqs"])
    monkeypatch.setattr(service, "saturation", lambda *_: next(readings, None))
    metrics = ProbeMetrics(settings)
    assert run_once(settings, KEY, metrics, settings.targets[1], may_skip=False) == []
    assert replica_runs(metrics, "box1") == {"ok": 0, "failed": 0, "skipped": 1}
