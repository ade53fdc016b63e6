"""The semantic probe's entrypoint: ``python -m components.semantic_probe``.

    python -m components.semantic_probe --params params.json --api-key-file key          # serve
    python -m components.semantic_probe --params params.json --api-key-file key --once   # one run

Serving: ``/metrics`` on the params' port and, for each target (the front path, every replica), a
run every ``interval_seconds`` until SIGTERM.
``--once``: one run per target, its steps as JSON on stdout; exit 0 when every step passed, else 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from components.semantic_probe.service import ProbeMetrics, run_forever, run_once, serve_metrics
from components.semantic_probe.settings import ProbeSettings, ReplicaKeys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m components.semantic_probe", description=__doc__)
    parser.add_argument("--params", type=Path, required=True, help="params.json rendered by the program")
    parser.add_argument("--api-key-file", type=Path, required=True, help="file holding the probe's API key")
    parser.add_argument("--once", action="store_true", help="one run, results on stdout, then exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s semantic-probe %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per run is enough
    settings = ProbeSettings.from_json(args.params.read_text())
    api_key = args.api_key_file.read_text().strip()
    # The replica key only where replicas are asked directly (several hosts); the scrape key also
    # where the front path's /metrics is behind the pods' guards (Kubernetes).
    replica_keys = (
        ReplicaKeys(
            Path(settings.replica_key_file).read_text().strip() if settings.replica_key_file else "",
            Path(settings.scrape_key_file).read_text().strip(),
        )
        if settings.scrape_key_file
        else None
    )
    metrics = ProbeMetrics(settings)
    if args.once:
        results = {}
        for target in settings.targets:
            outcomes = run_once(settings, api_key, metrics, target, replica_keys)
            results[f"{target.path}:{target.host}"] = [dataclasses.asdict(o) for o in outcomes]
        print(json.dumps(results, indent=2))
        return 0 if all(o["ok"] for run in results.values() for o in run) else 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    serve_metrics(metrics, settings.port)
    logging.info(
        "probing %s every %g s (K=%d), /metrics on :%d",
        ", ".join(f"{t.path} {t.host} ({t.endpoint})" for t in settings.targets),
        settings.interval_seconds,
        settings.failures_before_alert,
        settings.port,
    )
    observe = None
    if settings.requests_dir:
        from components.semantic_probe.ejection import Ejector

        k = settings.failures_before_alert
        observe = Ejector(Path(settings.requests_dir), k, k, metrics)
    run_forever(settings, api_key, metrics, stop, replica_keys=replica_keys, observe=observe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
