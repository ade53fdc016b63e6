"""The gate's steps after readiness, each a function of the :class:`~components.gate.run.GateRun`,
and :data:`STEPS`, the one table of steps (readiness first).

Each step fails on its own with a :class:`GateFailure` that says which step, what came back and
what to look at; a reply of the wrong shape is such a failure too, never a crash.

Kept whole past 400 lines: :data:`STEPS` is the one table of steps, and each step stands beside it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from components.gate.messages import (
    GateFailure,
    describe,
    excerpt,
    kind,
    kv_pool_message,
    mentions,
    thinking_disabled,
)
from components.gate.metrics import Sample, kv_pools, parse_samples
from components.gate.readiness import FIRST_POLL_SECONDS, POLL_BACKOFF, wait_ready
from components.gate.run import GateRun
from components.gate.transport import Overrun, within

STREAM_MAX_TOKENS = 32
KV_METRICS_WAIT_SECONDS = 60.0
"""How long kv_pool waits for vllm:cache_config_info to appear (a Prometheus /federate has nothing
until its first scrape of a new vLLM; vLLM's own /metrics has it at once)."""
MIN_STREAM_CHUNKS = 3
MIN_STREAM_SPREAD = 0.3
"""First-to-last chunk span as a fraction of the request: unbuffered SSE is ~0.9, buffered ~0.
A fast engine after a slow first token is ~0 as well (the real vLLM 0.25.0 on an H200: first chunk
at 0.822 s, 32 chunks by 0.870 s), so a small spread alone does not mean buffering: see bursts."""
BURST_GAP_SECONDS = 0.0005
"""Chunks closer than this came in one read: a buffering front hands the client the whole reply at
once (one or two reads, the chunks microseconds apart); a streaming one, a read per token (the H200's
fast engine: a chunk every ~1.5 ms)."""
WRONG_KEY = "sk-smoke-gate-deliberately-wrong-key"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}},
            "required": ["city"],
        },
    },
}
STREAM_PROMPT = "Count from 1 to 20, one number per line."
NOT_THE_FRONT = (
    "Look at: is the endpoint the front of this stack's vLLM (not another server or a proxy that "
    "rewrites replies)?"
)


def stream_bursts(arrivals: list[float]) -> int:
    """How many separate arrivals the chunks came in (gaps over ``BURST_GAP_SECONDS``).

    >>> stream_bursts([0.8220, 0.8221, 0.8222, 0.8700])
    2
    """
    gaps = sum(1 for a, b in pairwise(arrivals) if b - a > BURST_GAP_SECONDS)
    return gaps + 1 if arrivals else 0


def stream_spread(arrivals: list[float], total: float) -> float:
    """First-to-last chunk span as a fraction of the whole request (0 when all came at once).

    >>> stream_spread([0.1, 0.5, 0.9], 1.0)
    0.8
    """
    if len(arrivals) < 2 or total <= 0:
        return 0.0
    return round((max(arrivals) - min(arrivals)) / total, 3)


def check_models(run: GateRun) -> None:
    url = f"{run.endpoint}/models"
    status, raw = run.transport.request("models", "GET", url, key=run.api_key)
    if status != 200:
        raise GateFailure("models", f"{url} answered {status}: {excerpt(raw.decode(errors='replace'))}")
    body = run.transport.json_body("models", url, status, raw)
    models = body.get("data") if isinstance(body, dict) else None
    if not isinstance(models, list):
        raise GateFailure("models", f"{url} has no `data` list: {excerpt(body)}")
    ids = [m.get("id") for m in models if isinstance(m, dict)]
    if run.served_name is None and ids:  # the command line without --served-name: take the first
        run.served_name = str(ids[0])
    entry = next((m for m in models if isinstance(m, dict) and m.get("id") == run.served_name), None)
    if entry is None:
        raise GateFailure(
            "models",
            f"{url} lists {ids}, not the served name {run.served_name!r}. Look at: "
            f"--served-model-name in the argv ({mentions(run.flags, '--served-model-name')}) and "
            "glm:model.servedName; is the front pointed at the right vLLM?",
        )
    reported = entry.get("max_model_len")
    if run.max_model_len is None and isinstance(reported, int):
        run.max_model_len = reported
    if reported != run.max_model_len:
        raise GateFailure(
            "models",
            f"{run.served_name!r} reports max_model_len {reported} but the stack configures "
            f"{run.max_model_len} (glm:serving.maxModelLen). Look at: the running container's "
            f"argv ({run.look_at.inspect}): an old container, or vLLM capped the length.",
        )
    run.results["model_root"] = entry.get("root")


