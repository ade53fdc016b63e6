"""The smoke gate from a command line, without Pulumi: the same checks ``pulumi up`` runs.

    GLM_API_KEY=sk-… GLM_METRICS_KEY=sk-… python -m components.gate \\
        --endpoint http://127.0.0.1:8080/v1 --api-key-env GLM_API_KEY \\
        --metrics-url http://127.0.0.1:8080/metrics --metrics-key-env GLM_METRICS_KEY

Prints each step as it passes (stderr) and the results as JSON (stdout). Exit status: 0 when every
step passed, 1 when a step failed (the message names it), 2 for a usage error. With
``--verdict-file`` the run also leaves its verdict where a guard reads it: the file removed when every
step passed, written (the failure's message) when one did not or the run broke.

With ``--every SECONDS`` (a Kubernetes pod's gate sidecar: components/kubernetes/readiness.py) it
runs the checks again and again, one run every that many seconds, until its SIGTERM: each run leaves
its verdict and touches ``--checked-file``, and a verdict that changed is printed. The pod's
readiness probe only reads those two files, so no Python starts per check.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from components.gate.checks import REQUEST_TIMEOUT_SECONDS, GateFailure, run_gate
from components.gate.settings import ALL_SMOKE_STEPS
from components.gate.tls import EndpointTls

LOOK_AT = {
    "logs": "the command that shows the serving container's log (default: docker logs)",
    "running": "the command that lists what runs, the front among it (default: docker ps)",
    "inspect": "the command that shows the serving container as it runs, its argv among it "
    "(default: docker inspect)",
}
"""The gate's ``look_at`` parameter (``LookAt.params``) as ``--look-at-<name>`` options."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m components.gate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--endpoint", required=True, help="the front's OpenAI base URL, ending in /v1")
    parser.add_argument(
        "--api-key-env", required=True, metavar="VAR", help="environment variable that holds the API key"
    )
    parser.add_argument(
        "--metrics-url",
        help="the front's /metrics route, vLLM's own /metrics or a Prometheus /federate; else kv_pool is skipped",
    )
    parser.add_argument(
        "--metrics-key-env",
        metavar="VAR",
        help="environment variable that holds a metrics key (glm:metricsKeys) for the front's route",
    )
    parser.add_argument("--served-name", help="expected served model name (default: the first one listed)")
    parser.add_argument(
        "--max-model-len", type=int, help="expected max_model_len (default: what /v1/models reports)"
    )
    parser.add_argument(
        "--steps", default=",".join(ALL_SMOKE_STEPS), help="comma list of steps (default: all, in order)"
    )
    parser.add_argument("--deadline-seconds", type=float, default=300.0, help="readiness deadline (300)")
    parser.add_argument(
        "--request-timeout", type=float, default=REQUEST_TIMEOUT_SECONDS, help="per-request limit (120)"
    )
    parser.add_argument(
        "--verdict-file",
        type=Path,
        metavar="PATH",
        help="removed when every step passed, written otherwise: a Kubernetes pod's guard answers no "
        "inference while it exists (components/kubernetes/readiness.py)",
    )
    parser.add_argument(
        "--every",
        type=float,
        metavar="SECONDS",
        help="with --verdict-file and --checked-file: run the checks every SECONDS until SIGTERM",
    )
    parser.add_argument(
        "--checked-file",
        type=Path,
        metavar="PATH",
        help="with --every: touched when each run ends (a readiness probe tells a stuck loop by its age)",
    )
    parser.add_argument(
        "--tls-name",
        help="an https endpoint reached by an address its certificate does not name: the name to "
        "send and verify instead (glm:front.tlsName)",
    )
    parser.add_argument(
        "--tls-ca-file",
        type=Path,
        help="with --tls-name: trust the PEM certificates in this file alone (glm:front.tlsCaCertificate); "
        "default: the system's CAs",
    )
    look_at = parser.add_argument_group(
        "where a failure sends you", "the serving container's target's own commands: all three, or none"
    )
    for name, what in LOOK_AT.items():
        look_at.add_argument(f"--look-at-{name}", metavar="COMMAND", help=what)
    # glm:smoke's questions and answer; unset: its defaults (13x17 -> 221, the weather in Paris).
    parser.add_argument("--prompt", help="the arithmetic question (glm:smoke.prompt)")
    parser.add_argument("--expected-answer", help="its exact answer (glm:smoke.expectedAnswer)")
    parser.add_argument("--tool-prompt", help="the tool-call question (glm:smoke.toolPrompt)")
    parser.add_argument(
        "--chat-template-kwargs",
        type=json.loads,
        default={"reasoning_effort": "low"},
        help='JSON sent with every chat (default: {"reasoning_effort": "low"})',
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    api_key = os.environ.get(args.api_key_env)
    if not api_key:
        print(f"error: ${args.api_key_env} is empty or unset: it must hold the API key", file=sys.stderr)
        return 2
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    if unknown := [s for s in steps if s not in ALL_SMOKE_STEPS]:
        print(f"error: unknown steps {unknown}; known: {', '.join(ALL_SMOKE_STEPS)}", file=sys.stderr)
        return 2
    look_at = {name: value for name in LOOK_AT if (value := getattr(args, f"look_at_{name}")) is not None}
    if look_at and len(look_at) < len(LOOK_AT):
        print(f"error: give all of {', '.join(f'--look-at-{n}' for n in LOOK_AT)}, or none", file=sys.stderr)
        return 2
    if args.every is not None and (args.every <= 0 or args.verdict_file is None or args.checked_file is None):
        print("error: --every takes seconds > 0, with --verdict-file and --checked-file", file=sys.stderr)
        return 2
    params = _params(args, steps, look_at)
    metrics_key = os.environ.get(args.metrics_key_env) if args.metrics_key_env else None

    def check(progress: Callable[[str], None]) -> tuple[str, dict[str, Any] | None]:
        """One run: its verdict ("" when every step passed, recorded) and results. A run that broke
        is recorded so, then raised; in the loop (``--every``) it is that run's verdict instead."""
        verdict, results = "the gate's run broke before it finished", None
        try:
            results = run_gate(params, api_key, progress, metrics_key)
            verdict = ""
        except GateFailure as failure:
            verdict = str(failure)
        except Exception as broke:
            verdict = f"the gate's run broke before it finished: {broke!r}"
            if args.every is None:
                raise
        finally:
            if args.verdict_file is not None:
                record_verdict(args.verdict_file, verdict)
        return verdict, results

    if args.every is not None:
        check_every(args.every, check, args.verdict_file, args.checked_file)  # never returns
    verdict, results = check(lambda line: print(f"[smoke-gate] {line}", file=sys.stderr, flush=True))
    if verdict:
        print(verdict, file=sys.stderr)
        return 1
    print(json.dumps(results, indent=2, sort_keys=True))
    return 0


def _params(args: argparse.Namespace, steps: list[str], look_at: dict[str, str]) -> dict[str, Any]:
    """``run_gate``'s parameters from the command line."""
    params: dict[str, Any] = {
        "endpoint": args.endpoint,
        "metrics_url": args.metrics_url,
        "served_name": args.served_name,
        "max_model_len": args.max_model_len,
        "smoke": {
            "steps": steps,
            "deadline_seconds": args.deadline_seconds,
            "request_timeout_seconds": args.request_timeout,
            "chat_template_kwargs": args.chat_template_kwargs,
            **{
                key: value
                for key, value in (
                    ("prompt", args.prompt),
                    ("expected_answer", args.expected_answer),
                    ("tool_prompt", args.tool_prompt),
                )
                if value is not None
            },
        },
    }
    if look_at:
        params["look_at"] = look_at
    if args.tls_name:
        ca_file = args.tls_ca_file
        params["tls"] = EndpointTls(
            server_name=args.tls_name,
            ca=ca_file.read_text() if ca_file else None,
            trust=f"the certificates in {ca_file}" if ca_file else "the system's CAs",
            fix="Look at: --tls-name and --tls-ca-file (the stack's glm:front.tlsName and "
            "glm:front.tlsCaCertificate).",
        ).params()
    return params


NOT_PASSED_YET = "no check has passed yet"


def check_every(
    seconds: float,
    check: Callable[[Callable[[str], None]], tuple[str, Any]],
    verdict_file: Path,
    checked_file: Path,
) -> NoReturn:
    """Run ``check`` every ``seconds`` (from one run's start to the next), until SIGTERM: the verdict
    stands as "not passed yet" until the first run ends; each run touches ``checked_file`` as it
    ends. Only a changed verdict is printed: the log tells when the pod turned, not every pass."""
    record_verdict(verdict_file, NOT_PASSED_YET)
    shown = NOT_PASSED_YET
    while True:
        started = time.monotonic()
        verdict, _ = check(lambda _line: None)
        checked_file.touch()
        if verdict != shown:
            print(verdict or "[smoke-gate] every check passed", file=sys.stderr, flush=True)
            shown = verdict
        time.sleep(max(0.0, started + seconds - time.monotonic()))


def record_verdict(path: Path, failure: str) -> None:
    """``failure`` empty: every step passed, the file goes; else the file holds it (a new file moved
    into place, so a reader never sees half of one)."""
    if not failure:
        path.unlink(missing_ok=True)
        return
    partial = path.with_name(f".{path.name}.new")
    partial.write_text(failure + "\n")
    partial.replace(path)


if __name__ == "__main__":
    sys.exit(main())
