"""The probe's half of ejection and return (issue 23; the front's half: components/docker/rotation_requests.py).

After K failed runs in a row of a replica asked directly, the probe writes
``eject <replica> <since> <text>`` (``since``: when the streak began)
to ``<replica>.req`` in the requests directory it shares with the front, and again on every further
failed run (the front does nothing for a replica already out). After M passed runs in a row it
writes ``readmit <replica>`` once: the front re-admits it only if the probe ejected it. The front
path is never ejected: it is not one replica. Each file is written whole, then renamed into place,
so the front never reads half a request.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from components.gate.checks import StepOutcome
from components.semantic_probe.service import ProbeMetrics
from components.semantic_probe.settings import REPLICA_PATH, ProbeTarget

log = logging.getLogger("semantic-probe")
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:,()=/+-]")


@dataclass
class Ejector:
    """Counts each replica's runs in a row and writes the requests (a ``RunObserver``)."""

    directory: Path
    failures_to_eject: int
    """K: failed runs in a row before the replica leaves the rotation."""
    passes_to_readmit: int
    """M: passed runs in a row before it comes back."""
    metrics: ProbeMetrics | None = None
    """Where ``glm_semantic_probe_replica_ejected{host}`` is set (the dashboard's rotation panel)."""
    failed: dict[str, int] = field(default_factory=dict)
    since: dict[str, int] = field(default_factory=dict)
    """When each replica's current streak of failed runs began (epoch seconds, rounded down): the
    front ejects only a replica admitted before it, so failures of the container a roll replaced
    never eject the new one."""
    passed: dict[str, int] = field(default_factory=dict)

    def __call__(self, target: ProbeTarget, outcomes: list[StepOutcome]) -> None:
        if target.path != REPLICA_PATH:
            return
        host = target.host
        bad = [o for o in outcomes if not o.ok]
        if bad:
            self.passed[host] = 0
            self.failed[host] = self.failed.get(host, 0) + 1
            if self.failed[host] == 1:
                self.since[host] = int(time.time() - sum(o.seconds for o in outcomes))
            if self.failed[host] >= self.failures_to_eject:
                first = bad[0]
                text = (
                    f"the semantic probe took {host} out: {first.step} failed "
                    f"{self.failed[host]} runs in a row: {first.failure or ''}"
                )
                self.request(host, f"eject {host} {self.since[host]} {_UNSAFE.sub(' ', text)[:400]}")
                if self.metrics is not None:
                    self.metrics.ejected.labels(host).set(1)
            return
        self.failed[host] = 0
        self.passed[host] = self.passed.get(host, 0) + 1
        if self.passed[host] == self.passes_to_readmit:
            self.request(host, f"readmit {host}")
            if self.metrics is not None:
                self.metrics.ejected.labels(host).set(0)

    def request(self, host: str, line: str) -> None:
        staging = self.directory / f".{host}.tmp"
        staging.write_text(line + "\n")
        os.replace(staging, self.directory / f"{host}.req")
        log.info("rotation request: %s", line[:120])
