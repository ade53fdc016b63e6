"""One run of the gate: its parameters as values, its client, and its results as they accrue.

The steps (``steps.py``, ``readiness.py``) read and fill a :class:`GateRun`; ``checks.py`` builds one
from the resource inputs (or the command line's) and runs the steps in order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from components.gate.messages import LookAt, Progress
from components.gate.settings import SmokeConfig
from components.gate.tls import EndpointTls
from components.gate.transport import REQUEST_TIMEOUT_SECONDS, Transport

CHAT_MAX_TOKENS = 1024
"""Room for the reasoning at low effort plus the answer; a truncated answer fails with the reason."""
FASTEST_STEADY_POLL_SECONDS = 0.25
"""Readiness polls every 50 ms at first, backing off to the smaller of this and pollSeconds: the gate
sees readiness about 0.13 s after it happens, at 4 requests a second while the weights load."""


def plain(value: Any) -> Any:
    """Inputs as values: numbers come back from the engine as floats (``131072.0``); dicts sorted.

    >>> plain({"b": 131072.0, "a": [1.0, 0.5, True]})
    {'a': [1, 0.5, True], 'b': 131072}
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): plain(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class GateRun:
    """The parameters of one run, its :class:`Transport`, and what the steps found."""

    def __init__(
        self, params: Mapping[str, Any], api_key: str, progress: Progress, metrics_key: str | None = None
    ) -> None:
        p = plain(dict(params))
        smoke = {**SmokeConfig().model_dump(), **(p.get("smoke") or {})}
        self.endpoint = str(p["endpoint"]).rstrip("/")
        self.metrics_url: str | None = p.get("metrics_url") or None
        # Both known from the stack; the command line may leave them to what /v1/models lists.
        self.served_name: str | None = str(p["served_name"]) if p.get("served_name") else None
        self.max_model_len: int | None = int(p["max_model_len"]) if p.get("max_model_len") else None
        # The serving container's flags (ServingSpec.flags), for the failure messages.
        self.flags: dict[str, str | bool] = {
            str(k): v if v is True else str(v) for k, v in (p.get("flags") or {}).items()
        }
        # What the failures name to see the serving container: its target's own commands.
        self.look_at = LookAt.of(p)
        # Where the serving container runs (components/gate/container.py): its log while loading.
        self.watch_spec: dict[str, Any] | None = p.get("container_watch") or None
        self.prompt = str(smoke["prompt"])
        self.expected = str(smoke["expected_answer"])
        self.tool_prompt = str(smoke["tool_prompt"])
        self.template_kwargs = dict(smoke["chat_template_kwargs"] or {})
        self.steps = list(smoke["steps"])
        self.deadline = float(smoke["deadline_seconds"])
        self.poll = min(float(smoke["poll_seconds"]), FASTEST_STEADY_POLL_SECONDS)
        self.timeout = float(smoke.get("request_timeout_seconds", REQUEST_TIMEOUT_SECONDS))
        self.max_tokens = int(smoke.get("max_tokens") or CHAT_MAX_TOKENS)
        self.api_key = api_key
        self.metrics_key = metrics_key
        self.progress = progress
        self.latency_ms: dict[str, float] = {}
        self.skipped: dict[str, str] = {}
        self.results: dict[str, Any] = {}
        tls = EndpointTls.from_params(p.get("tls"))
        self.transport = Transport(
            self.endpoint, self.look_at, self.timeout, tls, self.metrics_url, metrics_key
        )
        self.start = time.monotonic()

    def timed(self, step: str, fn: Callable[[GateRun], None]) -> None:
        """Run ``step`` and note how long it took, unless it skipped itself."""
        started = time.monotonic()
        fn(self)
        if step in self.skipped:  # the step decided it cannot run here (e.g. kv_pool without metrics)
            return
        self.latency_ms[step] = round((time.monotonic() - started) * 1000, 1)
        self.progress(f"{step}: ok in {self.latency_ms[step]:g} ms")
