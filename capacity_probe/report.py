"""probe-result.json, probe-report.md and the PNG plots, written into ``--out DIR``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULT_FILE = "probe-result.json"
REPORT_FILE = "probe-report.md"
CONTEXT_PLOT = "probe-context-sweep.png"
CONCURRENCY_PLOT = "probe-concurrency.png"
SIMULATOR_LABEL = "vLLM-protocol simulator (a test double, not a model)"


def subject(result: dict[str, Any]) -> str:
    """What the figures are of, for titles: says so loudly when it is the simulator."""
    target = result.get("target") or {}
    name = target.get("label") or target.get("model") or "?"
    if target.get("is_simulator") and "simulator" not in name.lower():
        return f"{SIMULATOR_LABEL}, serving {name!r}"
    return name


def write_all(result: dict[str, Any], out_dir: Path) -> dict[str, str]:
    """Plots first (the report links them), then the Markdown, then the JSON. Returns file paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    result["plots"] = plots(result, out_dir)
    (out_dir / REPORT_FILE).write_text(markdown(result))
    (out_dir / RESULT_FILE).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    plotted = {name: str(out_dir / file) for name, file in result["plots"].items()}
    return {"result": str(out_dir / RESULT_FILE), "report": str(out_dir / REPORT_FILE), **plotted}


# ---- plots ---------------------------------------------------------------------------------


