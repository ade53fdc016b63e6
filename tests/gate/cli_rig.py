"""The gate's command line run as a program."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import PROJECT
from tests.gate.support import KEY


def gate_cli(*args: str, key: str | None = KEY) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GATE_TEST_KEY"}
    if key is not None:
        env["GATE_TEST_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "components.gate", "--api-key-env", "GATE_TEST_KEY", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
