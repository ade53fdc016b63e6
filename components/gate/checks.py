"""The gate's checks, in plain Python (no Pulumi): does the model answer through the front door?

In order (SPEC §4): readiness (refused connections and 502/503/504 mean "still loading"),
``models``, ``arithmetic``, ``tool_call``, ``kv_pool``, ``front_auth`` and ``streaming``. Each step
fails on its own with a :class:`GateFailure` that says which step, what came back and what to look
at; a reply of the wrong shape is such a failure too, never a crash.

:func:`run_gate` is what the dynamic provider (``components/gate/resource.py``), the command line
(``python -m components.gate``) and the tests call.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from components.gate.container import ContainerWatch, start_watch
from components.gate.metrics import Sample, kv_pools, parse_samples, total
from components.gate.settings import ALL_SMOKE_STEPS, SmokeConfig
from components.gate.sse import DONE, MalformedChunk, chunk_deltas, chunk_error, delta_text, sse_events
from components.gate.tls import EndpointTls

REQUEST_TIMEOUT_SECONDS = 120.0
"""Upper bound for one gate request (a chat at low reasoning effort answers in seconds)."""
CHAT_MAX_TOKENS = 1024
"""Room for the reasoning at low effort plus the answer; a truncated answer fails with the reason."""
STREAM_MAX_TOKENS = 32
PROGRESS_EVERY_SECONDS = 10.0
PROBE_READ_TIMEOUT_SECONDS = 10.0
"""Upper bound of one readiness request, body included (and never past the gate's deadline)."""
FIRST_POLL_SECONDS = 0.05
FASTEST_STEADY_POLL_SECONDS = 0.25
"""Readiness polls every 50 ms at first, backing off to the smaller of this and pollSeconds: the gate
sees readiness about 0.13 s after it happens, at 4 requests a second while the weights load."""
POLL_BACKOFF = 1.5
EXCERPT_CHARS = 300
KV_METRICS_WAIT_SECONDS = 60.0
"""How long kv_pool waits for vllm:cache_config_info to appear (a Prometheus /federate has nothing
until its first scrape of a new vLLM; vLLM's own /metrics has it at once)."""
MIN_STREAM_CHUNKS = 3
MIN_STREAM_SPREAD = 0.3
"""First-to-last chunk span as a fraction of the request: unbuffered SSE is ~0.9, buffered ~0."""
RETRY_STATUSES = frozenset({429, 502, 503, 504})
"""Readiness keeps polling on these: 502/503/504 while vLLM loads, 429 if the front rate-limits the poll."""
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

Progress = Callable[[str], None]
T = TypeVar("T")


class GateFailure(Exception):
    """One gate step failed; ``message`` says what came back and what to look at."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"smoke gate failed at step '{step}': {message}")
        self.step = step
        self.message = message


class Overrun(Exception):
    """A request was still unanswered, or its body still arriving, when its time was up."""


def stderr_progress(line: str) -> None:
    """Progress for the operator: ``pulumi.log`` in a dynamic provider only writes to stderr anyway."""
    print(f"[smoke-gate] {line}", file=sys.stderr, flush=True)


# ---- small pure helpers -------------------------------------------------------------------


def plain(value: Any) -> Any:
    """Inputs as values: numbers come back from the engine as floats (``131072.0``); dicts sorted.

    >>> plain({"b": 131072.0, "a": [1.0, 0.5, True]})
    {'a': [1, 0.5, True], 'b': 131072}
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): plain(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def excerpt(text: Any, limit: int = EXCERPT_CHARS) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def kind(value: Any) -> str:
    """What a JSON value is, in the words of a failure message.

    >>> kind([{"type": "text", "text": "221"}]), kind("x"), kind(None)
    ('a list', 'a string', 'null')
    """
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def mentions(flags: Mapping[str, str | bool], *names: str) -> str:
    """How the serving container sets these flags, for a failure message.

    >>> mentions({"--tool-call-parser": "glm47", "--enable-auto-tool-choice": True},
    ...          "--enable-auto-tool-choice", "--tool-call-parser")
    '--enable-auto-tool-choice, --tool-call-parser=glm47'
    >>> mentions({}, "--reasoning-parser")
    'none of --reasoning-parser'
    """
    found = [n if flags[n] is True else f"{n}={flags[n]}" for n in names if n in flags]
    return ", ".join(found) if found else "none of " + ", ".join(names)


def thinking_disabled(chat_template_kwargs: Mapping[str, Any]) -> bool:
    """Whether the request turns GLM's thinking off (then no separate reasoning is expected)."""
    kw = chat_template_kwargs
    return (
        kw.get("enable_thinking") is False
        or kw.get("thinking") is False
        or str(kw.get("reasoning_effort", "")).lower() == "none"
    )


def stream_spread(arrivals: list[float], total: float) -> float:
    """First-to-last chunk span as a fraction of the whole request (0 when all came at once).

    >>> stream_spread([0.1, 0.5, 0.9], 1.0)
    0.8
    """
    if len(arrivals) < 2 or total <= 0:
        return 0.0
    return round((max(arrivals) - min(arrivals)) / total, 3)


def kv_pool_message(pool: dict[str, Any], max_model_len: int, flags: Mapping[str, str | bool]) -> str:
    """Why a KV pool below max_model_len must not ship, and which flags move it (Ascend seed)."""
    gmu = flags.get("--gpu-memory-utilization")
    mnbt = flags.get("--max-num-batched-tokens")
    spec = flags.get("--speculative-config")
    return (
        f"KV pool is {pool['tokens']:,} tokens (num_gpu_blocks {pool['num_gpu_blocks']:,} × "
        f"block_size {pool['block_size']}, engine {pool['engine']}) but --max-model-len is "
        f"{max_model_len:,}: a request longer than the pool is accepted, then waits forever "
        '(vllm:num_requests_waiting_by_reason{reason="capacity"}) while HTTP says 200, and blocks '
        "every request behind it (the Ascend 910B3 seed saw one hang for 2,171 s). Levers, in "
        f"order: lower --max-num-batched-tokens (now {mnbt or 'vLLM default'}; the Ascend seed went "
        "32768 → 8192 and the pool grew 4,584 → 9,072); raise --gpu-memory-utilization (now "
        f"{gmu or 'vLLM default'}); drop MTP --speculative-config (now {spec or 'off'}; its drafts "
        f"cost KV); or lower --max-model-len to at most {pool['tokens']:,} "
        "(glm:serving.maxNumBatchedTokens / gpuMemoryUtilization / numSpeculativeTokens / maxModelLen)."
    )


def describe(err: BaseException) -> str:
    """A transport error in words; "connection refused" is what a loading vLLM looks like."""
    chain: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and len(chain) < 8:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "refused" in str(err).lower():
        return "connection refused"
    name = type(err).__name__
    return f"{name}: {excerpt(str(err), 160)}" if str(err) else name


def within(seconds: float, call: Callable[[], T], until: Callable[[], bool] | None = None) -> T:
    """``call()``, or :class:`Overrun` once ``seconds`` have passed, whatever the server does
    (or as soon as ``until()`` is true: the serving container stopped, say).

    httpx's timeouts bound each read, not the exchange: a server that trickles one byte a second
    never trips them. So the exchange runs on a daemon thread and the gate stops waiting for it at
    the deadline; the abandoned call ends at its own read timeout.

    >>> within(1.0, lambda: 42)
    42
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as err:
            box["error"] = err

    worker = threading.Thread(target=run, daemon=True, name="smoke-gate-request")
    worker.start()
    ends = time.monotonic() + max(seconds, 0.0)
    while worker.is_alive() and time.monotonic() < ends and not (until and until()):
        # In slices while something may cut the wait short: a poll through an SSH tunnel to a
        # container that is gone hangs until its timeout.
        worker.join(
            min(0.1, max(0.0, ends - time.monotonic())) if until else max(0.0, ends - time.monotonic())
        )
    if worker.is_alive():
        raise Overrun(f"not done within {seconds:.3g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


# ---- the gate -------------------------------------------------------------------------------


class _Gate:
    """One run of the gate: holds the client, the parameters and the results as they accrue."""

    def __init__(
        self, params: Mapping[str, Any], api_key: str, progress: Progress, metrics_key: str | None = None
    ) -> None:
        import httpx

        p = plain(dict(params))
        smoke = {**SmokeConfig().model_dump(), **(p.get("smoke") or {})}
        self.endpoint = str(p["endpoint"]).rstrip("/")
        self.metrics_url = p.get("metrics_url") or None
        # Both known from the stack; the command line may leave them to what /v1/models lists.
        self.served_name: str | None = str(p["served_name"]) if p.get("served_name") else None
        self.max_model_len: int | None = int(p["max_model_len"]) if p.get("max_model_len") else None
        # The serving container's flags (ServingSpec.flags), for the failure messages.
        self.flags: dict[str, str | bool] = {
            str(k): v if v is True else str(v) for k, v in (p.get("flags") or {}).items()
        }
        self.container = p.get("container_name") or "the serving container"
        # Where the serving container runs (components/gate/container.py): its log while loading.
        self.watch_spec: dict[str, Any] | None = p.get("container_watch") or None
        self.prompt = str(smoke["prompt"])
        self.expected = str(smoke["expected_answer"])
        self.tool_prompt = str(smoke["tool_prompt"])
        self.template_kwargs = dict(smoke["chat_template_kwargs"] or {})
        self.steps = list(smoke["steps"])
        self.deadline = float(smoke["deadline_seconds"])
        self.poll = min(float(smoke["poll_seconds"]), 1.0, FASTEST_STEADY_POLL_SECONDS)
        self.timeout = float(smoke.get("request_timeout_seconds", REQUEST_TIMEOUT_SECONDS))
        self.max_tokens = int(smoke.get("max_tokens") or CHAT_MAX_TOKENS)
        self.api_key = api_key
        # The front's /metrics route takes a metrics key (glm:metricsKeys, or the stack's own for
        # the gate); vLLM's own /metrics or a Prometheus URL takes none.
        self.metrics_key = metrics_key
        self.progress = progress
        self.latency_ms: dict[str, float] = {}
        self.skipped: dict[str, str] = {}
        self.results: dict[str, Any] = {}
        # A TLS endpoint reached by an address its certificate does not name (components/gate/tls.py).
        self.tls = EndpointTls.from_params(p.get("tls"))
        # trust_env=False: the gate talks to the stack's own host; a proxy from the environment
        # would turn "connection refused while loading" into the proxy's own errors.
        self.client = httpx.Client(
            trust_env=False, follow_redirects=False, verify=self.tls.verify() if self.tls else True
        )
        self.start = time.monotonic()

    # -- plumbing --

    def _auth(self, key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _extensions(self, url: str) -> dict[str, str]:
        """The certificate's name for a request to the endpoint's origin (``sni_hostname``)."""
        return self.tls.extensions(url, self.endpoint) if self.tls else {}

    def _tls_failure(self, step: str, url: str, err: BaseException) -> GateFailure | None:
        """A certificate that does not verify fails at once: waiting would not change it."""
        message = self.tls.failure(url, err) if self.tls else None
        return GateFailure(step, message) if message else None

    def _exchange(
        self, method: str, url: str, key: str | None, body: dict[str, Any] | None, limit: float
    ) -> tuple[int, bytes]:
        import httpx

        with self.client.stream(
            method,
            url,
            json=body,
            headers=self._auth(key),
            timeout=httpx.Timeout(limit),
            extensions=self._extensions(url),
        ) as resp:
            return resp.status_code, resp.read()

    def request(
        self,
        step: str,
        method: str,
        url: str,
        *,
        key: str | None = None,
        body: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, bytes]:
        """One bounded request: connect, the reads and the whole body within ``timeout`` in total.

        A server that accepts and never sends a byte, or trickles, fails ``step`` instead of
        hanging the gate.
        """
        import httpx

        limit = timeout or self.timeout
        # The engine's queue is read while the request is still open: once the client gives up,
        # vLLM aborts the request and the metrics no longer show what it was waiting for.
        queue: dict[str, str] = {}
        watcher = threading.Timer(0.8 * limit, lambda: queue.update(now=self._capacity_hint()))
        watcher.daemon = True
        if self.metrics_url and url != self.metrics_url:
            watcher.start()
        try:
            return within(limit, lambda: self._exchange(method, url, key, body, limit))
        except (Overrun, httpx.TimeoutException) as err:
            if watcher.is_alive():  # the snapshot is being taken: let it finish
                watcher.join(timeout=6.0)
            raise GateFailure(
                step,
                f"{method} {url} {NO_ANSWER} {limit:g} s ({type(err).__name__}): the "
                "server accepted the connection but did not answer. Look at: the serving container's "
                f"log (docker logs {self.container}) and vLLM's queue{queue.get('now', '')}.",
            ) from None
        except httpx.HTTPError as err:
            if (tls_failure := self._tls_failure(step, url, err)) is not None:
                raise tls_failure from None
            raise GateFailure(
                step,
                f"{method} {url} failed: {describe(err)}. Look at: is the front up "
                f"(docker ps), and the log of {self.container}.",
            ) from None
        finally:
            watcher.cancel()

    def json_body(self, step: str, url: str, status: int, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except ValueError:
            raise GateFailure(
                step,
                f"{url} answered {status} with a body that is not JSON: {excerpt(raw.decode(errors='replace'))}",
            ) from None

    def _capacity_hint(self) -> str:
        """When metrics are reachable, what the engine is doing now (Ascend's hang: waiting on capacity)."""
        if not self.metrics_url:
            return ""
        import httpx

        try:  # its own connection: this runs on a timer thread beside a pending request
            with httpx.Client(trust_env=False, verify=self.tls.verify() if self.tls else True) as client:
                reply = client.get(
                    self.metrics_url,
                    headers=self._auth(self.metrics_key),
                    timeout=5.0,
                    extensions=self._extensions(self.metrics_url),
                )
            samples = parse_samples(reply.text)
        except Exception:
            return ""
        facts = []
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
            if (value := total(samples, name)) is not None:
                facts.append(f"{name.split(':')[1]} {value:g}")
        if capacity := total(samples, "vllm:num_requests_waiting_by_reason", reason="capacity"):
            facts.append(f"{capacity:g} waiting for KV capacity")
        if pools := kv_pools(samples):
            facts.append(f"KV pool {min(p['tokens'] for p in pools):,} tokens")
        return f" (metrics now: {', '.join(facts)})" if facts else ""

    def timed(self, step: str, fn: Callable[[], None]) -> None:
        started = time.monotonic()
        fn()
        if step in self.skipped:  # the step decided it cannot run here (e.g. kv_pool without metrics)
            return
        self.latency_ms[step] = round((time.monotonic() - started) * 1000, 1)
        self.progress(f"{step}: ok in {self.latency_ms[step]:g} ms")

    # -- steps --

    def wait_ready(self) -> None:
        """Poll ``/models`` through the front until it answers 200; loading signals keep waiting.

        Every poll, body included, ends by the gate's deadline (:func:`within`): a front that
        trickles bytes cannot hold the gate past ``deadlineSeconds``.
        """
        url = f"{self.endpoint}/models"
        deadline = self.start + self.deadline
        self.progress(
            f"readiness: waiting up to {self.deadline:g} s for {url} (polling every {self.poll:g} s)"
        )
        watch = start_watch(self.watch_spec, self.progress, set(self.flags))
        try:
            self._poll_ready(url, deadline, watch)
        finally:
            if watch is not None:
                watch.close()
        self.results["ready_seconds"] = round(time.monotonic() - self.start, 3)

    def _poll_ready(self, url: str, deadline: float, watch: ContainerWatch | None) -> None:
        import httpx

        last_report = self.start
        last = "no answer yet"
        interval = min(FIRST_POLL_SECONDS, self.poll)
        while True:
            if watch is not None and watch.stopped is not None:
                raise GateFailure("readiness", watch.stopped.message(watch.name))
            limit = max(0.01, min(PROBE_READ_TIMEOUT_SECONDS, deadline - time.monotonic()))
            try:
                stopped = None if watch is None else (lambda: watch.stopped is not None)
                status, raw = within(
                    limit, partial(self._exchange, "GET", url, self.api_key, None, limit), until=stopped
                )
                if status == 200:
                    break
                last = f"HTTP {status}: {excerpt(raw.decode(errors='replace'), 120)}"
                if status in (401, 403):
                    raise GateFailure(
                        "readiness",
                        f"the front refused the gate's API key ({last}). Look at: glm:apiKeys (the gate "
                        "uses the first key by name) and the key map rendered into the front's nginx.conf.",
                    )
                if status not in RETRY_STATUSES:
                    raise GateFailure(
                        "readiness",
                        f"{url} answered {last}; only 200, or 502/503/504 while loading (429 when rate-limited), are expected. "
                        "Look at: the endpoint (front URL) and the front's log.",
                    )
            except (Overrun, httpx.TimeoutException) as err:
                last = f"no complete answer within {limit:.3g} s ({type(err).__name__})"
            except httpx.HTTPError as err:
                if (tls_failure := self._tls_failure("readiness", url, err)) is not None:
                    raise tls_failure from None
                last = describe(err)
            now = time.monotonic()
            if now >= deadline:
                raise GateFailure(
                    "readiness",
                    f"not ready after {now - self.start:.0f} s (glm:smoke.deadlineSeconds="
                    f"{self.deadline:g}); last answer from {url}: {last}. vLLM refuses connections "
                    "while the weights load and the engine starts (normal: 632 s load on rtx5090, "
                    f"5.5 min init on a800). Look at: docker logs {self.container} (still loading, or "
                    "crashed?), VLLM_ENGINE_READY_TIMEOUT_S, and raise glm:smoke.deadlineSeconds if "
                    "the load is simply slow."
                    + (f" The container's log was at: {watch.status()}." if watch and watch.status() else ""),
                )
            if now - last_report >= PROGRESS_EVERY_SECONDS:
                last_report = now
                startup = watch.status() if watch is not None else None
                self.progress(
                    f"readiness: {now - self.start:.0f} s elapsed of {self.deadline:g} s"
                    + (f"; {startup}" if startup else f", waiting for {url} to answer 200; last: {last}")
                )
            time.sleep(max(0.0, min(interval, deadline - now)))
            interval = min(self.poll, interval * POLL_BACKOFF)

    def check_models(self) -> None:
        url = f"{self.endpoint}/models"
        status, raw = self.request("models", "GET", url, key=self.api_key)
        if status != 200:
            raise GateFailure("models", f"{url} answered {status}: {excerpt(raw.decode(errors='replace'))}")
        body = self.json_body("models", url, status, raw)
        models = body.get("data") if isinstance(body, dict) else None
        if not isinstance(models, list):
            raise GateFailure("models", f"{url} has no `data` list: {excerpt(body)}")
        ids = [m.get("id") for m in models if isinstance(m, dict)]
        if self.served_name is None and ids:  # the command line without --served-name: take the first
            self.served_name = str(ids[0])
        entry = next((m for m in models if isinstance(m, dict) and m.get("id") == self.served_name), None)
        if entry is None:
            raise GateFailure(
                "models",
                f"{url} lists {ids}, not the served name {self.served_name!r}. Look at: "
                f"--served-model-name in the argv ({mentions(self.flags, '--served-model-name')}) and "
                "glm:model.servedName; is the front pointed at the right vLLM?",
            )
        reported = entry.get("max_model_len")
        if self.max_model_len is None and isinstance(reported, int):
            self.max_model_len = reported
        if reported != self.max_model_len:
            raise GateFailure(
                "models",
                f"{self.served_name!r} reports max_model_len {reported} but the stack configures "
                f"{self.max_model_len} (glm:serving.maxModelLen). Look at: the running container's "
                f"argv (docker inspect {self.container}): an old container, or vLLM capped the length.",
            )
        self.results["model_root"] = entry.get("root")

    def _chat(self, step: str, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        url = f"{self.endpoint}/chat/completions"
        status, raw = self.request(step, "POST", url, key=self.api_key, body=body)
        if status != 200:
            hint = ""
            if status == 400:
                hint = " A 400 means vLLM rejected a field: look at glm:smoke.chatTemplateKwargs and the parser flags."
            elif status >= 500:
                hint = f" Look at: docker logs {self.container} (engine error?)."
            raise GateFailure(
                step, f"{url} answered {status}: {excerpt(raw.decode(errors='replace'))}.{hint}"
            )
        data = self.json_body(step, url, status, raw)
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
                "choices[0].message as an object. Look at: is the endpoint the front of this stack's vLLM "
                "(not another server or a proxy that rewrites replies)?",
            )
        for key in ("content", "reasoning", "reasoning_content"):
            value = message.get(key)
            if value is not None and not isinstance(value, str):
                raise GateFailure(
                    step,
                    f"{url} answered 200 with message.{key} as {kind(value)}, not a string: "
                    f"{excerpt(value)}. vLLM sends the answer as one string. Look at: is the endpoint "
                    "the front of this stack's vLLM (not another server or a proxy that rewrites replies)?",
                )
        return choice, message  # type: ignore[return-value]  # choice is a dict once message is

    def _chat_body(self, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.served_name,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": 0,
            **extra,
        }
        if self.template_kwargs:
            body["chat_template_kwargs"] = self.template_kwargs
        return body

    def check_arithmetic(self) -> None:
        choice, message = self._chat(
            "arithmetic", self._chat_body([{"role": "user", "content": self.prompt}])
        )
        content = message.get("content") or ""
        reasoning = message.get("reasoning") or message.get("reasoning_content")
        finish = choice.get("finish_reason")
        if "<think>" in content or "</think>" in content:
            raise GateFailure(
                "arithmetic",
                f"the reasoning came back inline in `content` ({excerpt(content)!r}) instead of "
                "`message.reasoning`/`reasoning_content`. Look at: --reasoning-parser (argv has "
                f"{mentions(self.flags, '--reasoning-parser')}; GLM-5.3 needs glm45) and the "
                "vLLM version's reasoning parsers.",
            )
        if content.strip() != self.expected:
            where = (
                f"the reasoning used up max_tokens={self.max_tokens}: lower "
                "glm:smoke.chatTemplateKwargs.reasoning_effort"
                if finish == "length"
                else "the weights (glm:model), the image's patches and the chat template"
            )
            raise GateFailure(
                "arithmetic",
                f"asked {self.prompt!r}, expected content {self.expected!r} exactly (after trimming), got "
                f"{excerpt(content)!r} (finish_reason={finish}). Look at: {where}.",
            )
        if not reasoning and not thinking_disabled(self.template_kwargs):
            raise GateFailure(
                "arithmetic",
                "the answer is right but no reasoning came back in `message.reasoning` or "
                f"`message.reasoning_content` (message keys: {sorted(message)}). Look at: "
                f"--reasoning-parser (argv has {mentions(self.flags, '--reasoning-parser')}).",
            )
        self.results["reasoning_field"] = (
            "reasoning" if message.get("reasoning") else "reasoning_content" if reasoning else None
        )

    def check_tool_call(self) -> None:
        body = self._chat_body(
            [{"role": "user", "content": self.tool_prompt}], tools=[WEATHER_TOOL], tool_choice="auto"
        )
        choice, message = self._chat("tool_call", body)
        finish = choice.get("finish_reason")
        calls = message.get("tool_calls") or []
        where = (
            f"Look at: --enable-auto-tool-choice and --tool-call-parser (argv has "
            f"{mentions(self.flags, '--enable-auto-tool-choice', '--tool-call-parser')}; GLM-5.3 needs glm47)."
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
                f"asked {self.tool_prompt!r} with a get_weather tool and tool_choice auto: "
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

    def check_kv_pool(self) -> None:
        if not self.metrics_url:
            self.skipped["kv_pool"] = (
                "no metrics_url: vLLM's /metrics is blocked at the front and vLLM's private port is "
                "not reachable from the Pulumi host; pass SmokeTest(metrics_url=...) to check it"
            )
            self.progress(f"kv_pool: skipped ({self.skipped['kv_pool']})")
            return
        # vLLM's own /metrics has the pool at once; a Prometheus /federate URL has nothing until
        # its first scrape of the new vLLM: wait for that a bounded while, polling like readiness.
        waited_until = time.monotonic() + KV_METRICS_WAIT_SECONDS
        interval = min(FIRST_POLL_SECONDS, self.poll)
        while True:
            status, raw = self.request(
                "kv_pool", "GET", self.metrics_url, key=self.metrics_key, timeout=min(30.0, self.timeout)
            )
            text = raw.decode(errors="replace")
            if status != 200:
                raise GateFailure("kv_pool", f"{self.metrics_url} answered {status}: {excerpt(text)}")
            pools = kv_pools(self._samples(text))
            if pools or time.monotonic() >= waited_until:
                break
            time.sleep(interval)
            interval = min(self.poll, interval * POLL_BACKOFF)
        if not pools:
            raise GateFailure(
                "kv_pool",
                f"{self.metrics_url} has no vllm:cache_config_info with num_gpu_blocks and block_size: "
                f"{excerpt(text, 200)!r}. Look at: is metrics_url vLLM's /metrics (or a Prometheus "
                "/federate of it)?",
            )
        if self.max_model_len is None:
            raise GateFailure("kv_pool", "max_model_len is unknown: run the models step or pass it")
        smallest = min(pools, key=lambda p: p["tokens"])
        self.results["kv_pool_tokens"] = smallest["tokens"]
        self.results["kv_block_size"] = smallest["block_size"]
        self.results["kv_num_gpu_blocks"] = smallest["num_gpu_blocks"]
        if smallest["tokens"] < self.max_model_len:
            raise GateFailure("kv_pool", kv_pool_message(smallest, self.max_model_len, self.flags))

    def _samples(self, text: str) -> list[Sample]:
        try:
            return parse_samples(text)
        except ValueError as err:
            raise GateFailure(
                "kv_pool",
                f"{self.metrics_url} answered 200 with a body that is not Prometheus text ({err}): "
                f"{excerpt(text, 200)!r}. Look at: is metrics_url vLLM's /metrics (or a Prometheus "
                "/federate of it)?",
            ) from None

    def check_front_auth(self) -> None:
        url = f"{self.endpoint}/models"
        for label, key in (("without a key", None), ("with a wrong key", WRONG_KEY)):
            status, raw = self.request("front_auth", "GET", url, key=key)
            if status != 401:
                raise GateFailure(
                    "front_auth",
                    f"GET {url} {label} answered {status}, expected 401: "
                    f"{excerpt(raw.decode(errors='replace'), 200)!r}. The API is open to anyone who "
                    "can reach the port. Look at: the front's key map (glm:apiKeys) and that the "
                    "endpoint is the front, not vLLM's own port.",
                )

    def _read_stream(self, url: str, body: dict[str, Any], arrivals: list[float], started: float) -> bool:
        """Read the SSE reply, noting when each content/reasoning chunk arrived; True on ``[DONE]``."""
        import httpx

        with self.client.stream(
            "POST",
            url,
            json=body,
            headers=self._auth(self.api_key),
            timeout=httpx.Timeout(self.timeout),
            extensions=self._extensions(url),
        ) as resp:
            if resp.status_code != 200:
                resp.read()
                raise GateFailure(
                    "streaming", f"{url} (stream) answered {resp.status_code}: {excerpt(resp.text)}"
                )
            try:
                for chunk in sse_events(resp.iter_lines()):
                    if chunk is DONE:
                        return True
                    if (error := chunk_error(chunk)) is not None:
                        raise GateFailure(
                            "streaming",
                            f"the engine sent an error in the middle of the SSE stream from {url}, after "
                            f"{len(arrivals)} chunks: {excerpt(error, 200)}. The front passed it through; "
                            f"the engine failed the request. Look at: docker logs {self.container}.",
                        )
                    if any(delta_text(delta) for delta in chunk_deltas(chunk)):
                        arrivals.append(time.monotonic() - started)
            except MalformedChunk as err:
                raise GateFailure(
                    "streaming",
                    f"the SSE stream from {url} sent {err} (after {len(arrivals)} chunks). vLLM sends "
                    "`data: {chat.completion.chunk}` events with choices[].delta objects. Look at: is the "
                    "endpoint the front of this stack's vLLM (not a proxy that rewrites the stream)?",
                ) from None
        return False

    def check_streaming(self) -> None:
        import httpx

        url = f"{self.endpoint}/chat/completions"
        body = self._chat_body(
            [{"role": "user", "content": STREAM_PROMPT}], stream=True, max_tokens=STREAM_MAX_TOKENS
        )
        arrivals: list[float] = []
        started = time.monotonic()
        try:
            done = within(self.timeout, lambda: self._read_stream(url, body, arrivals, started))
        except (Overrun, httpx.TimeoutException):
            raise GateFailure(
                "streaming",
                f"the SSE stream from {url} did not finish within {self.timeout:g} s "
                f"({len(arrivals)} chunks so far). Look at: the front's proxy_read_timeout and the log "
                f"of {self.container}.",
            ) from None
        except httpx.HTTPError as err:
            raise GateFailure("streaming", f"the SSE stream from {url} broke: {describe(err)}") from None
        total_seconds = time.monotonic() - started
        spread = stream_spread(arrivals, total_seconds)
        self.results["stream_chunks"] = len(arrivals)
        self.results["stream_spread"] = spread
        if not done:
            raise GateFailure("streaming", f"the SSE stream from {url} ended without `data: [DONE]`.")
        if len(arrivals) < MIN_STREAM_CHUNKS:
            raise GateFailure(
                "streaming",
                f"only {len(arrivals)} content/reasoning chunks arrived (need ≥ {MIN_STREAM_CHUNKS}) for "
                f"max_tokens={STREAM_MAX_TOKENS}. Look at: the front's proxy_buffering and gzip settings.",
            )
        if spread < MIN_STREAM_SPREAD:
            raise GateFailure(
                "streaming",
                f"{len(arrivals)} chunks arrived bunched: first at {min(arrivals):.3f} s, last at "
                f"{max(arrivals):.3f} s of {total_seconds:.3f} s (spread {spread:.0%} < {MIN_STREAM_SPREAD:.0%}). "
                "The front buffers SSE: clients see nothing until the end. Look at: "
                "`proxy_buffering off` and `proxy_http_version 1.1` in the front's nginx.conf.",
            )

    def vllm_version(self) -> None:
        """``/version`` beside metrics_url: vLLM's own, or the front's for metrics keys."""
        if not self.metrics_url or not urlsplit(self.metrics_url).path.rstrip("/").endswith("/metrics"):
            self.results["vllm_version"] = None
            self.results["vllm_version_source"] = (
                "unknown: /version is not served through the front and no vLLM metrics_url was given"
            )
            return
        parts = urlsplit(self.metrics_url)
        url = urlunsplit((parts.scheme, parts.netloc, "/version", "", ""))
        try:
            resp = self.client.get(
                url, headers=self._auth(self.metrics_key), timeout=5.0, extensions=self._extensions(url)
            )
            version = resp.json().get("version") if resp.status_code == 200 else None
        except Exception:
            version = None
        self.results["vllm_version"] = version
        self.results["vllm_version_source"] = url if version else f"unknown: {url} did not answer a version"

    # -- the run --

    def step_methods(self) -> dict[str, Callable[[], None]]:
        """Each step's check, readiness (the wait) first: the one table of steps."""
        return {
            "readiness": self.wait_ready,
            "models": self.check_models,
            "arithmetic": self.check_arithmetic,
            "tool_call": self.check_tool_call,
            "kv_pool": self.check_kv_pool,
            "front_auth": self.check_front_auth,
            "streaming": self.check_streaming,
        }

    def run(self) -> dict[str, Any]:
        steps = self.step_methods()
        try:
            self.timed("readiness", steps["readiness"])
            for step in ALL_SMOKE_STEPS:
                if step not in self.steps:
                    self.skipped[step] = "not in glm:smoke.steps"
                    continue
                self.timed(step, steps[step])
            self.vllm_version()
        finally:
            self.client.close()
        ran = [s for s in ALL_SMOKE_STEPS if s in self.latency_ms]
        pass_seconds = round(time.monotonic() - self.start, 3)
        self.progress(f"passed in {pass_seconds:g} s: {', '.join(['readiness', *ran])}")
        return {
            "served_name": self.served_name,
            "max_model_len": self.max_model_len,
            "kv_pool_tokens": None,
            **self.results,
            "latency_ms": dict(self.latency_ms),
            "steps_run": ran,
            "steps_skipped": dict(sorted(self.skipped.items())),
            "pass_seconds": pass_seconds,
        }


def run_gate(
    params: Mapping[str, Any],
    api_key: str,
    progress: Progress = stderr_progress,
    metrics_key: str | None = None,
) -> dict[str, Any]:
    """Run every configured step in order; return the results or raise :class:`GateFailure`.

    ``params`` are the resource inputs without the key: ``endpoint`` (front URL ending in ``/v1``),
    ``served_name``, ``max_model_len``, ``flags``, optional ``metrics_url`` and ``container_name``,
    and ``smoke`` (``SmokeConfig`` fields plus ``request_timeout_seconds``). Without
    ``served_name``/``max_model_len`` (the command line), the models step takes what is listed.
    """
    return _Gate(params, api_key, progress, metrics_key).run()


NO_ANSWER = "got no complete answer within"
"""In the failure of a request that timed out (the probe tells a queue from a wrong answer by it)."""


@dataclass(frozen=True)
class StepOutcome:
    """One step of :func:`check_steps`: passed or not, how long it took, and what failed."""

    step: str
    ok: bool
    seconds: float
    failure: str | None = None
    """The :class:`GateFailure` message when the step failed."""
    skipped: str | None = None
    """Why the step could not run here (e.g. kv_pool without metrics_url); ``ok`` is then True."""

    @property
    def timed_out(self) -> bool:
        """Failed only for want of an answer in time (no wrong answer, no error status)."""
        return not self.ok and NO_ANSWER in (self.failure or "")


def check_steps(
    params: Mapping[str, Any],
    api_key: str,
    steps: Sequence[str],
    progress: Progress = stderr_progress,
    metrics_key: str | None = None,
) -> Iterator[StepOutcome]:
    """The gate's steps one by one, each yielded as soon as it ends, a failure recorded instead of
    raised: what the semantic probe runs (``components/semantic_probe``). A wrong answer does not
    hide a broken tool call, and each step is bounded like the gate's (``request_timeout_seconds``;
    readiness by ``deadline_seconds``). ``params`` as for :func:`run_gate`; ``smoke.max_tokens``
    caps the chats. ``metrics_key``: sent to ``metrics_url`` (a replica's guard wants its key there).
    """
    gate = _Gate(params, api_key, progress, metrics_key)
    methods = gate.step_methods()
    try:
        for step in steps:
            started = time.monotonic()
            try:
                methods[step]()
            except GateFailure as failure:
                yield StepOutcome(step, False, round(time.monotonic() - started, 3), failure.message)
                continue
            yield StepOutcome(
                step, True, round(time.monotonic() - started, 3), skipped=gate.skipped.get(step)
            )
    finally:
        gate.client.close()
