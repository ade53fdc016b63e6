"""What ``ops look-at`` is shown on Kubernetes: the failures, the kubectl it renders and its words."""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.conftest import Deployment, run_program, unwrap
from tests.k8s_rendered import DEPLOYMENT, SERVICE, k8s_target

NAMESPACE = "glm53-look"
KEY = "sk-look-at-3f9c1a7e5b2d8f4a6c0e"


@pytest.fixture(scope="module")
def stacks() -> dict[str, Deployment]:
    """The local stack on the cluster (2 pods, a namespace of its own) and on its Docker host."""
    return {
        "k8s": run_program("local", {"glm:target": k8s_target(namespace=NAMESPACE)}),
        "docker": run_program("local"),
    }


def rendered_kubectl(deployment: Deployment) -> dict[str, list[str]]:
    """The commands a user needs for the objects as rendered: the serving container's log, the
    stack's pods (the front's among them), and the serving pods as they run."""
    serving = unwrap(deployment.one(DEPLOYMENT, "-vllm").inputs)
    meta, pods = serving["metadata"], serving["spec"]["template"]
    [vllm] = [c for c in pods["spec"]["containers"] if c.get("command") == ["vllm", "serve"]]
    labels = pods["metadata"]["labels"]
    assert serving["spec"]["selector"]["matchLabels"] == labels
    assert unwrap(deployment.one(SERVICE, "-vllm-service").inputs)["spec"]["selector"] == labels
    front = unwrap(deployment.one(DEPLOYMENT, "-front").inputs)["metadata"]
    assert front["namespace"] == meta["namespace"] == NAMESPACE  # `get pods` there lists the front's
    kubectl = ["kubectl", "-n", meta["namespace"]]
    selector = ",".join(sorted(f"{k}={v}" for k, v in labels.items()))
    return {
        # every serving pod's log, each line under its pod's name (kubectl logs --help)
        "logs": [*kubectl, "logs", "-l", selector, "-c", vllm["name"], "--prefix", "--tail=50"],
        "running": [*kubectl, "get", "pods"],
        "inspect": [*kubectl, "describe", "pods", "-l", selector],
    }


def as_argv(command: str) -> list[str]:
    """A command's words, a ``-l`` selector's labels in one order (kubectl reads them in any)."""
    words = shlex.split(command)
    return [",".join(sorted(w.split(","))) if i and words[i - 1] == "-l" else w for i, w in enumerate(words)]


# ---- the failures, driven ------------------------------------------------------------------------


class StandInFront(BaseHTTPRequestHandler):
    """Answers ``/v1/models`` as the stack's front would (or with another length), and a chat with
    a 500 or by dropping the connection."""

    served_name: str
    max_model_len: int
    chat: str

    def do_GET(self) -> None:
        body = json.dumps({"data": [{"id": self.served_name, "max_model_len": self.max_model_len}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.chat == "drop":
            self.close_connection = True  # no status line: the client's read fails
            return
        self.send_response(500)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(served_name: str, max_model_len: int, chat: str = "500") -> str:
        values = {"served_name": served_name, "max_model_len": max_model_len, "chat": chat}
        server = ThreadingHTTPServer(("127.0.0.1", 0), type("Front", (StandInFront,), values))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


FAILURES = {
    # the failure: (what the stand-in does, the step, which of the commands the message names)
    "readiness times out": ("closed", "readiness", "logs"),
    "another max_model_len": ("length", "models", "inspect"),
    "a chat the engine fails": ("500", "arithmetic", "logs"),
    "a chat's connection dropped": ("drop", "arithmetic", "running"),
}


DOCKER_SAYS = {
    "logs": "docker logs {container}",
    "inspect": "docker inspect {container}",
    "running": "(docker ps), and the log of {container}.",
}
"""Docker's words, as the gate said them before the cluster had its own."""
