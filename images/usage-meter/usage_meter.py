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
- admits at most the key's share of the engine's slots at once (below); a request beyond it waits
  up to ``--queue-seconds`` for a slot to free, and then gets OpenAI's 429 and ``Retry-After``
  before a byte of the stream was sent: never a cut stream.

The fair share. vLLM admits first come first served up to ``--max-num-seqs`` (a800: 32), so a
key that holds every slot with long streams makes everybody else wait for whole answers: 0.07 s ->
11.3 s of TTFT measured (issue 36). ``--scheduling-policy priority`` (a ``priority`` per request) is
an order, not a share: a higher key's flood starves a lower one, equal keys are first come first
served again, and a priority per key needs the front to set it (vLLM reads it from the body). A per-key rate (nginx's 10 r/s) does not bound slots: 24 streams
of 40 s are well under any rate. Slots are what must be shared, and work-conserving: a slot kept
for a key that is not there is a slot nobody uses. ``capacity`` is ``--max-num-seqs`` times the
replicas in rotation (nginx's ``$replicas_in_rotation``). Among the keys *active* now (asked in the
last 60 s, or hold a slot), each is sure of ``capacity x weight / their weights`` (at least 1): it is
admitted up to that even when the engine is full, and its request waits in vLLM for the first slot
that frees. Beyond its share a key may take any slot but the *headroom* of every other active key:
as many slots as that key held at once lately (at least one) on top of what it holds, within its
share. vLLM cannot preempt a running stream, so a slot the flooder holds frees only when its stream
ends; the headroom is what the other key finds free the moment it asks, and as the flooder's
streams end it gets none back until the headroom is free again. A lone key gets every slot; beside
a key that sends one request at a time (the semantic probe) all but one, two while that one runs.

Why wait before refusing. The capacity follows the rotation: when a replica leaves it (ejected by
the semantic probe, or rolled), the shares shrink at once, and a client that used its share of the
larger fleet would get 429s until streams of the smaller one end, seconds later. Waiting up to
``--queue-seconds`` (``glm:front.usageMeter.queueSeconds``, 10 s) for a slot turns such a dip into
latency, as vLLM's own queue would without the meter; a flood longer than that is still refused.
The key within its share never waits here (it is admitted, and waits in vLLM if the engine is full).

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
    proxy = Proxy(Meter(), (host, int(port)), args.queue_seconds)
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
    parser.add_argument(
        "--queue-seconds",
        type=float,
        default=10.0,
        help="how long a request beyond its key's share waits for a slot before its 429",
    )
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
