"""The measurements, one module each, every one a phase that fills one section of probe-result.json.

:mod:`probe.measure.run` holds the order of a run (``Probe``); :mod:`probe.measure.session` what
the measurements share; :mod:`probe.measure.settings` the settings and the target. The
measurements: :mod:`~probe.measure.server_info` (model, max_model_len, KV pool),
:mod:`~probe.measure.calibration`, :mod:`~probe.measure.single_stream`,
:mod:`~probe.measure.concurrency`, :mod:`~probe.measure.prefix_cache`,
:mod:`~probe.measure.over_limit`, :mod:`~probe.measure.context`, :mod:`~probe.measure.hol`,
:mod:`~probe.measure.spec_decode`.
"""

from probe.measure.run import Probe
from probe.measure.session import percentile
from probe.measure.settings import PHASES, Settings, Target

__all__ = ["PHASES", "Probe", "Settings", "Target", "percentile"]
