"""The measurements, one module each, every one a phase that fills one section of probe-result.json.

:mod:`capacity_probe.measure.run` holds the order of a run (``Probe``); :mod:`capacity_probe.measure.session` what
the measurements share; :mod:`capacity_probe.measure.run_settings` the settings and the target. The
measurements: :mod:`~capacity_probe.measure.server_info` (model, max_model_len, KV pool),
:mod:`~capacity_probe.measure.calibration`, :mod:`~capacity_probe.measure.single_stream`,
:mod:`~capacity_probe.measure.concurrency`, :mod:`~capacity_probe.measure.prefix_cache`,
:mod:`~capacity_probe.measure.over_limit`, :mod:`~capacity_probe.measure.context`, :mod:`~capacity_probe.measure.hol`,
:mod:`~capacity_probe.measure.spec_decode`.
"""

from capacity_probe.measure.run import Probe
from capacity_probe.measure.run_settings import PHASES, Settings, Target
from capacity_probe.measure.session import percentile

__all__ = ["PHASES", "Probe", "Settings", "Target", "percentile"]
