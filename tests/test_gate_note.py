"""What `make up` ends with (scripts/gate_note.py): "answers" only after asking the endpoint in that
run. The script runs as up.sh runs it, against a real HTTP server that answers as the front does."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from tests.engine import PROJECT, free_port

HISTORY = [{"startTime": "2026-12-05T21:30:00.000Z", "resourceChanges": {"same": 31}}]
GATE = "urn:pulumi:local::glm::glm:smoke:SmokeTest$pulumi-python:dynamic:Resource::local-smoke-gate"
STATE = {"deployment": {"resources": [{"urn": GATE, "modified": "2026-12-05T21:25:34.1Z"}]}}
NO_REPLICA = {
    "error": {"code": "no_replica_in_rotation", "message": "no serving replica has passed its gate"}
}


class Front(BaseHTTPRequestHandler):
    """The front's /v1/chat/completions: 200 with ``answer``, or ``status`` with the front's JSON error."""

    answer = "221"
    status = 200
    asked: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Front.asked.append({"path": self.path, "auth": self.headers["Authorization"], **body})
        reply = (
            {"choices": [{"message": {"role": "assistant", "content": self.answer}}]}
            if self.status == 200
            else NO_REPLICA
        )
        data = json.dumps(reply).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def front() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Front)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Front.answer, Front.status, Front.asked = "221", 200, []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def make_up_ends(tmp_path: Path, endpoint: str) -> subprocess.CompletedProcess[str]:
    """scripts/gate_note.py as scripts/up.sh runs it: history, state, outputs, the stack's name."""
    files = {
        "history": HISTORY,
        "state": STATE,
        "outputs": {"endpoint": endpoint, "servedModelName": "glm-5.3-flash"},
    }
    for name, content in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(content))
    return subprocess.run(
        [sys.executable, str(PROJECT / "scripts" / "gate_note.py"), *(str(tmp_path / f"{n}.json") for n in files), "local"],
        env={"GLM_API_KEY": "sk-local-test", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_it_says_answers_after_the_front_answered_the_gates_question(tmp_path: Path, front: str) -> None:
    done = make_up_ends(tmp_path, front)
    assert done.returncode == 0, done.stderr
    first = done.stdout.strip().splitlines()[0]
    assert first.startswith(f"The local stack answers at {front} (asked just now: 13×17 came back 221 in ")
    assert first.endswith(
        "; nothing changed, so no gate ran: the smoke gate last passed at 2026-12-05 21:25:34 UTC)."
    )
    [asked] = Front.asked
    assert asked["path"] == "/v1/chat/completions" and asked["auth"] == "Bearer sk-local-test"
    assert asked["model"] == "glm-5.3-flash"


def test_a_503_is_not_answers_it_says_what_came_back_and_what_to_run(tmp_path: Path, front: str) -> None:
    Front.status = 503
    done = make_up_ends(tmp_path, front)
    assert done.returncode == 1
    said = done.stdout.strip().splitlines()
    assert said[0] == (
        f"The local stack does not answer at {front}: asked just now, it got HTTP 503 (no_replica_in_rotation: "
        "no serving replica has passed its gate); nothing changed, so no gate ran: the smoke gate last passed at "
        "2026-12-05 21:25:34 UTC."
    )
    assert "make status" in said[1] and "make up" in said[2] and "answers at" not in done.stdout


def test_a_wrong_answer_is_not_answers(tmp_path: Path, front: str) -> None:
    Front.answer = "222"
    done = make_up_ends(tmp_path, front)
    assert (
        done.returncode == 1
        and "but 'What is 13×17? Answer with the number only.' came back '222'" in done.stdout
    )


def test_nothing_listening_is_not_answers(tmp_path: Path) -> None:
    done = make_up_ends(tmp_path, f"http://127.0.0.1:{free_port()}/v1")
    assert (
        done.returncode == 1 and "does not answer at" in done.stdout and "Connection refused" in done.stdout
    )
