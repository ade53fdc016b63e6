#!/usr/bin/env python3
"""Loopback ports of this machine forwarded into the one-node cluster's network namespace.

    forward.py HOLDER_PID LISTEN_PORT:TARGET_HOST:TARGET_PORT ...

Each listener is bound in the host's network namespace (127.0.0.1 only); then this process joins
the node's namespace, so every outgoing connection (to the API server, to a NodePort) is made
there. Threads started after ``setns`` inherit the node's namespace. Started and stopped by
scripts/k8s/cluster.sh.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000


def pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def serve(listener: socket.socket, target: tuple[str, int]) -> None:
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection(target, timeout=5)
            upstream.settimeout(None)
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


def main(argv: list[str]) -> None:
    holder, routes = int(argv[0]), argv[1:]
    listeners = []
    for route in routes:
        port, host, target_port = route.split(":")
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(128)
        listeners.append((listener, (host, int(target_port))))
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/proc/{holder}/ns/net", os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns into the node's network namespace failed")
    threads = [threading.Thread(target=serve, args=item, daemon=True) for item in listeners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main(sys.argv[1:])
