"""When the probe leaves a target alone: its vLLM saturated (requests waiting, or running at
``--max-num-seqs``, while it generates), and for how many runs in a row (:class:`SkipBudget`).

Plain Python, no Pulumi: it runs in the probe container, beside ``service.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.gate.checks import StepOutcome
from components.gate.metrics import parse_samples, total
from components.gate.tls import EndpointTls
from components.semantic_probe.settings import ProbeSettings, ProbeTarget


def saturation(
    settings: ProbeSettings, target: ProbeTarget, key: str | None, progress: dict[tuple[str, str], float]
) -> str | None:
    """Why the target's vLLM is too busy to be probed now (requests waiting, or running at
    ``--max-num-seqs``, while it generates), read from its ``/metrics``; None when it is not, when
    the metrics cannot be read (the run then goes ahead, and its kv_pool step says why), or when it
    generated nothing since the last reading (``progress``: each target's
    ``vllm:generation_tokens_total`` then): a hung engine looks full, and it must be probed."""
    import httpx

    tls = EndpointTls.from_params(target.tls)
    try:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        with httpx.Client(trust_env=False, verify=tls.verify() if tls else True) as client:
            resp = client.get(
                target.metrics_url,
                headers=headers,
                timeout=5.0,
                extensions=tls.extensions(target.metrics_url, target.endpoint) if tls else {},
            )
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    try:
        samples = parse_samples(resp.text)
    except ValueError:
        return None
    waiting = total(samples, "vllm:num_requests_waiting") or 0.0
    running = total(samples, "vllm:num_requests_running") or 0.0
    generated = total(samples, "vllm:generation_tokens_total")
    at = (target.host, target.path)
    before = progress.get(at)
    if generated is not None:
        progress[at] = generated
    if waiting > 0:
        busy = f"{waiting:.0f} request(s) waiting"
    elif settings.max_num_seqs and running >= settings.max_num_seqs:
        busy = f"{running:.0f} running = --max-num-seqs"
    else:
        return None
    if generated is not None and before is not None and generated <= before:
        return None  # busy, yet not one token since the last reading: stalled, not saturated
    return busy


MAX_SKIPS_IN_A_ROW = 2
"""Saturated runs skipped in a row before the probe asks a saturated target all the same."""


@dataclass
class SkipBudget:
    """When a saturated target may be skipped. Skipping spares users at peak, but a target that is
    never idle would never be asked: the last replica in rotation carries every client, and answering
    wrong it would go on serving them (CI: it stayed in for over a minute under a four-client load).
    So at most ``MAX_SKIPS_IN_A_ROW`` runs in a row are skipped, and none after a failed run, so
    that K failed runs in a row (the ejection) are never held off by load."""

    skipped_in_a_row: int = 0
    last_failed: bool = False

    def may_skip(self) -> bool:
        return self.skipped_in_a_row < MAX_SKIPS_IN_A_ROW and not self.last_failed

    def ran(self, outcomes: list[StepOutcome]) -> None:
        """After a run: ``outcomes`` empty for a skipped one (no evidence either way)."""
        if not outcomes:
            self.skipped_in_a_row += 1
            return
        self.skipped_in_a_row = 0
        self.last_failed = not all(o.ok for o in outcomes)
