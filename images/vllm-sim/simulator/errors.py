"""Error replies, in vLLM's (OpenAI's) shape: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations


class HTTPError(Exception):
    """An error reply: the handler sends it as ``error_body`` with its status."""

    def __init__(self, status: int, message: str, err_type: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param


def error_body(status: int, message: str, err_type: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def engine_failure() -> dict:
    """What vLLM answers when its engine fails (the 'http-500' and 'stream-error' faults)."""
    return error_body(500, "EngineCore encountered an issue.", "InternalServerError")


def bad_request(message: str, param: str | None = None) -> HTTPError:
    return HTTPError(400, message, "BadRequestError", param)
