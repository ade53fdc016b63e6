"""Where the end-to-end runs keep the simulator's weights."""

from __future__ import annotations

from pathlib import Path

WEIGHTS = Path("/var/lib/glm53-local/models/GLM-5.3-Flash-sim")
