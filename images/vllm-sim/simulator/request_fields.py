"""The request fields that decide a request's shape, read as vLLM's pydantic models read them.

vLLM's request models are pydantic models in lax mode (``OpenAIBaseModel``, no ``strict``), so
``"stream": 1`` and ``"stream": "true"`` stream, and a value pydantic cannot read is FastAPI's
``RequestValidationError``: a 400 whose ``type`` is ``"Bad Request"`` (not ``BadRequestError``)
and whose ``param`` is the field's dotted location (``body.stream``), or the ``parameter`` of a
``VLLMValidationError`` raised by a model validator (vLLM 0.25.0
``vllm/entrypoints/serve/utils/server_utils.py:488-524``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import overload

from simulator.config import Config
from simulator.errors import HTTPError

_TRUE = frozenset({"1", "t", "y", "on", "yes", "true"})
_FALSE = frozenset({"0", "f", "n", "no", "off", "false"})
_INT = re.compile(r"[+-]?\d+")


class FieldError(Exception):
    """One pydantic error: its type, location (without ``body``), message and input."""

    def __init__(self, kind: str, loc: tuple, msg: str, value: object):
        super().__init__(msg)
        self.error = {"type": kind, "loc": ("body", *loc), "msg": msg, "input": value}


def lax_bool(value: object, loc: tuple) -> bool | None:
    """pydantic's lax ``bool | None``: true/1/"yes"/"on"/..., false/0/"no"/"off"/..., None.

    >>> lax_bool("Yes", ("stream",)), lax_bool(0, ("stream",)), lax_bool(None, ("stream",))
    (True, False, None)
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise _bool_parsing(loc, value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        raise _bool_parsing(loc, value)
    raise FieldError("bool_type", loc, "Input should be a valid boolean", value)


def _bool_parsing(loc: tuple, value: object) -> FieldError:
    return FieldError(
        "bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value
    )


def lax_int(value: object, loc: tuple) -> int:
    """pydantic's lax ``int``: ``3``, ``"3"``, ``3.0`` and ``true`` are ints; ``3.5`` is not."""
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, float):
        msg = "Input should be a valid integer, got a number with a fractional part"
        raise FieldError("int_from_float", loc, msg, value)
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        return int(value.strip())
    if isinstance(value, str):
        msg = "Input should be a valid integer, unable to parse string as an integer"
        raise FieldError("int_parsing", loc, msg, value)
    raise FieldError("int_type", loc, "Input should be a valid integer", value)


def validation_error(errors: list, param: str | None = None) -> HTTPError:
    """FastAPI's RequestValidationError as vLLM answers it (``str(exc)`` then ``str(errors)``;
    FastAPI's endpoint context after the errors is left out)."""
    count = len(errors)
    text = f"{count} validation error{'s' if count != 1 else ''}:\n" + "".join(f"  {e}\n" for e in errors)
    param = param or ".".join(str(p) for p in errors[0]["loc"])
    return HTTPError(400, f"{text.rstrip()} {errors}", "Bad Request", param)


@dataclass(frozen=True)
class StreamShape:
    """``stream`` and ``stream_options`` as vLLM reads them."""

    stream: bool
    include_usage: bool
    continuous_usage: bool


def stream_shape(body: dict, force_include_usage: bool = False) -> StreamShape:
    """``stream`` and ``stream_options``, or the 400 vLLM gives for them.

    vLLM's ``validate_stream_options`` is a ``mode="before"`` model validator: it looks at the raw
    JSON values' truthiness, before pydantic coerces them (vLLM 0.25.0
    ``completion/protocol.py:470-479``, ``chat_completion/protocol.py:732-741``). So
    ``"stream": "false"`` with ``stream_options`` passes it and then does not stream, while
    ``"stream": 0`` with ``stream_options`` is refused. Usage is included when
    ``include_usage`` is true; continuous usage only together with it; both always with
    ``--enable-force-include-usage`` (``serve/utils/api_utils.py:276-288``, ``should_include_usage``).
    """
    raw_options = body.get("stream_options")
    if raw_options and not body.get("stream"):
        msg = "Stream options can only be defined when `stream=True`. (parameter=stream_options)"
        error = {"type": "value_error", "loc": ("body",), "msg": f"Value error, {msg}", "input": body}
        raise validation_error([error], "stream_options")
    errors, stream, options = [], None, {}
    try:
        stream = lax_bool(body.get("stream"), ("stream",))
    except FieldError as exc:
        errors.append(exc.error)
    if raw_options is not None and not isinstance(raw_options, dict):
        msg = "Input should be a valid dictionary or instance of StreamOptions"
        error = {"type": "model_type", "loc": ("body", "stream_options"), "msg": msg, "input": raw_options}
        errors.append({**error, "ctx": {"class_name": "StreamOptions"}})
    for name in ("include_usage", "continuous_usage_stats"):
        if isinstance(raw_options, dict):
            try:
                options[name] = lax_bool(raw_options.get(name), ("stream_options", name))
            except FieldError as exc:
                errors.append(exc.error)
    if errors:
        raise validation_error(errors)
    if force_include_usage:
        return StreamShape(bool(stream), True, True)
    include_usage = bool(options.get("include_usage"))
    return StreamShape(
        bool(stream), include_usage, include_usage and bool(options.get("continuous_usage_stats"))
    )