def chat_body(run: GateRun, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": run.served_name,
        "messages": messages,
        "max_tokens": run.max_tokens,
        "temperature": 0,
        **extra,
    }
    if run.template_kwargs:
        body["chat_template_kwargs"] = run.template_kwargs
    return body


def _chat(run: GateRun, step: str, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    url = f"{run.endpoint}/chat/completions"
    status, raw = run.transport.request(step, "POST", url, key=run.api_key, body=body)
    if status != 200:
        hint = ""
        if status == 400:
            hint = " A 400 means vLLM rejected a field: look at glm:smoke.chatTemplateKwargs and the parser flags."
        elif status >= 500:
            hint = f" Look at: {run.look_at.logs} (engine error?)."
        raise GateFailure(step, f"{url} answered {status}: {excerpt(raw.decode(errors='replace'))}.{hint}")
    data = run.transport.json_body(step, url, status, raw)
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        what = (
            f"choices[0].message is {kind(message)}, not an object"
            if isinstance(choice, dict) and message is not None
            else "no object at choices[0].message"
        )
        raise GateFailure(
            step,
            f"{url} answered 200 with {what}: {excerpt(data)}. vLLM answers a chat with "
            f"choices[0].message as an object. {NOT_THE_FRONT}",
        )
    for key in ("content", "reasoning", "reasoning_content"):
        value = message.get(key)
        if value is not None and not isinstance(value, str):
            raise GateFailure(
                step,
                f"{url} answered 200 with message.{key} as {kind(value)}, not a string: "
                f"{excerpt(value)}. vLLM sends the answer as one string. {NOT_THE_FRONT}",
            )
    return choice, message  # type: ignore[return-value]  # choice is a dict once message is


def check_arithmetic(run: GateRun) -> None:
    choice, message = _chat(run, "arithmetic", chat_body(run, [{"role": "user", "content": run.prompt}]))
    content = message.get("content") or ""
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    finish = choice.get("finish_reason")
    if "<think>" in content or "</think>" in content:
        raise GateFailure(
            "arithmetic",
            f"the reasoning came back inline in `content` ({excerpt(content)!r}) instead of "
            "`message.reasoning`/`reasoning_content`. Look at: --reasoning-parser (argv has "
            f"{mentions(run.flags, '--reasoning-parser')}; GLM-5.3 needs glm45) and the "
            "vLLM version's reasoning parsers.",
        )
    if content.strip() != run.expected:
        where = (
            f"the reasoning used up max_tokens={run.max_tokens}: lower "
            "glm:smoke.chatTemplateKwargs.reasoning_effort"
            if finish == "length"
            else "the weights (glm:model), the image's patches and the chat template"
        )
        raise GateFailure(
            "arithmetic",
            f"asked {run.prompt!r}, expected content {run.expected!r} exactly (after trimming), got "
            f"{excerpt(content)!r} (finish_reason={finish}). Look at: {where}.",
        )
    if not reasoning and not thinking_disabled(run.template_kwargs):
        raise GateFailure(
            "arithmetic",
            "the answer is right but no reasoning came back in `message.reasoning` or "
            f"`message.reasoning_content` (message keys: {sorted(message)}). Look at: "
            f"--reasoning-parser (argv has {mentions(run.flags, '--reasoning-parser')}).",
        )
    run.results["reasoning_field"] = (
        "reasoning" if message.get("reasoning") else "reasoning_content" if reasoning else None
    )


def check_tool_call(run: GateRun) -> None:
    body = chat_body(
        run, [{"role": "user", "content": run.tool_prompt}], tools=[WEATHER_TOOL], tool_choice="auto"
    )
    choice, message = _chat(run, "tool_call", body)
    finish = choice.get("finish_reason")
    calls = message.get("tool_calls") or []
    where = (
        f"Look at: --enable-auto-tool-choice and --tool-call-parser (argv has "
        f"{mentions(run.flags, '--enable-auto-tool-choice', '--tool-call-parser')}; GLM-5.3 needs glm47)."
    )
    if not isinstance(calls, list):
        raise GateFailure(
            "tool_call", f"message.tool_calls is {kind(calls)}, not a list: {excerpt(calls)}. {where}"
        )
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            what = f"tool_calls[{i}]" + (".function" if isinstance(call, dict) else "")
            value = function if isinstance(call, dict) else call
            raise GateFailure(
                "tool_call",
                f"{what} is {kind(value)}, not an object {{name, arguments}}: {excerpt(call)}. {where}",
            )
    if finish != "tool_calls" or not calls:
        raise GateFailure(
            "tool_call",
            f"asked {run.tool_prompt!r} with a get_weather tool and tool_choice auto: "
            f"finish_reason={finish}, {len(calls)} tool_calls, content "
            f"{excerpt(message.get('content') or '', 200)!r}. {where}",
        )
    call = next((c for c in calls if c["function"].get("name") == "get_weather"), None)
    if call is None:
        names = [c["function"].get("name") for c in calls]
        raise GateFailure("tool_call", f"tool_calls name {names}, not get_weather. {where}")
    arguments = call["function"].get("arguments")
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("city"), str) or not parsed["city"]:
        raise GateFailure(
            "tool_call",
            f"get_weather arguments are not a JSON object with a `city` string: {excerpt(arguments)!r}. {where}",
        )


