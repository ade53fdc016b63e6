"""Every request in README.md and docs/*.md, as written, against what the local stack serves
(issue 47 item 10: docs/front-and-alerts.md sent `"model":"zai-org/GLM-5.3-Flash"` to `$GLM_URL`,
which the local stack answers with a 404 "The model … does not exist" and no variable set).

Each fenced ``curl`` command and each ``openai`` client snippet: it uses only the variables the
README defines (its exports, and the key line ``make up`` prints), its model is ``$GLM_MODEL``, and
its path is one of the local front's routes (the rendered nginx.conf's locations). Then each runs,
as written, against the vLLM-protocol simulator behind the real front, and gets a 200.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.config import build_stack_config
from components.render.nginx_conf import render_nginx_conf
from tests.conftest import PROJECT
from tests.front_rig import KEYS, SERVED, UNLIMITED_ADDRESS, Front, nginx_front, stack, vllm_sim

DOCS = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]
FENCE = re.compile(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Request:
    where: str
    """``docs/x.md:LINE``"""
    kind: str
    """``curl`` or ``python``"""
    code: str


def fenced(path: Path) -> Iterator[tuple[str, str, int]]:
    text = path.read_text()
    for match in FENCE.finditer(text):
        yield match.group(1), match.group(2), text.count("\n", 0, match.start()) + 2


def curl_commands(code: str) -> Iterator[tuple[str, int]]:
    """Each ``curl`` command of a shell block, continuation lines and multi-line quotes joined."""
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].lstrip().startswith("curl "):
            i += 1
            continue
        start, command = i, lines[i]
        while True:
            joined = command.replace("\\\n", " ")
            try:
                shlex.split(joined)
                complete = not command.rstrip().endswith("\\")
            except ValueError:  # a quote still open: the command goes on
                complete = False
            if complete or i + 1 >= len(lines):
                break
            i += 1
            command += "\n" + lines[i]
        yield command.replace("\\\n", " "), start
        i += 1


def requests() -> list[Request]:
    found = []
    for path in DOCS:
        name = path.relative_to(PROJECT)
        for language, code, line in fenced(path):
            if language in ("bash", "sh", "shell", ""):
                found += [Request(f"{name}:{line + n}", "curl", c) for c, n in curl_commands(code)]
            if language == "python" and "OpenAI(" in code:
                found.append(Request(f"{name}:{line}", "python", code))
    return found


def readme_variables() -> set[str]:
    """The variables the README defines: its exports, and the one in the key line ``make up`` prints."""
    readme = (PROJECT / "README.md").read_text()
    exported = {
        name for _, code, _ in fenced(PROJECT / "README.md") for name in re.findall(r"export (\w+)=", code)
    }
    # make up's ending (scripts/gate_note.py, which up.sh runs) prints the key line.
    printed = set(re.findall(r"export (\w+)=", (PROJECT / "scripts" / "gate_note.py").read_text()))
    assert all(f"${name}" in readme for name in printed), "the README does not mention make up's key line"
    return exported | printed


def front_routes() -> set[str]:
    """The exact paths the local stack's front serves (``location = …`` of its rendered nginx.conf)."""
    config = build_stack_config({"hardware": "local"})
    conf = render_nginx_conf(config.front, "127.0.0.1:8000", {"ops": KEYS["alice"]})
    return set(re.findall(r"^\s*location = (/\S+)", conf, re.MULTILINE))


REQUESTS = requests()


def test_the_docs_requests_are_found() -> None:
    """Not vacuous: the README's tool call (curl and client), docs/front-and-alerts.md's three curls and client."""
    kinds = [(r.where.split(":")[0], r.kind) for r in REQUESTS]
    assert kinds.count(("README.md", "curl")) >= 1 and kinds.count(("README.md", "python")) >= 1, kinds
    assert kinds.count(("docs/front-and-alerts.md", "curl")) >= 3, kinds
    assert kinds.count(("docs/front-and-alerts.md", "python")) >= 1, kinds


@pytest.mark.parametrize("request_", [r for r in REQUESTS if r.kind == "curl"], ids=lambda r: r.where)
def test_each_curl_uses_the_readmes_variables_the_model_variable_and_a_route_the_front_serves(
    request_: Request,
) -> None:
    words = shlex.split(request_.code)
    used = set(VARIABLE.findall(request_.code))
    assert used <= readme_variables(), f"{request_.where}: {used - readme_variables()} is not the README's"
    url = next(w for w in words[1:] if w.startswith(("$", "http")))
    assert url.startswith("$GLM_ENDPOINT/"), f"{request_.where}: {url} is not under $GLM_ENDPOINT"
    path = "/v1/" + url.removeprefix("$GLM_ENDPOINT/")
    assert path in front_routes(), f"{request_.where}: {path} is not a route of the local front"
    if "-d" in words:
        body = json.loads(words[words.index("-d") + 1])
        assert body.get("model") == "$GLM_MODEL", f"{request_.where}: model {body.get('model')!r}"


@pytest.mark.parametrize("request_", [r for r in REQUESTS if r.kind == "python"], ids=lambda r: r.where)
def test_each_client_snippet_uses_the_readmes_variables_and_the_model_variable(request_: Request) -> None:
    tree = ast.parse(request_.code)
    environ = {
        node.slice.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and ast.unparse(node.value) == "os.environ"
        and isinstance(node.slice, ast.Constant)
    }
    assert environ <= readme_variables(), (
        f"{request_.where}: {environ - readme_variables()} is not the README's"
    )
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    models = [k.value for c in calls for k in c.keywords if k.arg == "model"]
    assert models and all(ast.unparse(m) == "os.environ['GLM_MODEL']" for m in models), request_.where
    bases = [k.value for c in calls for k in c.keywords if k.arg == "base_url"]
    assert [ast.unparse(b) for b in bases] == ["os.environ['GLM_ENDPOINT']"], request_.where


@pytest.fixture(scope="module")
def front() -> Iterator[Front]:
    with (
        vllm_sim() as sim_port,
        nginx_front(stack("local", front=UNLIMITED_ADDRESS), f"127.0.0.1:{sim_port}") as f,
    ):
        yield f


def variables(front: Front) -> dict[str, str]:
    """What the README's exports and `make up`'s key line give a shell on the local stack."""
    return {
        **os.environ,
        "GLM_ENDPOINT": f"{front.base}/v1",
        "GLM_MODEL": SERVED,
        "GLM_API_KEY": KEYS["alice"],
    }


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r.kind}-{r.where}")
def test_each_request_runs_as_written_against_the_front(
    request_: Request, front: Front, tmp_path: Path
) -> None:
    if request_.kind == "curl":
        # The command as written; a function in front of the real curl adds the status line.
        shim = "curl() { command curl -w '\\nHTTP %{http_code}' \"$@\"; }\n"
        argv = ["bash", "-c", shim + request_.code]
    else:
        (tmp_path / "snippet.py").write_text(request_.code)
        argv = [sys.executable, str(tmp_path / "snippet.py")]
    done = subprocess.run(argv, env=variables(front), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{request_.where}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    if request_.kind == "curl":
        assert done.stdout.rstrip().endswith("HTTP 200"), f"{request_.where}:\n{done.stdout[-2000:]}"
