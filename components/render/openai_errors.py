"""OpenAI's error shape for the answers nginx gives itself: the front's (components/render/nginx_conf.py),
its rotation's on either target (``no_replica_body``) and the replica guards' (components/render/replica_guard.py)."""

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


def no_replica_body(reason: str) -> str:
    """The JSON 503 the front answers while no replica is in rotation, naming why.

    >>> no_replica_body("box1 failed its gate (arithmetic): got 222")
    '{"error":{"message":"No model replica is serving: box1 failed its gate (arithmetic): got 222","type":"server_error","param":null,"code":"no_replica_in_rotation"}}'
    """
    # The body sits in a single-quoted nginx string: no quote, backslash or `$` may reach it.
    text = reason.replace("'", "\u2019").replace("\\", "/").replace("$", "＄").replace("\n", " ")
    return openai_error(f"No model replica is serving: {text}", "no_replica_in_rotation", "server_error")
