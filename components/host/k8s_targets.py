"""The serving pods as a Prometheus ``file_sd`` target file, from the Kubernetes API.

Runs beside Prometheus in its pod (components/k8s_monitoring.py): every few seconds it lists the
namespace's pods with the stack's serving labels (the pod's service-account token; its Role may
only list pods) and writes ``[{"targets": ["<pod IP>:<port>"], "labels": {"host": "<pod>"}}]``
atomically. Why not ``kubernetes_sd_configs``: Debian's Prometheus (the local and rehearsal
image) is built without Kubernetes discovery, and file discovery is in every build.

Standard library only: it is mounted from a ConfigMap and run by any python3.

    python3 k8s_targets.py NAMESPACE LABEL_SELECTOR PORT OUT_FILE [PERIOD_SECONDS]
"""

from __future__ import annotations

import json
import os
import ssl
import sys
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


def write(path: str, content: list[dict[str, Any]]) -> None:
    staging = f"{path}.tmp"
    with open(staging, "w") as f:
        json.dump(content, f, indent=1)
    os.replace(staging, path)


def main(argv: list[str]) -> None:
    namespace, selector, port, out = argv[0], argv[1], int(argv[2]), argv[3]
    period = float(argv[4]) if len(argv) > 4 else 5.0
    while True:
        try:
            write(out, targets(list_pods(namespace, selector), port))
        except (OSError, ValueError, KeyError) as err:
            print(f"k8s_targets: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        time.sleep(period)


if __name__ == "__main__":
    main(sys.argv[1:])
