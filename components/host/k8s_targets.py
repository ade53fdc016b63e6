"""The serving pods as a Prometheus ``file_sd`` target file, from the Kubernetes API.

Runs beside Prometheus in its pod (components/kubernetes/monitoring.py): every few seconds it lists the
namespace's pods with the stack's serving labels (the pod's service-account token; its Role may
only list pods) and writes ``[{"targets": ["<pod IP>:<port>"], "labels": {"host": "<pod>"}}]``
atomically. Why not ``kubernetes_sd_configs``: Debian's Prometheus (the local and rehearsal
image) is built without Kubernetes discovery, and file discovery is in every build.

Standard library only: it is mounted from a ConfigMap and run by any python3.

    python3 k8s_targets.py NAMESPACE LABEL_SELECTOR PORT OUT_FILE [PERIOD_SECONDS] [ROTATION_PORT]
    python3 k8s_targets.py --routes NAMESPACE LABEL_SELECTOR PORT OUT_FILE PERIOD_SECONDS

With ROTATION_PORT, the serving pods' rotation too, as a Docker front's rotation publishes it
(templates/rotation.sh: ``glm_rotation_in``, ``glm_rotation_events_total``,
``glm_rotation_last_event_timestamp_seconds``), served on 127.0.0.1:ROTATION_PORT for the
``front-rotation`` job: a pod is in rotation while Ready (its gate's checks pass: the Service sends
it requests), ``gate_passed`` when it becomes Ready, ``gate_failed`` when it stops being Ready,
``drained`` when it is being deleted. The status page and the dashboard read them as on Docker hosts.

With ``--routes`` it runs in each front pod instead (components/kubernetes/front.py), and writes the
serving pods a request may go to now (:func:`routes`): the usage meter routes each request to one of
them (components/host/meter/meter_pods.lua), so that it sees what each pod runs, as a Docker front
sees its replicas, instead of a Service picking a pod at random per connection.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import ssl
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def targets(pods: list[dict[str, Any]], port: int) -> list[dict[str, Any]]:
    """One target per running pod with an address, sorted by name (a stable file)."""
    found = [
        {"targets": [f"{p['status']['podIP']}:{port}"], "labels": {"host": p["metadata"]["name"]}}
        for p in pods
        if p.get("status", {}).get("podIP") and p["status"].get("phase") == "Running"
    ]
    return sorted(found, key=lambda t: t["labels"]["host"])


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def routes(pods: list[dict[str, Any]], port: int, now: float) -> str:
    """The routes file: ``written <unix time>``, then ``<pod> <IP>:<port>`` for each pod a request may
    go to (Ready: its gate's checks pass, as the Service counts it; not being deleted; an address),
    sorted by name. The meter ignores a file whose time is old (this lister stopped)."""
    lines = [f"written {now:.3f}"]
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        address = pod.get("status", {}).get("podIP")
        if address and ready(pod) and not pod["metadata"].get("deletionTimestamp"):
            host = f"[{address}]" if ":" in address else address
            lines.append(f"{pod['metadata']['name']} {host}:{port}")
    return "\n".join(lines) + "\n"


class Rotation:
    """The serving pods' rotation, from the pods as listed, one look at a time."""

    def __init__(self) -> None:
        self.state: dict[str, bool] = {}
        self.events: dict[tuple[str, str], tuple[int, float]] = {}
        self.lock = threading.Lock()

    def _event(self, host: str, event: str, now: float) -> None:
        count, _when = self.events.get((host, event), (0, 0.0))
        self.events[(host, event)] = (count + 1, now)

    def look(self, pods: list[dict[str, Any]], now: float) -> None:
        with self.lock:
            seen = set()
            for pod in pods:
                host = pod["metadata"]["name"]
                seen.add(host)
                leaving = bool(pod["metadata"].get("deletionTimestamp"))
                is_in = ready(pod) and not leaving
                was_in = self.state.get(host)
                if leaving and (host, "drained") not in self.events:
                    self._event(host, "drained", now)
                elif is_in and not was_in:
                    self._event(host, "gate_passed", now)
                elif was_in and not is_in:
                    self._event(host, "gate_failed", now)
                self.state[host] = is_in
            for host in list(self.state):
                if host not in seen:
                    del self.state[host]  # gone: its events stay, as a Docker front keeps a host's

    def text(self) -> str:
        with self.lock:
            lines = [
                "# HELP glm_rotation_in 1 while the pod is in the Service (Ready: its gate's checks pass), 0 while out.",
                "# TYPE glm_rotation_in gauge",
                *(f'glm_rotation_in{{host="{h}"}} {int(v)}' for h, v in sorted(self.state.items())),
                "# HELP glm_rotation_events_total Rotation changes of each pod: gate_passed (Ready), "
                "gate_failed (no longer Ready), drained (being deleted).",
                "# TYPE glm_rotation_events_total counter",
                *(f'glm_rotation_events_total{{host="{h}",event="{e}"}} {c}'
                  for (h, e), (c, _w) in sorted(self.events.items())),
                "# HELP glm_rotation_last_event_timestamp_seconds When each pod's event last happened.",
                "# TYPE glm_rotation_last_event_timestamp_seconds gauge",
                *(f'glm_rotation_last_event_timestamp_seconds{{host="{h}",event="{e}"}} {w:.3f}'
                  for (h, e), (_c, w) in sorted(self.events.items())),
            ]  # fmt: skip
        return "\n".join(lines) + "\n"


def serve_rotation(rotation: Rotation, port: int) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = rotation.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def list_pods(namespace: str, selector: str) -> list[dict[str, Any]]:
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    with open(f"{ACCOUNT}/token") as f:
        token = f.read().strip()
    url = f"https://{host}:{port}/api/v1/namespaces/{namespace}/pods?labelSelector={urllib.parse.quote(selector)}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cafile=f"{ACCOUNT}/ca.crt")
    with urllib.request.urlopen(request, timeout=10, context=context) as resp:
        return list(json.load(resp)["items"])


def write(path: str, content: list[dict[str, Any]] | str) -> None:
    staging = f"{path}.tmp"
    with open(staging, "w") as f:
        if isinstance(content, str):
            f.write(content)
        else:
            json.dump(content, f, indent=1)
    os.replace(staging, path)


def keep_routes(argv: list[str]) -> None:
    """``--routes``: the serving pods' routes file, every PERIOD_SECONDS."""
    namespace, selector, port, out, period = argv[0], argv[1], int(argv[2]), argv[3], float(argv[4])
    said = ""
    while True:
        try:
            write(out, routes(list_pods(namespace, selector), port, time.time()))
            said = ""
        except (OSError, ValueError, KeyError) as err:
            problem = f"k8s_targets: {type(err).__name__}: {err}"
            if problem != said:  # said once: the meter routes through the Service while it lasts
                print(problem, file=sys.stderr, flush=True)
                said = problem
        time.sleep(period)


def main(argv: list[str]) -> None:
    # The container's first process: without a handler of its own it ignores SIGTERM, and its pod
    # (a front pod deleted) waits out the whole grace period for it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if argv[:1] == ["--routes"]:
        keep_routes(argv[1:])
        return
    namespace, selector, port, out = argv[0], argv[1], int(argv[2]), argv[3]
    period = float(argv[4]) if len(argv) > 4 else 5.0
    rotation = Rotation() if len(argv) > 5 else None
    if rotation is not None:
        serve_rotation(rotation, int(argv[5]))
    while True:
        try:
            listed = list_pods(namespace, selector)
            write(out, targets(listed, port))
            if rotation is not None:
                rotation.look(listed, time.time())
        except (OSError, ValueError, KeyError) as err:
            print(f"k8s_targets: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        time.sleep(period)


if __name__ == "__main__":
    main(sys.argv[1:])
