"""OpenAI's error shape for the answers nginx gives itself: the front's (components/render/nginx_conf.py),
its rotation's (components/docker/rotation.py) and the replica guards' (components/docker/replica_guard.py)."""

from __future__ import annotations

import json


def openai_error(message: str, code: str, error_type: str = "invalid_request_error") -> str:
    """OpenAI's error body, compact, for an nginx ``return``.

    >>> openai_error("No.", "nope")
    '{"error":{"message":"No.","type":"invalid_request_error","param":null,"code":"nope"}}'
    """
    body = json.dumps(
        {"error": {"message": message, "type": error_type, "param": None, "code": code}},
        separators=(",", ":"),
        ensure_ascii=False,
    )
    # The body sits in a single-quoted nginx string, where `$` starts a variable.
    if any(ch in body for ch in "'\\$"):
        raise ValueError(f"error body cannot be written into nginx.conf: {body}")
    return body
