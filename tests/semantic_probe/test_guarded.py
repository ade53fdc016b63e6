"""A replica off the front's host, asked directly through its real guard (nginx, the rendered guard
config) with the stack's replica key: every step passes, /metrics is read with the guards' scrape key
(kv_pool and the saturation check), and another key gets nothing."""

from __future__ import annotations

from components.semantic_probe.saturation import saturation
from components.semantic_probe.service import ProbeMetrics, run_once
from components.semantic_probe.settings import ReplicaKeys
from components.verification.semantic_probe_spec import ProbeReplica, SemanticProbeSpec, probe_settings
from tests.front_rig import SERVED, vllm_sim
from tests.gate.support import local_config
from tests.guard_rig import KEY as REPLICA_KEY
from tests.guard_rig import SCRAPE_KEY, guard_files, nginx

KEYS = ReplicaKeys(REPLICA_KEY, SCRAPE_KEY)


def test_a_guarded_replica_is_probed_with_the_replica_key() -> None:
    config = local_config()
    spec = SemanticProbeSpec(
        probe=config.semantic_probe,
        smoke=config.smoke,
        served_name=SERVED,
        max_model_len=32768,
        max_num_seqs=256,
        container=config.container,
    )
    with vllm_sim() as sim, nginx(guard_files(f"127.0.0.1:{sim}")) as (guard, _):
        replica = ProbeReplica("box2", f"127.0.0.1:{guard}", guarded=True)
        settings = probe_settings(spec, "unused", "unused:8000", (replica,))
        target = settings.targets[1]
        assert (target.host, target.replica_key) == ("box2", True)
        assert target.metrics_url == f"http://127.0.0.1:{guard}/metrics"
        outcomes = run_once(
            settings, "sk-the-probe-api-key-not-for-guards", ProbeMetrics(settings), target, KEYS
        )
        assert [(o.step, o.ok) for o in outcomes] == [
            ("readiness", True),
            ("arithmetic", True),
            ("tool_call", True),
            ("kv_pool", True),
        ], outcomes
        assert saturation(settings, target, SCRAPE_KEY, {}) is None
        # Another key: the guard's JSON 401 fails readiness (and the saturation check cannot read
        # /metrics, so it lets the run go ahead and report).
        other = "sk-replica-not-this-stacks-key-0000"
        wrong = run_once(settings, "x", ProbeMetrics(settings), target, ReplicaKeys(other, SCRAPE_KEY))
        assert not wrong[0].ok and "401" in (wrong[0].failure or ""), wrong[0]
        # The scrape key for inference: refused there as well (issue 33, finding 3).
        scraping = run_once(
            settings, "x", ProbeMetrics(settings), target, ReplicaKeys(SCRAPE_KEY, SCRAPE_KEY)
        )
        assert not scraping[0].ok and "401" in (scraping[0].failure or ""), scraping[0]
        # /metrics is read with the scrape key: another one there fails kv_pool alone.
        metrics_wrong = run_once(
            settings, "x", ProbeMetrics(settings), target, ReplicaKeys(REPLICA_KEY, other)
        )
        assert [(o.step, o.ok) for o in metrics_wrong] == [
            ("readiness", True),
            ("arithmetic", True),
            ("tool_call", True),
            ("kv_pool", False),
        ], metrics_wrong