def choices_n(body: dict, chat: bool) -> int:
    """``n``: a lax int (``n: int = 1`` for completions, ``int | None = 1`` for chat), then
    ``SamplingParams._verify_args`` (vLLM 0.25.0 ``sampling_params.py:506-517``) and, for greedy
    sampling (``temperature`` < 1e-5), ``_verify_greedy_sampling`` (``:489-495``, ``:623-625``).
    Those are ValueErrors: 400 ``BadRequestError`` with ``param`` null."""
    value = body.get("n", 1)
    if value is None and chat:
        return 1
    try:
        n = lax_int(value, ("n",))
    except FieldError as exc:
        raise validation_error([exc.error]) from None
    if n < 1:
        raise HTTPError(400, f"n must be at least 1, got {n}.", "BadRequestError")
    temperature = body.get("temperature")
    if n > 1 and isinstance(temperature, (int, float)) and temperature < 1e-5:
        raise HTTPError(400, f"n must be 1 when using greedy sampling, got {n}.", "BadRequestError")
    return n


def completion_prompts(body: dict) -> list:
    """``/v1/completions``' ``prompt`` as the list of prompts vLLM runs, each a string or a list of
    token ids: a string, a list of strings, a list of ids or a list of id lists (vLLM 0.25.0
    ``completion/protocol.py:50-56``); empty is refused (``:481-497``)."""
    prompt = body.get("prompt")
    if prompt is None or prompt == "":
        msg = "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)"
        error = {"type": "value_error", "loc": ("body",), "msg": f"Value error, {msg}", "input": body}
        raise validation_error([error], "prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(_is_id(t) for t in prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return list(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(p, list) and all(_is_id(t) for t in p) for p in prompt)
    ):
        return list(prompt)
    error = {
        "type": "union_type",
        "loc": ("body", "prompt"),
        "msg": "Input should be a valid prompt",
        "input": prompt,
    }
    raise validation_error([error])


def _is_id(token: object) -> bool:
    return isinstance(token, int) and not isinstance(token, bool) and token >= 0


@overload
def output_budget(cfg: Config, n_prompt: int, requested: int, param: str) -> int: ...
@overload
def output_budget(cfg: Config, n_prompt: int, requested: None, param: str) -> None: ...
@overload
def output_budget(cfg: Config, n_prompt: int, requested: int | None, param: str) -> int | None: ...
def output_budget(cfg: Config, n_prompt: int, requested: int | None, param: str) -> int | None:
    """The tokens a request may generate (None: as many as planned), or vLLM's 400 for its length.

    Up to vLLM 0.31 the prompt may use only what ``max_tokens`` leaves of ``--max-model-len``
    (0.25.0 ``renderers/params.py:196-202``, ``:428-450``: prompt + max_tokens > max_model_len is
    refused). From 0.32 on the prompt may fill the whole context and ``max_tokens`` is clamped to
    what is left (0.33.0 ``renderers/params.py:225-236``, ``:531-551``;
    ``serve/utils/api_utils.py`` ``get_max_tokens``). Both refuse ``max_tokens`` > max_model_len
    (0.25.0 ``renderers/params.py:215-228``), and nothing left to generate is
    ``max_tokens must be at least 1`` (``sampling_params.py:571-576``). The tokenizer stops one
    token past the limit, hence "at least".
    """
    limit, old = cfg.max_model_len, cfg.version_tuple < (0, 32, 0)
    if requested is not None and requested > limit:
        total = f"max_total_tokens={limit}" if old else str(limit)
        raise _refused(
            f"{param}={requested} cannot be greater than max_model_len={total}. "
            f"Please request fewer output tokens. (parameter={param}, value={requested})",
            param,
        )
    max_input = limit - (requested or 0) if old else limit
    if n_prompt > max_input:
        count = min(n_prompt, max_input + 1)
        at_least = "at least " if count == max_input + 1 else ""
        if old:
            detail = (
                f"you requested {requested or 0} output tokens and your prompt contains "
                f"{at_least}{count} input tokens, for a total of {at_least}{count + (requested or 0)} "
                "tokens. Please reduce the length of the input prompt or the number of requested "
                "output tokens."
            )
        else:
            detail = (
                f"your prompt contains {at_least}{count} input tokens, which exceeds this limit even "
                "without any output tokens. Please reduce the length of the input prompt."
            )
        raise _refused(
            f"This model's maximum context length is {limit} tokens. However, {detail} "
            f"(parameter=input_tokens, value={count})",
            "input_tokens",
        )
    left = limit - n_prompt
    if left < 1:
        raise _refused(
            f"max_tokens must be at least 1, got {left}. (parameter=max_tokens, value={left})", "max_tokens"
        )
    return None if requested is None else min(requested, left)


def _refused(message: str, param: str) -> HTTPError:
    """A ``VLLMValidationError`` from the renderer: ``create_error_response`` makes it a 400
    ``BadRequestError`` with the error's parameter (0.25.0 ``serve/utils/error_response.py:16-39``)."""
    return HTTPError(400, message, "BadRequestError", param)


def cache_salt(body: dict) -> str | None:
    """vLLM's ``cache_salt``: a string keeps the request's prefix apart from other salts'."""
    salt = body.get("cache_salt")
    return salt if isinstance(salt, str) and salt else None
