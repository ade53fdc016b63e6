"""How the gate talks to the endpoint: one httpx client, every exchange bounded in total, TLS by the
certificate's name, the SSE stream read as it arrives, and a transport error turned into the
:class:`~components.gate.messages.GateFailure` of the step that met it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from components.gate.messages import NO_ANSWER, GateFailure, LookAt, describe, excerpt
from components.gate.metrics import kv_pools, parse_samples, total
from components.gate.sse import DONE, MalformedChunk, chunk_deltas, chunk_error, delta_text, sse_events
from components.gate.tls import EndpointTls

REQUEST_TIMEOUT_SECONDS = 120.0
"""Upper bound for one gate request (a chat at low reasoning effort answers in seconds)."""

T = TypeVar("T")


class Overrun(Exception):
    """A request was still unanswered, or its body still arriving, when its time was up."""


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


class Transport:
    """The gate's client for one endpoint. ``look_at`` is what its failures name to see the serving
    container; ``metrics_url`` and ``metrics_key`` let a request that hangs say what the engine is doing."""

    def __init__(
        self,
        endpoint: str,
        look_at: LookAt,
        timeout: float,
        tls: EndpointTls | None,
        metrics_url: str | None,
        metrics_key: str | None,
    ) -> None:
        import httpx

        self.endpoint = endpoint
        self.look_at = look_at
        self.timeout = timeout
        # A TLS endpoint reached by an address its certificate does not name (components/gate/tls.py).
        self.tls = tls
        self.metrics_url = metrics_url
        # The front's /metrics route takes a metrics key (glm:metricsKeys, or the stack's own for
        # the gate); vLLM's own /metrics or a Prometheus URL takes none.
        self.metrics_key = metrics_key
        # trust_env=False: the gate talks to the stack's own host; a proxy from the environment
        # would turn "connection refused while loading" into the proxy's own errors.
        self.client = httpx.Client(
            trust_env=False, follow_redirects=False, verify=self.tls.verify() if self.tls else True
        )

    def close(self) -> None:
        self.client.close()

    @staticmethod
    def auth(key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def extensions(self, url: str) -> dict[str, str]:
        """The certificate's name for a request to the endpoint's origin (``sni_hostname``)."""
        return self.tls.extensions(url, self.endpoint) if self.tls else {}

    def tls_failure(self, step: str, url: str, err: BaseException) -> GateFailure | None:
        """A certificate that does not verify fails at once: waiting would not change it."""
        message = self.tls.failure(url, err) if self.tls else None
        return GateFailure(step, message) if message else None

    def exchange(
        self, method: str, url: str, key: str | None, body: dict[str, Any] | None, limit: float
    ) -> tuple[int, bytes]:
        """One request and its whole body, unbounded in total: :meth:`request` and readiness bound it."""
        import httpx

        with self.client.stream(
            method,
            url,
            json=body,
            headers=self.auth(key),
            timeout=httpx.Timeout(limit),
            extensions=self.extensions(url),
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
        watcher = threading.Timer(0.8 * limit, lambda: queue.update(now=self.capacity_hint()))
        watcher.daemon = True
        if self.metrics_url and url != self.metrics_url:
            watcher.start()
        try:
            return within(limit, lambda: self.exchange(method, url, key, body, limit))
        except (Overrun, httpx.TimeoutException) as err:
            if watcher.is_alive():  # the snapshot is being taken: let it finish
                watcher.join(timeout=6.0)
            raise GateFailure(
                step,
                f"{method} {url} {NO_ANSWER} {limit:g} s ({type(err).__name__}): the "
                "server accepted the connection but did not answer. Look at: the serving container's "
                f"log ({self.look_at.logs}) and vLLM's queue{queue.get('now', '')}.",
            ) from None
        except httpx.HTTPError as err:
            if (tls_failure := self.tls_failure(step, url, err)) is not None:
                raise tls_failure from None
            raise GateFailure(
                step,
                f"{method} {url} failed: {describe(err)}. Look at: is the front up "
                f"({self.look_at.running}), and {self.look_at.log_of}.",
            ) from None
        finally:
            watcher.cancel()

    @staticmethod
    def json_body(step: str, url: str, status: int, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except ValueError:
            raise GateFailure(
                step,
                f"{url} answered {status} with a body that is not JSON: {excerpt(raw.decode(errors='replace'))}",
            ) from None

    def capacity_hint(self) -> str:
        """When metrics are reachable, what the engine is doing now (Ascend's hang: waiting on capacity)."""
        if not self.metrics_url:
            return ""
        import httpx

        try:  # its own connection: this runs on a timer thread beside a pending request
            with httpx.Client(trust_env=False, verify=self.tls.verify() if self.tls else True) as client:
                reply = client.get(
                    self.metrics_url,
                    headers=self.auth(self.metrics_key),
                    timeout=5.0,
                    extensions=self.extensions(self.metrics_url),
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

    def read_stream(
        self, url: str, key: str, body: dict[str, Any], arrivals: list[float], started: float
    ) -> bool:
        """Read the SSE reply, noting when each content/reasoning chunk arrived; True on ``[DONE]``."""
        import httpx

        with self.client.stream(
            "POST",
            url,
            json=body,
            headers=self.auth(key),
            timeout=httpx.Timeout(self.timeout),
            extensions=self.extensions(url),
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
                            f"the engine failed the request. Look at: {self.look_at.logs}.",
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

    def version(self, url: str) -> str | None:
        """vLLM's ``/version`` at ``url`` (with the metrics key), or None when it does not answer one."""
        try:
            resp = self.client.get(
                url, headers=self.auth(self.metrics_key), timeout=5.0, extensions=self.extensions(url)
            )
            return resp.json().get("version") if resp.status_code == 200 else None  # type: ignore[no-any-return]
        except Exception:
            return None