def check_kv_pool(run: GateRun) -> None:
    if not run.metrics_url:
        run.skipped["kv_pool"] = (
            "no metrics_url: vLLM's /metrics is blocked at the front and vLLM's private port is "
            "not reachable from the Pulumi host; pass SmokeTest(metrics_url=...) to check it"
        )
        run.progress(f"kv_pool: skipped ({run.skipped['kv_pool']})")
        return
    # vLLM's own /metrics has the pool at once; a Prometheus /federate URL has nothing until
    # its first scrape of the new vLLM: wait for that a bounded while, polling like readiness.
    waited_until = time.monotonic() + KV_METRICS_WAIT_SECONDS
    interval = min(FIRST_POLL_SECONDS, run.poll)
    while True:
        status, raw = run.transport.request(
            "kv_pool", "GET", run.metrics_url, key=run.metrics_key, timeout=min(30.0, run.timeout)
        )
        text = raw.decode(errors="replace")
        if status != 200:
            raise GateFailure("kv_pool", f"{run.metrics_url} answered {status}: {excerpt(text)}")
        pools = kv_pools(_samples(run.metrics_url, text))
        if pools or time.monotonic() >= waited_until:
            break
        time.sleep(interval)
        interval = min(run.poll, interval * POLL_BACKOFF)
    if not pools:
        raise GateFailure(
            "kv_pool",
            f"{run.metrics_url} has no vllm:cache_config_info with num_gpu_blocks and block_size: "
            f"{excerpt(text, 200)!r}. Look at: is metrics_url vLLM's /metrics (or a Prometheus "
            "/federate of it)?",
        )
    if run.max_model_len is None:
        raise GateFailure("kv_pool", "max_model_len is unknown: run the models step or pass it")
    smallest = min(pools, key=lambda p: p["tokens"])
    run.results["kv_pool_tokens"] = smallest["tokens"]
    run.results["kv_block_size"] = smallest["block_size"]
    run.results["kv_num_gpu_blocks"] = smallest["num_gpu_blocks"]
    if smallest["tokens"] < run.max_model_len:
        raise GateFailure("kv_pool", kv_pool_message(smallest, run.max_model_len, run.flags))


def _samples(metrics_url: str, text: str) -> list[Sample]:
    try:
        return parse_samples(text)
    except ValueError as err:
        raise GateFailure(
            "kv_pool",
            f"{metrics_url} answered 200 with a body that is not Prometheus text ({err}): "
            f"{excerpt(text, 200)!r}. Look at: is metrics_url vLLM's /metrics (or a Prometheus "
            "/federate of it)?",
        ) from None


def check_front_auth(run: GateRun) -> None:
    url = f"{run.endpoint}/models"
    for label, key in (("without a key", None), ("with a wrong key", WRONG_KEY)):
        status, raw = run.transport.request("front_auth", "GET", url, key=key)
        if status != 401:
            raise GateFailure(
                "front_auth",
                f"GET {url} {label} answered {status}, expected 401: "
                f"{excerpt(raw.decode(errors='replace'), 200)!r}. The API is open to anyone who "
                "can reach the port. Look at: the front's key map (glm:apiKeys) and that the "
                "endpoint is the front, not vLLM's own port.",
            )


