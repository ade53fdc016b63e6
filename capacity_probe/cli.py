"""``python -m capacity_probe``: flags, where the target comes from, the run, the files, the exit status.

Exit status: 0 the probe ran and found nothing wrong; 1 it ran and has findings (a context cliff
below max_model_len, a KV pool smaller than max_model_len, an over-limit request that is not a fast
400, head-of-line blocking, failures under load); 2 it could not run (no endpoint, no key, the
front refused).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from capacity_probe import report, seeds
from capacity_probe.client import Budget, ProbeClient, ProbeError, Progress
from capacity_probe.measure import PHASES, Probe, Settings, Target
from capacity_probe.pulumi_stack import PulumiStack, StackError, StackInfo


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m capacity_probe",
        description="Post-deploy capacity and performance probe of a GLM-5.3-Flash vLLM stack (docs/capacity-probe.md).",
    )
    where = p.add_argument_group("target (--stack, or --endpoint with --api-key-env; explicit flags win)")
    where.add_argument("--stack", help="Pulumi stack: endpoint, API key, Prometheus URL and profile from it")
    where.add_argument("--pulumi", default="pulumi", help="Pulumi CLI command (e.g. scripts/pulumi.sh)")
    where.add_argument("--key-name", help="client name in glm:apiKeys (default: the first, sorted)")
    where.add_argument("--endpoint", help="the front's OpenAI base URL, e.g. http://host:8080/v1")
    where.add_argument(
        "--api-key-env", metavar="VAR", help="environment variable holding the API key (never a flag)"
    )
    where.add_argument("--metrics-url", help="vLLM /metrics, or Prometheus /federate?match[]=...")
    where.add_argument(
        "--profile", help=f"hardware profile for the seed comparison ({', '.join(seeds.with_figures())})"
    )
    where.add_argument("--model", help="served model name (default: the first in /v1/models)")
    where.add_argument("--label", help="what to call the target in titles (default: the model name)")

    load = p.add_argument_group("load bounds")
    load.add_argument("--time-budget", type=float, default=1800.0, help="seconds for the whole run")
    load.add_argument("--max-requests", type=int, default=500, help="requests for the whole run")
    load.add_argument("--request-timeout", type=float, default=60.0, help="base per-request deadline, s")
    load.add_argument(
        "--min-prefill-tps", type=float, default=1000.0, help="deadline += prompt tokens / this"
    )
    load.add_argument("--phases", default=",".join(PHASES), help=f"subset of {','.join(PHASES)}")

    knobs = p.add_argument_group("measurements")
    knobs.add_argument("--context-steps", type=int, default=8)
    knobs.add_argument("--context-resolution", type=int, help="tokens (default max(256, max_model_len/64))")
    knobs.add_argument(
        "--hol-prompt-tokens", type=int, help="default 90%% of the context ceiling, at most 120,000"
    )
    knobs.add_argument("--hol-delay", type=float, default=0.5, help="s, when metrics cannot show the start")
    knobs.add_argument("--decode-tokens", type=int, default=256)
    knobs.add_argument("--single-runs", type=int, default=3)
    knobs.add_argument("--sweep-tokens", type=int, default=128)
    knobs.add_argument("--sweep-rounds", type=int, default=2)
    knobs.add_argument("--max-num-seqs", type=int, help="top of the concurrency sweep")
    knobs.add_argument("--max-concurrency", type=int, default=64)
    knobs.add_argument("--prefix-tokens", type=int)
    knobs.add_argument(
        "--metrics-lag",
        type=float,
        help="s for counters to reach the metrics URL (default 0; 20 for /federate)",
    )
    p.add_argument("--out", default="out/probe", help="directory for the result, report and plots")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def resolve(args: argparse.Namespace) -> tuple[Target, str | None, int | None]:
    """The target, the API key and max_num_seqs, from the stack and/or the flags."""
    info, sources = StackInfo(), {}
    if args.stack:
        info = PulumiStack(args.stack, args.pulumi).read(args.key_name)
        sources = {
            k: f"stack {args.stack}" for k in ("endpoint", "metrics_url", "profile") if getattr(info, k)
        }
        if info.key_name:
            sources["api_key"] = f"glm:apiKeys.{info.key_name} of stack {args.stack}"
    endpoint = args.endpoint or info.endpoint
    if not endpoint:
        raise ProbeError("no endpoint: give --stack STACK or --endpoint URL (the front's .../v1)")
    endpoint = endpoint.rstrip("/")
    if not endpoint.endswith("/v1"):
        endpoint += "/v1"
    api_key = info.api_key
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ProbeError(f"--api-key-env {args.api_key_env}: that environment variable is empty or unset")
        sources["api_key"] = f"${args.api_key_env}"
    for name in ("endpoint", "metrics_url", "profile"):
        if getattr(args, name):
            sources[name] = "flag"
    target = Target(
        endpoint=endpoint,
        metrics_url=args.metrics_url or info.metrics_url,
        profile=args.profile or info.profile,
        stack=args.stack,
        label=args.label,
        sources=sources,
    )
    return target, api_key, args.max_num_seqs or info.max_num_seqs


def settings_from(args: argparse.Namespace, target: Target, max_num_seqs: int | None) -> Settings:
    phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        raise ProbeError(f"--phases: unknown {unknown}; known: {','.join(PHASES)}")
    lag = args.metrics_lag
    if lag is None:
        lag = 20.0 if target.metrics_url and "/federate" in target.metrics_url else 0.0
    source = ""
    if max_num_seqs:
        source = "--max-num-seqs" if args.max_num_seqs else "the stack's vllmFlags"
    return Settings(
        request_timeout=args.request_timeout,
        min_prefill_tps=args.min_prefill_tps,
        context_steps=args.context_steps,
        context_resolution=args.context_resolution,
        hol_prompt_tokens=args.hol_prompt_tokens,
        hol_delay=args.hol_delay,
        decode_tokens=args.decode_tokens,
        single_runs=args.single_runs,
        sweep_tokens=args.sweep_tokens,
        sweep_rounds=args.sweep_rounds,
        max_num_seqs=max_num_seqs,
        max_num_seqs_source=source,
        max_concurrency=args.max_concurrency,
        prefix_tokens=args.prefix_tokens,
        metrics_lag=lag,
        phases=phases,
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    progress = Progress(args.quiet)
    try:
        target, api_key, max_num_seqs = resolve(args)
        settings = settings_from(args, target, max_num_seqs)
    except (ProbeError, StackError) as exc:
        print(f"probe: {exc}", file=sys.stderr)
        return 2
    budget = Budget(args.time_budget, args.max_requests)
    client = ProbeClient(target.endpoint, api_key, budget, model=args.model, metrics_url=target.metrics_url)
    if not target.metrics_url:
        progress("no --metrics-url: the KV pool, scheduler snapshots and metric deltas are skipped")
    try:
        result = Probe(client, target, settings, progress).run()
    except ProbeError as exc:
        print(f"probe: {exc}", file=sys.stderr)
        return 2
    finally:
        client.close()
    result["seed_comparison"] = seeds.compare(target.profile, result)
    files = report.write_all(result, Path(args.out))
    progress(f"wrote {', '.join(files.values())}")
    for finding in result["findings"]:
        progress(f"finding: {finding}")
    return 1 if result["findings"] else 0
