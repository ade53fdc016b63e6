"""The meter's HTTP side: nginx's requests in, each sent on to nginx's return listener, the answers
read on their way back (usage_meter.py says why)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass

from meter_shares import Meter

GENERATION_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
"""The routes that take an engine slot (``/v1/models`` does not)."""
RETRY_AFTER_SECONDS = 1
MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer", "upgrade"}
"""Framing and connection headers: the meter frames each leg itself."""
NOT_FORWARDED = {*HOP_BY_HOP, "authorization", "x-glm-client", "x-glm-shares"}
"""What the return leg does not get: nginx sets the replica's credential there itself."""

# ---- HTTP ----------------------------------------------------------------------------------------


class Closed(Exception):
    """The peer went away."""


@dataclass
class Message:
    head: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name), None)


async def read_head(reader: asyncio.StreamReader) -> Message | None:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if e.partial.strip():
            raise Closed from e
        return None
    except (asyncio.LimitOverrunError, ConnectionError) as e:
        raise Closed from e
    lines = raw.decode("latin-1").split("\r\n")
    headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:] if line)]
    return Message(lines[0], headers)


async def body_parts(reader: asyncio.StreamReader, message: Message, until_close: bool):
    """The body's bytes as they arrive: Content-Length, chunked, or (a response) until close."""
    if (message.header("transfer-encoding") or "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers from nginx or vLLM
                return
            data = await reader.readexactly(size + 2)
            yield data[:-2]
    elif message.header("content-length") is not None:
        left = int(message.header("content-length") or 0)
        while left > 0:
            data = await reader.read(min(left, 65536))
            if not data:
                raise Closed
            left -= len(data)
            yield data
    elif until_close:
        while data := await reader.read(65536):
            yield data


async def read_body(reader: asyncio.StreamReader, message: Message, until_close: bool = False) -> bytes:
    parts = []
    size = 0
    async for part in body_parts(reader, message, until_close):
        size += len(part)
        if size > MAX_BODY:
            raise Closed
        parts.append(part)
    return b"".join(parts)


def response_head(status: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def openai_error(status: int, message: str, code: str, error_type: str) -> bytes:
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return json.dumps(body, separators=(",", ":")).encode()


# ---- the proxy -----------------------------------------------------------------------------------


@dataclass
class Exchange:
    """One request on its way through: what the client asked, what came back, when."""

    client: str
    started: float
    asked_usage: bool = True
    status: int = 0
    first_token: float | None = None
    usage: dict | None = None


def prepare(body: bytes, exchange: Exchange) -> bytes:
    """The body vLLM gets: a stream always asks for usage (the meter counts it); the rest as sent."""
    try:
        request = json.loads(body)
    except ValueError:
        return body  # vLLM answers 400 with its own message
    if not isinstance(request, dict) or request.get("stream") is not True:
        return body
    options = request.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return body
    exchange.asked_usage = False
    # continuous_usage_stats means nothing without include_usage: the client gets no usage at all.
    request["stream_options"] = {"include_usage": True}
    return json.dumps(request, separators=(",", ":"), ensure_ascii=False).encode()


def has_token(event: dict) -> bool:
    for choice in event.get("choices") or []:
        if not isinstance(choice, dict):
            return True
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(v for k, v in delta.items() if k != "role"):
            return True
        if delta is not None and not isinstance(delta, dict):
            return True
    return event.get("type") == "response.output_text.delta"


def read_event(raw: bytes, exchange: Exchange, now: float) -> bool:
    """Note what one server-sent event says; False: the client must not receive it."""
    if exchange.first_token is not None and b'"usage"' not in raw:
        return True  # the common case once the first token is out: nothing to read, no JSON parsed
    for line in raw.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return True
        try:
            event = json.loads(payload)
        except ValueError:
            return True
        if not isinstance(event, dict):
            return True
        if exchange.first_token is None and has_token(event):
            exchange.first_token = now
        usage = event.get("usage")
        if isinstance(usage, dict):
            exchange.usage = usage
            if not exchange.asked_usage and event.get("choices") == []:
                return False
    return True


class Proxy:
    def __init__(self, meter: Meter, upstream: tuple[str, int], queue_seconds: float = 0.0) -> None:
        """``queue_seconds``: how long a request beyond its key's share waits for a slot before its
        429 (usage_meter.py says why)."""
        self.meter = meter
        self.upstream = upstream
        self.queue_seconds = queue_seconds
        self.freed = asyncio.Event()
        """Set, and replaced, each time a slot frees: the waiting requests look again."""

    async def take_slot(self, client: str) -> bool:
        """A slot for ``client``, waiting up to ``queue_seconds`` for one to free (or for the share
        to grow: another key going idle, a replica coming back), looking again at least every
        second; False: refused, counted."""
        deadline = time.monotonic() + self.queue_seconds
        while (left := deadline - time.monotonic()) > 0 and not self.meter.fits(client, time.monotonic()):
            freed = self.freed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), min(1.0, left))
        return self.meter.admit(client, time.monotonic())

    def release(self, client: str) -> None:
        self.meter.release(client)
        self.freed.set()
        self.freed = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection from nginx: requests one after the other (upstream keep-alive)."""
        try:
            while (request := await read_head(reader)) is not None:
                body = await read_body(reader, request)
                keep = await self.handle(request, body, writer)
                if not keep:
                    break
        except (Closed, ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def handle(self, request: Message, body: bytes, writer: asyncio.StreamWriter) -> bool:
        method, target, _ = [*request.head.split(" "), "", ""][:3]
        if method == "GET" and target == "/metrics":
            text = self.meter.exposition(time.monotonic()).encode()
            writer.write(
                response_head(
                    "200 OK",
                    [("Content-Type", "text/plain; version=0.0.4"), ("Content-Length", str(len(text)))],
                )
                + text
            )
            await writer.drain()
            return True
        client = request.header("x-glm-client") or ""
        if request.header("x-glm-shares"):
            self.meter.configure(request.header("x-glm-shares") or "")
        if not client:
            await self.reply(
                writer,
                400,
                openai_error(
                    400,
                    "No client name: the meter serves the front only.",
                    "no_client",
                    "invalid_request_error",
                ),
            )
            return True
        now = time.monotonic()
        exchange = Exchange(client, now)
        generation = method == "POST" and target in GENERATION_ROUTES
        usage = self.meter.key(client)
        usage.last_seen = time.time()
        if generation and not await self.take_slot(client):
            exchange.status = 429
            now = time.monotonic()
            share = self.meter.share(client, now)
            active = sum(self.meter.active(name, now) for name in self.meter.keys)
            waited = f" It waited {self.queue_seconds:g} s for a slot." if self.queue_seconds else ""
            message = (
                f"Too many requests in flight for this API key: its fair share of the engine is {share} "
                f"at once ({self.meter.capacity} slots shared among {active} active keys), and the free "
                f"slots are kept for the other keys.{waited} Retry after the Retry-After seconds."
            )
            await self.reply(
                writer,
                429,
                openai_error(429, message, "rate_limit_exceeded", "requests"),
                [("Retry-After", str(RETRY_AFTER_SECONDS))],
            )
            self.finish(exchange)
            return True
        try:
            if generation:
                body = prepare(body, exchange)
            return await self.forward(request, method, target, body, exchange, writer)
        finally:
            if generation:
                self.release(client)
            self.finish(exchange)

    def finish(self, exchange: Exchange) -> None:
        usage = self.meter.key(exchange.client)
        usage.requests[exchange.status] = usage.requests.get(exchange.status, 0) + 1
        if exchange.usage is not None:
            usage.prompt_tokens += int(
                exchange.usage.get("prompt_tokens") or exchange.usage.get("input_tokens") or 0
            )
            usage.completion_tokens += int(
                exchange.usage.get("completion_tokens") or exchange.usage.get("output_tokens") or 0
            )
        if exchange.first_token is not None:
            usage.ttft.observe(exchange.first_token - exchange.started)
        if exchange.status not in (0, 499):
            usage.duration.observe(time.monotonic() - exchange.started)

    async def reply(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, extra: list[tuple[str, str]] = ()
    ) -> None:  # type: ignore[assignment]
        reason = {400: "Bad Request", 429: "Too Many Requests", 502: "Bad Gateway"}[status]
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *extra]
        writer.write(response_head(f"{status} {reason}", headers) + body)
        await writer.drain()

    async def forward(
        self,
        request: Message,
        method: str,
        target: str,
        body: bytes,
        exchange: Exchange,
        writer: asyncio.StreamWriter,
    ) -> bool:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream, limit=MAX_HEAD)
        except OSError:
            exchange.status = 502
            await self.reply(
                writer,
                502,
                openai_error(
                    502, "The front's return path is not reachable.", "upstream_unavailable", "server_error"
                ),
            )
            return True
        try:
            headers = [(k, v) for k, v in request.headers if k.lower() not in NOT_FORWARDED]
            head = [
                f"{method} {target} HTTP/1.1",
                *(f"{k}: {v}" for k, v in headers),
                f"Content-Length: {len(body)}",
                "Connection: close",
            ]
            up_writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            await up_writer.drain()
            response = await read_head(up_reader)
            if response is None:
                raise Closed
            exchange.status = int(response.head.split(" ")[1])
            kept = [(k, v) for k, v in response.headers if k.lower() not in HOP_BY_HOP]
            if (response.header("content-type") or "").startswith("text/event-stream"):
                writer.write(
                    response_head(response.head.split(" ", 1)[1], [*kept, ("Transfer-Encoding", "chunked")])
                )
                await writer.drain()
                await self.relay_events(up_reader, response, exchange, writer)
                return True
            data = await read_body(up_reader, response, until_close=True)
            if 200 <= exchange.status < 300 and method == "POST":
                try:
                    answer = json.loads(data)
                    if isinstance(answer, dict) and isinstance(answer.get("usage"), dict):
                        exchange.usage = answer["usage"]
                except ValueError:
                    pass
            writer.write(
                response_head(response.head.split(" ", 1)[1], [*kept, ("Content-Length", str(len(data)))])
                + data
            )
            await writer.drain()
            return True
        except (Closed, asyncio.IncompleteReadError, ConnectionError, ValueError):
            if exchange.status == 0:
                exchange.status = 502
                await self.reply(
                    writer,
                    502,
                    openai_error(
                        502,
                        "The model server closed the connection before answering.",
                        "upstream_unavailable",
                        "server_error",
                    ),
                )
                return True
            raise
        finally:
            up_writer.close()

    async def relay_events(
        self,
        up_reader: asyncio.StreamReader,
        response: Message,
        exchange: Exchange,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Each complete event goes to the client as soon as it is complete (one HTTP chunk)."""
        pending = b""
        try:
            async for part in body_parts(up_reader, response, until_close=True):
                pending += part
                events = []
                while (end := pending.find(b"\n\n")) >= 0:
                    raw, pending = pending[: end + 2], pending[end + 2 :]
                    if read_event(raw, exchange, time.monotonic()):
                        events.append(raw)
                if events:
                    data = b"".join(events)
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                    await writer.drain()
            if pending:
                writer.write(b"%x\r\n%s\r\n" % (len(pending), pending))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, Closed):
            exchange.status = 499  # the client left: vLLM aborts the request when we close
            exchange.usage = None
            raise Closed from None