def plots(result: dict[str, Any], out_dir: Path) -> dict[str, str]:
    """The context sweep and the concurrency curve, when measured and matplotlib is installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        result.setdefault("notes", []).append("No plots: matplotlib is not installed (requirements-dev.txt).")
        return {}
    made = {}
    ctx = result.get("context") or {}
    if ctx.get("attempts"):
        fig = _context_figure(plt, result, ctx)
        fig.savefig(out_dir / CONTEXT_PLOT, dpi=110)
        plt.close(fig)
        made["context_sweep"] = CONTEXT_PLOT
    conc = result.get("concurrency") or {}
    if conc.get("levels"):
        fig = _concurrency_figure(plt, result, conc)
        fig.savefig(out_dir / CONCURRENCY_PLOT, dpi=110)
        plt.close(fig)
        made["concurrency"] = CONCURRENCY_PLOT
    return made


_STYLE = {
    "ok": ("o", "tab:green", "answered"),
    "hang": ("X", "tab:red", "hang (cut at its deadline)"),
    "timeout": ("s", "tab:orange", "timeout (slow, cut)"),
    "rejected": ("D", "tab:purple", "rejected (4xx)"),
    "error": ("v", "black", "error"),
}


def _context_figure(plt: Any, result: dict[str, Any], ctx: dict[str, Any]) -> Any:
    target = result.get("target") or {}
    fig, ax = plt.subplots(figsize=(9, 5.2))
    for outcome, (marker, color, label) in _STYLE.items():
        pts = [a for a in ctx["attempts"] if a["outcome"] == outcome]
        if pts:
            ax.scatter(
                [a["tokens"] for a in pts],
                [a["seconds"] for a in pts],
                marker=marker,
                color=color,
                s=60,
                zorder=3,
                label=f"{label} ({len(pts)})",
            )
    order = sorted(range(len(ctx["attempts"])), key=lambda i: ctx["attempts"][i]["tokens"])
    for rank, i in enumerate(order):
        a = ctx["attempts"][i]
        ax.annotate(str(i + 1), (a["tokens"], a["seconds"]), textcoords="offset points",
                    xytext=(4, 6 if rank % 2 else -12), fontsize=7, color="0.35")  # fmt: skip
    lines = [("max_model_len", target.get("max_model_len"), "tab:blue", "--")]
    pool = (result.get("kv_pool") or {}).get("tokens")
    if pool:
        lines.append(("KV pool", pool, "tab:red", ":"))
    if ctx.get("ceiling_tokens"):
        lines.append(("ceiling (largest pass)", ctx["ceiling_tokens"], "tab:green", "-"))
    for label, x, color, style in lines:
        ax.axvline(x, color=color, linestyle=style, linewidth=1.3, label=f"{label} {x:,}")
    ax.set_xlabel("prompt tokens (unique text; a number = order sent)")
    ax.set_ylabel("seconds until answered or cut")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v / 1000:g}K"))
    cliff = ctx.get("cliff_tokens")
    verdict = f"cliff between {ctx.get('ceiling_tokens', 0):,} and {cliff:,}" if cliff else "no cliff"
    ax.set_title(f"Context sweep: {verdict}\n{subject(result)}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def _concurrency_figure(plt: Any, result: dict[str, Any], conc: dict[str, Any]) -> Any:
    levels = conc["levels"]
    xs = [lv["concurrency"] for lv in levels]
    fig, ax = plt.subplots(figsize=(9, 5.2))
    ax.plot(
        xs, [lv["aggregate_tok_s"] or 0 for lv in levels], "o-", color="tab:blue", label="aggregate tok/s"
    )
    if levels[0]["concurrency"] == 1 and levels[0]["aggregate_tok_s"]:
        ideal = [levels[0]["aggregate_tok_s"] * x for x in xs]
        ax.plot(xs, ideal, ":", color="0.6", label="1 stream × streams (linear scaling)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel(
        f"concurrent streams ({conc.get('max_tokens')} tokens each, {conc.get('rounds')} per stream)"
    )
    ax.set_ylabel("aggregate decode tok/s", color="tab:blue")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    for key, style, label in (
        ("latency_p50_s", "s--", "latency p50"),
        ("latency_p99_s", "^:", "latency p99"),
    ):
        ax2.plot(xs, [lv[key] for lv in levels], style, color="tab:orange", label=label)
    ax2.set_ylabel("request latency, s", color="tab:orange")
    latencies = [lv["latency_p99_s"] or 0 for lv in levels]
    ax2.set_ylim(0, 1.25 * max(latencies) or 1)
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    top = (
        f"up to max_num_seqs {conc['max_num_seqs']}"
        if conc.get("max_num_seqs")
        else "up to 8 (max_num_seqs unknown)"
    )
    ax.set_title(f"Concurrency sweep, {top}\n{subject(result)}", fontsize=10)
    fig.tight_layout()
    return fig


# ---- Markdown ------------------------------------------------------------------------------


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        text = f"{value:,}"
    elif isinstance(value, float):
        text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    else:
        text = str(value)
    return f"{text} {unit}".strip()


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _status(section: dict[str, Any]) -> list[str]:
    if section.get("status", "measured") == "measured":
        return []
    return [f"*{section.get('status')}: {section.get('reason', '')}*", ""]


def markdown(result: dict[str, Any]) -> str:
    t = result.get("target") or {}
    lines = [f"# Capacity and performance probe: {subject(result)}", ""]
    if t.get("is_simulator"):
        lines += [
            "> **From the vLLM-protocol simulator, not a model.** Every figure below is what the "
            "simulator's knobs made it; it says nothing about GLM-5.3-Flash or any hardware.",
            "",
        ]
    b = result.get("budget") or {}
    lines += _table(
        ["", ""],
        [
            ["endpoint", t.get("endpoint")],
            ["stack / profile", f"{t.get('stack') or '–'} / {t.get('profile') or '–'}"],
            ["model", t.get("model")],
            ["max_model_len", _fmt(t.get("max_model_len"))],
            ["started", result.get("started_at")],
            ["load", f"{b.get('requests_sent')} requests in {b.get('seconds_used')} s "
                     f"(budget {b.get('max_requests')} requests, {b.get('time_budget_s'):g} s)"
                     + (f"; stopped: {b['exhausted']}" if b.get("exhausted") else "")],
        ],
    )  # fmt: skip
    lines += ["", "## Findings", ""]
    lines += [f"- {f}" for f in result.get("findings") or []] or ["- none"]
    lines += _kv_section(result) + _context_section(result) + _over_limit_section(result)
    lines += _hol_section(result) + _single_section(result) + _concurrency_section(result)
    lines += _prefix_section(result) + _spec_section(result) + _seed_section(result)
    if result.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def _kv_section(r: dict[str, Any]) -> list[str]:
    kv = r.get("kv_pool") or {}
    lines = ["", "## KV pool", "", *_status(kv)]
    if kv.get("tokens"):
        sched = kv.get("scheduler_at_start") or {}
        lines += _table(
            ["KV pool tokens", "num_gpu_blocks × block_size", "pool / max_model_len", "prefix caching",
             "idle at start (running / waiting)"],
            [[_fmt(kv["tokens"]), f"{kv['num_gpu_blocks']:,} × {kv['block_size']}",
              _fmt(kv.get("pool_over_max_model_len")), _fmt(kv.get("prefix_caching")),
              f"{_fmt(sched.get('running'))} / {_fmt(sched.get('waiting'))}"]],
        )  # fmt: skip
    return lines


def _context_section(r: dict[str, Any]) -> list[str]:
    ctx = r.get("context") or {}
    lines = ["", "## Context ceiling (unique text)", "", *_status(ctx)]
    if ctx.get("attempts"):
        cliff = ctx.get("cliff_tokens")
        lines += [
            f"Ceiling **{_fmt(ctx.get('ceiling_tokens'))} tokens** passes; "
            + (f"**{cliff:,}** fails (bracket {ctx['bracket_tokens']:,} tokens, resolution "
               f"{ctx['resolution_tokens']:,})." if cliff else "no cliff up to max_model_len.")
            + (f" Ceiling / KV pool = {ctx['ceiling_over_kv_pool']}." if ctx.get("ceiling_over_kv_pool") else ""),
            "",
        ]  # fmt: skip
        if r.get("plots", {}).get("context_sweep"):
            lines += [f"![context sweep]({r['plots']['context_sweep']})", ""]
        lines += _table(
            ["#", "prompt tokens", "outcome", "seconds", "deadline s", "scheduler while out", "recovered"],
            [[i + 1, _fmt(a["tokens"]) + ("" if a["measured"] else " (est.)"), a["outcome"], a["seconds"],
              a["deadline_s"], _scheduler(a.get("scheduler_during")), _fmt(a.get("recovered"))]
             for i, a in enumerate(ctx["attempts"])],
        )  # fmt: skip
    return lines


def _scheduler(s: dict[str, Any] | None) -> str:
    if not s:
        return "–"
    return f"running {_fmt(s.get('running'))}, waiting {_fmt(s.get('waiting'))} (capacity {_fmt(s.get('waiting_capacity'))})"


def _over_limit_section(r: dict[str, Any]) -> list[str]:
    o = r.get("over_limit") or {}
    lines = ["", "## Over-limit request", "", *_status(o)]
    if "outcome" in o:
        lines += [
            f"A {_fmt(o['prompt_tokens_estimated'])}-token prompt: {o['outcome']}, HTTP {o['http_status']} "
            f"in {o['seconds']} s; fast 400: {_fmt(o['fast_400'])}; mentions the maximum context length: "
            f"{_fmt(o['mentions_max_context'])}.",
        ]
    return lines


def _hol_section(r: dict[str, Any]) -> list[str]:
    h = r.get("hol") or {}
    lines = ["", "## Head-of-line blocking", "", *_status(h)]
    if "small_seconds" in h:
        lines += _table(
            ["large prefill tokens", "large TTFT s", "2-token request s", "idle 2-token s",
             "prefill left at send s", "blocked"],
            [[_fmt(h["large_prompt_tokens"]), _fmt(h.get("large_ttft_s")), f"{h['small_seconds']} ({h['small_outcome']})",
              h["idle_small_seconds"], _fmt(h.get("prefill_remaining_at_send_s")), _fmt(h.get("blocked"))]],
        )  # fmt: skip
        lines += ["", f"Large request in the engine detected by {h.get('start_detected_by')}."]
    return lines


def _single_section(r: dict[str, Any]) -> list[str]:
    s = r.get("single_stream") or {}
    lines = ["", "## Single stream", "", *_status(s)]
    if s.get("decode_tok_s"):
        lines += [f"Median of {len(s['runs'])} runs of {s['max_tokens']} tokens: **{s['decode_tok_s']} tok/s** "
                  f"decode, TTFT {s['ttft_s']} s."]  # fmt: skip
    return lines


def _concurrency_section(r: dict[str, Any]) -> list[str]:
    c = r.get("concurrency") or {}
    lines = ["", "## Concurrency sweep", "", *_status(c)]
    if c.get("levels"):
        lines += [f"Levels {c['levels_planned']}; max_num_seqs from {c.get('max_num_seqs_source')}.", ""]
        if r.get("plots", {}).get("concurrency"):
            lines += [f"![concurrency]({r['plots']['concurrency']})", ""]
        lines += _table(
            ["streams", "requests", "failed", "aggregate tok/s", "latency p50 s", "latency p99 s", "TTFT p50 s",
             "per-stream tok/s"],
            [[lv["concurrency"], lv["requests"], lv["failed"], _fmt(lv["aggregate_tok_s"]), lv["latency_p50_s"],
              lv["latency_p99_s"], lv["ttft_p50_s"], lv["per_stream_tok_s_p50"]] for lv in c["levels"]],
        )  # fmt: skip
    return lines


def _prefix_section(r: dict[str, Any]) -> list[str]:
    p = r.get("prefix_cache") or {}
    lines = ["", "## Prefix cache", "", *_status(p)]
    if "cold_ttft_s" in p:
        m = p.get("metrics") or {}
        lines += [
            f"Prefix of {_fmt(p['prefix_tokens'])} tokens, sent once cold and twice warm: cold TTFT "
            f"{p['cold_ttft_s']} s, warm {p['warm_ttft_s']} s (×{p['speedup']}); effective: {_fmt(p['effective'])}."
            + (f" Metrics: {_fmt(m.get('hit_tokens'))} of the three requests' {_fmt(m.get('query_tokens'))} "
               f"prompt tokens hit the cache (rate {_fmt(m.get('hit_rate'))}; at most about 2/3 with one cold "
               "request)." if "hit_tokens" in m else f" Metrics: {m.get('skipped')}")
        ]  # fmt: skip
    return lines


def _spec_section(r: dict[str, Any]) -> list[str]:
    s = r.get("spec_decode") or {}
    lines = ["", "## Speculative decoding (MTP)", "", *_status(s)]
    if s.get("acceptance") is not None:
        lines += [f"{_fmt(s['accepted_tokens'])} of {_fmt(s['draft_tokens'])} draft tokens accepted: "
                  f"**{s['acceptance']:.1%}**, mean acceptance length {_fmt(s.get('mean_acceptance_length'))}."]  # fmt: skip
    return lines


def _seed_section(r: dict[str, Any]) -> list[str]:
    sc = r.get("seed_comparison") or {}
    lines = ["", "## Against the seed's figures", ""]
    if not sc.get("figures"):
        return [*lines, f"*{sc.get('reason', 'no comparison')}*"]
    lines += [f"Seed: {sc['source']}. Ratio = measured / seed.", ""]
    lines += _table(
        ["figure", "seed", "measured", "ratio", "better is", "note"],
        [[f["label"], _fmt(f["seed"], f["unit"]), _fmt(f["measured"], f["unit"]), _fmt(f["ratio"]),
          "higher" if f["higher_is_better"] else "lower", f["note"]] for f in sc["figures"]],
    )  # fmt: skip
    return lines