STREAM_TRIES = 3
"""A bunched stream is asked again (up to this many times) before the gate calls the front
buffering: a fast engine read by a busy machine (the gate's process descheduled for longer than the
engine's whole decode, 48 ms on the H200) bunches too, once; a buffering front bunches every time."""


def check_streaming(run: GateRun) -> None:
    url = f"{run.endpoint}/chat/completions"
    body = chat_body(
        run, [{"role": "user", "content": STREAM_PROMPT}], stream=True, max_tokens=STREAM_MAX_TOKENS
    )
    for attempt in range(1, STREAM_TRIES + 1):
        arrivals, total_seconds = _one_stream(run, url, body)
        spread, bursts = stream_spread(arrivals, total_seconds), stream_bursts(arrivals)
        run.results["stream_chunks"] = len(arrivals)
        run.results["stream_spread"] = spread
        run.results["stream_bursts"] = bursts
        run.results["stream_tries"] = attempt
        if spread >= MIN_STREAM_SPREAD or bursts >= max(MIN_STREAM_CHUNKS, len(arrivals) // 4):
            return
    raise GateFailure(
        "streaming",
        f"{len(arrivals)} chunks arrived bunched in each of {STREAM_TRIES} streams; the last: first "
        f"at {min(arrivals):.3f} s, last at {max(arrivals):.3f} s of {total_seconds:.3f} s (spread "
        f"{spread:.0%} < {MIN_STREAM_SPREAD:.0%}), in {bursts} burst(s) of chunks less than "
        f"{BURST_GAP_SECONDS * 1000:g} ms apart. The front buffers SSE: clients see nothing until the "
        "end. Look at: `proxy_buffering off` and `proxy_http_version 1.1` in the front's nginx.conf.",
    )


def _one_stream(run: GateRun, url: str, body: dict[str, Any]) -> tuple[list[float], float]:
    """One streamed chat: when each chunk arrived, and the whole time; a stream that times out,
    breaks, ends without ``[DONE]`` or carries too few chunks fails the step at once."""
    import httpx

    arrivals: list[float] = []
    started = time.monotonic()
    try:
        done = within(
            run.timeout, lambda: run.transport.read_stream(url, run.api_key, body, arrivals, started)
        )
    except (Overrun, httpx.TimeoutException):
        raise GateFailure(
            "streaming",
            f"the SSE stream from {url} did not finish within {run.timeout:g} s "
            f"({len(arrivals)} chunks so far). Look at: the front's proxy_read_timeout and "
            f"{run.look_at.log_of}.",
        ) from None
    except httpx.HTTPError as err:
        raise GateFailure("streaming", f"the SSE stream from {url} broke: {describe(err)}") from None
    total_seconds = time.monotonic() - started
    if not done:
        raise GateFailure("streaming", f"the SSE stream from {url} ended without `data: [DONE]`.")
    if len(arrivals) < MIN_STREAM_CHUNKS:
        raise GateFailure(
            "streaming",
            f"only {len(arrivals)} content/reasoning chunks arrived (need ≥ {MIN_STREAM_CHUNKS}) for "
            f"max_tokens={STREAM_MAX_TOKENS}. Look at: the front's proxy_buffering and gzip settings.",
        )
    return arrivals, total_seconds


def note_vllm_version(run: GateRun) -> None:
    """``/version`` beside metrics_url: vLLM's own, or the front's for metrics keys."""
    if not run.metrics_url or not urlsplit(run.metrics_url).path.rstrip("/").endswith("/metrics"):
        run.results["vllm_version"] = None
        run.results["vllm_version_source"] = (
            "unknown: /version is not served through the front and no vLLM metrics_url was given"
        )
        return
    parts = urlsplit(run.metrics_url)
    url = urlunsplit((parts.scheme, parts.netloc, "/version", "", ""))
    version = run.transport.version(url)
    run.results["vllm_version"] = version
    run.results["vllm_version_source"] = url if version else f"unknown: {url} did not answer a version"


STEPS: dict[str, Callable[[GateRun], None]] = {
    "readiness": wait_ready,
    "models": check_models,
    "arithmetic": check_arithmetic,
    "tool_call": check_tool_call,
    "kv_pool": check_kv_pool,
    "front_auth": check_front_auth,
    "streaming": check_streaming,
}
"""Each step's check, readiness (the wait) first: the one table of steps."""
