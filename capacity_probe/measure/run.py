"""The run: the measurements in order, each a phase that fills its section of probe-result.json.

Order of a run: what the server says about itself (``/v1/models``, the KV pool), token calibration,
the cheap load (single stream, concurrency sweep, prefix cache), then the phases that may hang the
engine (over-limit request, context search, head-of-line blocking), and last the speculative
decoding counters over the whole run. Every phase keeps what it measured when the budget runs out
mid-way (``status: incomplete``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from capacity_probe import PROBE_VERSION
from capacity_probe.client import BudgetExhausted, ProbeError
from capacity_probe.measure import (
    calibration,
    concurrency,
    context,
    hol,
    over_limit,
    prefix_cache,
    server_info,
    single_stream,
    spec_decode,
)
from capacity_probe.measure.run_settings import NEEDS_TOKENS, PHASES
from capacity_probe.measure.session import Session

MEASUREMENTS: dict[str, Callable[[Session, dict[str, Any]], None]] = {
    "single_stream": single_stream.measure,
    "concurrency": concurrency.measure,
    "prefix_cache": prefix_cache.measure,
    "over_limit": over_limit.measure,
    "context": context.measure,
    "hol": hol.measure,
}
"""The phases that send load (``PHASES``), each by its measurement."""


class Probe(Session):
    """One run against one target: ``Probe(client, target, settings, progress).run()``."""

    def run(self) -> dict[str, Any]:
        """Every phase in order; probe-result.json's content (less the seed comparison)."""
        started = datetime.now(UTC)
        self.result = {"probe_version": PROBE_VERSION, "started_at": started.isoformat(timespec="seconds")}
        server_info.measure(self)
        spec_before = self.snapshot()
        for name, measure in MEASUREMENTS.items():
            if name in NEEDS_TOKENS and name in self.settings.phases and self.tokens is None:
                if "calibration" not in self.result:
                    self._phase("calibration", calibration.measure)
                if self.tokens is None:
                    reason = self.result["calibration"].get("reason", "")
                    self.result[name] = {"status": "skipped", "reason": f"no token calibration: {reason}"}
                    continue
            self._phase(name, measure)
        self._phase("spec_decode", lambda session, out: spec_decode.measure(session, out, spec_before))
        self._account()
        self.result["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        self.result["findings"] = self.findings
        self.result["notes"] = self.notes
        return self.result

    def _phase(self, name: str, measure: Callable[[Session, dict[str, Any]], None]) -> None:
        """Fill the section ``name`` with one measurement; an error or the budget's end is its status."""
        if name in PHASES and name not in self.settings.phases:
            self.result[name] = {"status": "skipped", "reason": "not selected (--phases)"}
            return
        out: dict[str, Any] = {"status": "measured"}
        self.result[name] = out
        try:
            measure(self, out)
        except BudgetExhausted as exc:
            out["status"] = "incomplete" if len(out) > 1 else "skipped"
            out["reason"] = f"load budget: {exc}"
            self.progress(f"{name}: stopped, {exc}")
        except ProbeError as exc:
            out["status"], out["reason"] = "failed", str(exc)
            self.progress(f"{name}: failed, {exc}")

    def _account(self) -> None:
        """The load budget's section, and the notes on a cut-short run and on a simulator's figures."""
        budget = self.client.budget
        self.result["budget"] = {
            "time_budget_s": budget.seconds,
            "max_requests": budget.max_requests,
            "requests_sent": budget.requests,
            "seconds_used": round(budget.elapsed(), 1),
            "exhausted": budget.exhausted,
        }
        if budget.exhausted:
            self.notes.append(
                f"The load budget ran out ({budget.exhausted}): the phases marked incomplete or skipped were "
                "cut short; raise --time-budget / --max-requests for a full probe."
            )
        self.result["target"]["is_simulator"] = self.client.saw_simulator
        if self.client.saw_simulator:
            self.notes.insert(
                0,
                "The answers carry the vLLM-protocol simulator's filler text: these figures come from "
                "a test double's knobs, not from a model or real hardware.",
            )
