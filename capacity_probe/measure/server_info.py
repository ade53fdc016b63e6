"""What the server says about itself: the model, max_model_len (``/v1/models``) and the KV pool
(``vllm:cache_config_info``), which every later measurement sizes itself by."""

from __future__ import annotations

from typing import Any

from capacity_probe import vllm_metrics
from capacity_probe.client import ProbeError
from capacity_probe.measure.session import Session


def measure(session: Session) -> None:
    """The served model (a ``ProbeError`` when it is not served), the ``target`` section, the KV pool."""
    _model(session)
    t = session.target
    session.result["target"] = {
        "endpoint": t.endpoint,
        "stack": t.stack,
        "profile": t.profile,
        "label": t.label,
        "model": session.model,
        "max_model_len": session.max_model_len,
        "metrics_url": t.metrics_url,
        "sources": t.sources,
    }
    kv: dict[str, Any] = {}
    session.result["kv_pool"] = kv
    _kv_pool(session, kv)


def _model(session: Session) -> None:
    """The model probed (the one asked for, else the first listed) and its max_model_len."""
    models = session.client.models()
    entry = next((m for m in models if m.get("id") == session.model), models[0])
    if session.model and entry.get("id") != session.model:
        raise ProbeError(
            f"model {session.model!r} is not served; /v1/models lists {[m.get('id') for m in models]}"
        )
    session.model = session.client.model = entry["id"]
    session.max_model_len = int(entry.get("max_model_len") or 0)
    if session.max_model_len <= 0:
        raise ProbeError(f"/v1/models gives no max_model_len for {session.model}: {entry}")
    session.progress(f"model {session.model}, max_model_len {session.max_model_len:,}")


def _kv_pool(session: Session, kv: dict[str, Any]) -> None:
    """The smallest engine's KV pool from ``vllm:cache_config_info``, the scheduler at the start,
    and max_num_seqs from an ``*_info`` label when no flag or stack gave it."""
    snap = session.snapshot()
    if snap is None:
        kv.update(status="skipped", reason=session.metrics_reason())
        return
    pools = snap.kv_pools()
    if not pools:
        kv.update(status="failed", reason=f"no {vllm_metrics.KV_INFO} with num_gpu_blocks/block_size")
        return
    smallest = min(pools, key=lambda p: p["tokens"])
    session.pool = smallest["tokens"]
    kv.update(status="measured", **{k: smallest[k] for k in ("num_gpu_blocks", "block_size", "tokens")})
    kv["engines"] = pools
    kv["prefix_caching"] = smallest.get("enable_prefix_caching")
    kv["pool_over_max_model_len"] = round(session.pool / session.max_model_len, 3)
    kv["scheduler_at_start"] = sched = snap.scheduler()
    kv["spec_decode_metrics"] = snap.has(vllm_metrics.SPEC_DRAFT_TOKENS)
    session.progress(
        f"KV pool {session.pool:,} tokens ({smallest['num_gpu_blocks']:,} blocks × {smallest['block_size']}), "
        f"{kv['pool_over_max_model_len']:.2f}× max_model_len"
    )
    if session.pool < session.max_model_len:
        session.findings.append(
            f"KV pool {session.pool:,} tokens < max_model_len {session.max_model_len:,}: a prompt above the "
            "pool is accepted (HTTP 200) and then waits forever for capacity, blocking the requests "
            "behind it (Ascend seed). Lower --max-num-batched-tokens, raise --gpu-memory-utilization, "
            "drop MTP, or lower --max-model-len to the pool."
        )
    if (sched.get("running") or 0) or (sched.get("waiting") or 0):
        session.notes.append(
            f"The scheduler was not idle at the start (running {sched['running']:g}, waiting "
            f"{sched['waiting']:g}): other traffic mixes with these figures."
        )
    if session.settings.max_num_seqs is None:
        found = snap.info_label("max_num_seqs")
        if found and found.isdigit():
            session.settings.max_num_seqs = int(found)
            session.settings.max_num_seqs_source = "a *_info metric's max_num_seqs label"
