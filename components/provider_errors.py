"""Failures a dynamic provider reports as a message for the operator, not as a Python traceback.

Pulumi's Python dynamic-provider host turns any exception into ``traceback.format_exc()`` (the
SDK's ``pulumi/dynamic/__main__.py``), so a failed gate would print three screens of frames around
one useful sentence. An :class:`OperatorError` is reported as its message alone: the host process
runs only this project's providers, and any other exception keeps its full traceback.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any


class OperatorError(Exception):
    """What failed, what was observed and what to do: reported without a traceback."""


def _format_exc(
    limit: int | None = None, chain: bool = True, *, _original: Any = traceback.format_exc
) -> str:
    err = sys.exc_info()[1]
    if isinstance(err, OperatorError):
        return str(err)
    return str(_original(limit, chain))


def report_plainly() -> None:
    """Make this process's dynamic-provider host print an :class:`OperatorError` as its message."""
    traceback.format_exc = _format_exc
