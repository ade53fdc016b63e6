"""The Grafana dashboard (components/render/dashboard.py): the committed JSON is the rendered one, and every
panel's PromQL returns data from a real Prometheus scraping two vLLM-protocol simulators (as host
box1 and box2, like the stack's several-host scrape config) and the semantic probe's real metrics,
after the probe ejected box2 for wrong answers. Grafana itself does not run here."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from components.config import build_stack_config
from components.render.dashboard import PANELS, RATE, panel_queries, render_json
from components.render.prometheus_config import ROTATION_JOB, ScrapeSpec
from components.render.prometheus_rules import render_alert_rules
from components.semantic_probe.ejection import Ejector
from components.semantic_probe.service import ProbeMetrics, run_once, serve_metrics
from components.verification.semantic_probe_spec import ProbeReplica, SemanticProbeSpec, probe_settings
from tests.conftest import PROJECT
from tests.front_rig import KEYS, SERVED, free_port, vllm_sim
from tests.gate.support import local_config
from tests.rotation_series import rotation_status

PROMETHEUS = "/usr/bin/prometheus"


def test_the_committed_dashboard_is_the_rendered_one() -> None:
    committed = (PROJECT / "dashboards" / "glm53-fleet.json").read_text()
    assert committed == render_json(), (
        "run: .venv/bin/python -m components.render.dashboard > dashboards/glm53-fleet.json"
    )


def test_the_provisioning_file_loads_dashboards_from_a_directory() -> None:
    [provider] = yaml.safe_load((PROJECT / "dashboards" / "provisioning.yaml").read_text())["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/var/lib/grafana/")


def test_the_dashboard_shows_what_the_issue_asks_for() -> None:
    titles = " / ".join(title for title, _unit, _targets in PANELS).lower()
    for wanted in (
        "in rotation",
        "gate history",
        "probe steps",
        "kv cache",
        "running / waiting",
        "p50 / p99",
        "tokens/s",
    ):
        assert wanted in titles, wanted
    exprs = " ".join(expr for _title, expr in panel_queries())
    assert "gpu_cache_usage_perc" not in exprs  # removed in vLLM 0.12 (SPEC §6)


@contextlib.contextmanager
def prometheus(
    tmp: Path, vllm: dict[str, int], probe_port: int, rules: str, rotation_port: int
) -> Iterator[str]:
    (tmp / "rules.yml").write_text(rules)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp / "rules.yml")],
        "scrape_configs": [
            {
                "job_name": "vllm",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{port}"], "labels": {"host": host}}
                    for host, port in vllm.items()
                ],
            },
            {"job_name": "semantic-probe", "static_configs": [{"targets": [f"127.0.0.1:{probe_port}"]}]},
            {
                "job_name": ROTATION_JOB,
                "metrics_path": "/rotation.prom",
                "static_configs": [{"targets": [f"127.0.0.1:{rotation_port}"]}],
            },
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/-/ready", timeout=1).status_code == 200:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, "prometheus did not start"
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_every_panel_returns_data_from_a_real_prometheus(tmp_path: Path) -> None:
    runtime = {"VLLM_SIM_RUNTIME_FAULTS": "1", "VLLM_SIM_DECODE_TOKEN_SECONDS": "0.01"}
    with vllm_sim(runtime) as box1, vllm_sim(runtime) as box2:
        config = local_config()
        spec = SemanticProbeSpec(
            probe=config.semantic_probe.model_copy(update={"failures_before_alert": 2}),
            smoke=config.smoke,
            served_name=SERVED,
            max_model_len=32768,
            max_num_seqs=256,
            container=config.container,
        )
        replicas = tuple(
            ProbeReplica(h, f"127.0.0.1:{p}", guarded=False) for h, p in (("box1", box1), ("box2", box2))
        )
        settings = dataclasses.replace(
            probe_settings(spec, "unused", f"127.0.0.1:{box1}", replicas),
            endpoint=f"http://127.0.0.1:{box1}/v1",
            port=free_port(),
        )
        metrics = ProbeMetrics(settings)
        serve_metrics(metrics, settings.port)
        requests = tmp_path / "requests"
        requests.mkdir()
        ejector = Ejector(requests, 2, 2, metrics)
        httpx.put(f"http://127.0.0.1:{box2}/sim/faults", json={"faults": ["wrong-answer"]}).raise_for_status()
        for _ in range(2):
            for target in settings.targets:
                ejector(target, run_once(settings, KEYS["alice"], metrics, target))
        assert (requests / "box2.req").read_text().startswith("eject box2 ")

        stop = threading.Event()

        def users(port: int) -> None:  # steady traffic: the rates and the TTFT histogram move
            while not stop.is_set():
                httpx.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json={"model": SERVED, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
                    timeout=30,
                )

        traffic = [threading.Thread(target=users, args=(p,), daemon=True) for p in (box1, box2)]
        for t in traffic:
            t.start()
        try:
            # The stack's own alert rules for several hosts (K = 2), as its Prometheus loads them.
            stack = build_stack_config({"hardware": "local", "semanticProbe": {"failuresBeforeAlert": 2}})
            rules = render_alert_rules(ScrapeSpec.of(stack), by_host=True)
            with (
                rotation_status(tmp_path) as rotation_port,
                prometheus(
                    tmp_path, {"box1": box1, "box2": box2}, settings.port, rules, rotation_port
                ) as base,
            ):
                time.sleep(8)  # eight scrapes of each target
                results = {}
                for title, expr in panel_queries():
                    query = expr.replace(RATE, "5s")
                    body = httpx.get(f"{base}/api/v1/query", params={"query": query}, timeout=10).json()
                    assert body["status"] == "success", (title, body)
                    results[query] = {
                        (
                            r["metric"].get("host"),
                            r["metric"].get("step") or r["metric"].get("event"),
                            r["metric"].get("result"),
                        ): float(r["value"][1])
                        for r in body["data"]["result"]
                    }
                    assert results[query], f"no data for {title!r}: {query}"
                alerts = httpx.get(f"{base}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        finally:
            stop.set()
            for t in traffic:
                t.join(timeout=30)
    # box2's wrong answers fire the alert naming box2 (and only box2: box1 and the front path passed).
    wrong = [a["labels"] for a in alerts if a["labels"]["alertname"] == "GlmModelAnswersWrong"]
    print(
        f"\nfiring: {[(a['state'], a['labels']) for a in alerts if a['labels']['alertname'].startswith('Glm')]}"
    )
    assert [(w["host"], w["path"], w["step"], w["severity"]) for w in wrong] == [
        ("box2", "replica", "arithmetic", "critical")
    ]
    by_query = dict(zip((e for _t, e in panel_queries()), results.values(), strict=True))
    ejected = next(v for q, v in by_query.items() if "replica_ejected" in q)
    assert ejected == {("box1", None, None): 0.0, ("box2", None, None): 1.0}
    in_rotation = next(v for q, v in by_query.items() if "glm_rotation_in" in q)
    assert in_rotation == {("box1", None, None): 1.0, ("box2", None, None): 0.0}
    history = next(v for q, v in by_query.items() if "glm_rotation_events_total" in q)
    assert len(history) == 4 and sum(history.values()) == 5, history  # (host, event)
    steps = next(v for q, v in by_query.items() if "step_success" in q)
    assert steps[("box2", "arithmetic", None)] == 0.0 and steps[("box1", "arithmetic", None)] == 1.0
    for query, values in by_query.items():
        if 'job="vllm"' in query:
            assert {host for host, _s, _r in values} == {"box1", "box2"}, query
            assert all(math.isfinite(v) for v in values.values()), (query, values)
        if "generation_tokens" in query or "time_to_first_token" in query:
            assert all(v > 0 for v in values.values()), (query, values)
