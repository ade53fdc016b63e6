"""Stack configs as a test makes them: a profile and overrides."""

from __future__ import annotations

from typing import Any

from components.config import build_stack_config, deep_merge
from tests.conftest import TEST_HOST_KEY

HOST = {
    "hosts": [
        {"name": "gpu01", "dockerHost": "ssh://deploy@gpu01.example.internal", "hostKey": TEST_HOST_KEY}
    ]
}


PLAIN_HTTP_ACCEPTED = {"front": {"allowPlainHttp": True}}
"""The hardware profiles bind the front to 0.0.0.0; the stack files opt in to plain HTTP, so do these."""


def make(hardware: str, **overrides: Any):
    return build_stack_config(
        {"hardware": hardware, "target": HOST, **deep_merge(PLAIN_HTTP_ACCEPTED, overrides)}
    )
