"""The usage meter: usage per API key name, and each key's fair share of the engine's slots.

It sits in the front's path, between nginx's public server (keys, limits, TLS) and nginx's
return listener (the rotation of gated replicas): ``client -> nginx -> meter -> nginx -> vLLM``.
nginx sends it the key's *name* in ``X-Glm-Client`` (never the key: that stops at nginx).

Why a process of its own and not nginx: counting tokens means reading each answer's ``usage``,
which for a stream is the last server-sent event, and vLLM sends that event only when the request
asked for it (``stream_options.include_usage``). nginx can neither rewrite a JSON body nor read SSE
events (njs could read them, but its body rewrite needs a subrequest, which buffers the stream, and
Debian's nginx has no njs). So the meter:

- adds ``stream_options.include_usage`` to a streamed chat or completion that did not ask for it,
  and drops the usage event from what that client receives: every client gets exactly the events
  it asked for, each forwarded the moment it is complete (no buffering: TTFT is unchanged);
- counts per key name the ``usage`` of every answer (plain or streamed) as vLLM sent it, the
  requests by HTTP status, and the time to first token (streams) and to the last byte;
- admits at most the key's share of the engine's slots at once (below) and answers the rest with
  OpenAI's 429 and ``Retry-After`` before a byte of the stream was sent: never a cut stream.

The fair share. vLLM admits first come first served up to ``--max-num-seqs`` (a800: 32), so a
key that holds every slot with long streams makes everybody else wait for whole answers: 0.07 s ->
11.3 s of TTFT measured (issue 36). ``--scheduling-policy priority`` (a ``priority`` per request) is
an order, not a share: a higher key's flood starves a lower one, equal keys are first come first
served again, and a priority per key needs the front to set it (vLLM reads it from the body). A per-key rate (nginx's 10 r/s) does not bound slots: 24 streams
of 40 s are well under any rate. Slots are what must be shared. Each key's share is
``capacity x weight / sum of weights`` (at least 1), ``capacity`` being ``--max-num-seqs`` times the
replicas. A key may go beyond its share into slots no one else can claim now: it always leaves
free the unused part of every recently active key's share and, while any key is idle, one share
for it, so the next request of another key finds a free slot at once. With two keys that is a
strict half each; with many keys, a lone busy key can use most of the box.

Standard library only (like the simulator): it runs on a bare ``python3``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

# Run as `python3 -I -S usage_meter.py`: -I leaves the script's own folder off the path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from meter_proxy import MAX_HEAD, Proxy
from meter_shares import Meter


async def serve(args: argparse.Namespace) -> None:
    host, _, port = args.upstream.rpartition(":")
    proxy = Proxy(Meter(), (host, int(port)))
    server = await asyncio.start_server(proxy.serve, args.host, args.port, limit=MAX_HEAD)
    print(f"usage meter on {args.host}:{args.port}, requests go on to {args.upstream}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=9147, help="where nginx sends the inference routes")
    parser.add_argument("--upstream", required=True, help="nginx's return listener, host:port")
    parser.add_argument("--host", default="0.0.0.0")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
