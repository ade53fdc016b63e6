"""``main``: the command line read, the start-up played, the port served until SIGTERM/SIGINT.

Exit status as ``vllm serve``'s: 2 for a bad command line or environment, 1 for a start-up
failure (or a port it cannot bind), 0 after a stop.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from simulator import startup, strict_flags
from simulator.config import Config, UsageError, env_bool, parse_config
from simulator.engine import Engine
from simulator.routes import ROUTES
from simulator.server import SimServer
from simulator.startup import log


def main(argv: list | None = None) -> int:
    """``vllm serve``: the exit status (2: bad command line, 1: start-up failure, 0: stopped)."""
    argv = sys.argv[1:] if argv is None else argv
    if env_bool(dict(os.environ), "VLLM_SIM_STRICT_FLAGS"):
        # The real parser's table (scripts/vllm_flags.py): vLLM refuses what it does not know.
        refused = strict_flags.strict_check(list(argv), strict_flags.known_flags())
        if refused:
            sys.stderr.write(f"{strict_flags.USAGE}\nvllm serve: error: {refused}\n")
            return 2
    try:
        cfg = parse_config(argv)
    except UsageError as exc:
        sys.stderr.write(f"vllm serve: error: {exc}\n")
        return 2
    if cfg.crash_after_seconds > 0:
        startup.crash_after(cfg.crash_after_seconds)

    stop = threading.Event()
    servers: list = []
    _stop_on_signals(cfg, stop, servers)
    _announce(cfg)
    status = _load(cfg, stop)
    if status is not None:
        return status
    try:
        server = SimServer((cfg.host, cfg.port), ROUTES, cfg, Engine(cfg, stop), stop)
    except OSError as exc:
        sys.stderr.write(f"ERROR: cannot bind {cfg.host}:{cfg.port}: {exc}\n")
        return 1
    servers.append(server)
    if stop.is_set():
        server.server_close()
        return 0
    _serve(cfg, server, stop)
    return 0


def _stop_on_signals(cfg: Config, stop: threading.Event, servers: list) -> None:
    """SIGTERM/SIGINT: stop loading, or stop the server (``servers`` holds it once it is bound)."""

    def on_signal(signum: int, _frame: Any) -> None:
        server = servers[0] if servers else None
        if server is None or cfg.shutdown_timeout <= 0:
            stop.set()  # in-flight requests are cut, as vLLM does without --shutdown-timeout
        if server is not None:
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _load(cfg: Config, stop: threading.Event) -> int | None:
    """The simulated load: None once loaded, else the exit status (1: a start-up failure, 0: stopped)."""
    if cfg.never_ready:
        log("VLLM_SIM_NEVER_READY: the port will never be bound", cfg.quiet)
        stop.wait()
        return 0
    if cfg.loading_seconds > 0:
        log(
            f"loading weights (simulated) for {cfg.loading_seconds:g} s; "
            f"port {cfg.port} refuses connections meanwhile",
            cfg.quiet,
        )
    # vLLM's start-up milestones over the load (all at once without one); a start-up failure
    # strikes at its stage and exits 1, as the engine does.
    loaded = startup.play_startup(
        cfg, cfg.loading_seconds, cfg.shards, cfg.start_failure, stop, quiet=cfg.quiet
    )
    if cfg.start_failure and not stop.is_set():
        return 1
    return None if loaded else 0


def _announce(cfg: Config) -> None:
    """What the simulator is and what it was started with, before the start-up milestones."""
    log(f"vLLM-protocol simulator (a test double, NOT a model) speaking vLLM {cfg.version}", cfg.quiet)
    log(
        f"model={cfg.model!r} served_model_name={cfg.served_names} "
        f"max_model_len={cfg.max_model_len} max_num_seqs={cfg.max_num_seqs} "
        f"block_size={cfg.block_size}",
        cfg.quiet,
    )
    if cfg.ignored:
        log("ignoring flags the simulator does not model: " + " ".join(cfg.ignored), cfg.quiet)
    if cfg.faults:
        log(f"faults injected: {sorted(cfg.faults)}", cfg.quiet)


def _serve(cfg: Config, server: SimServer, stop: threading.Event) -> None:
    """Serve until a signal stops the server; drain with ``--shutdown-timeout``."""
    log(f"Starting vLLM API server 0 on http://{cfg.host}:{server.server_address[1]}", cfg.quiet)
    if not cfg.quiet:
        sys.stderr.write("INFO:     Application startup complete.\n")
        sys.stderr.flush()
    try:
        server.serve_forever(poll_interval=0.1)
        if cfg.shutdown_timeout > 0:
            log(
                f"draining: new connections refused, in-flight requests get {cfg.shutdown_timeout:g} s",
                cfg.quiet,
            )
            server.drain(cfg.shutdown_timeout)
    finally:
        stop.set()
        server.server_close()
        if not cfg.quiet:
            sys.stderr.write("INFO:     Shutting down\n")
