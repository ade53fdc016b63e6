"""The README's tool-call request, its snippets as written, against the simulator behind the real front.

The section "### A tool call" holds three blocks: the exports (the stack outputs they read must
exist), the curl and the openai client. Both requests are run as the README has them, with bash and
with this project's Python, through a real nginx with the rendered front config in front of the
vLLM-protocol simulator; each must get a ``get_weather`` call back. The curl's body must be the one
the gate's ``tool_call`` step sends (components/gate/steps.py).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.gate.run import CHAT_MAX_TOKENS
from components.gate.settings import SmokeConfig
from components.gate.steps import WEATHER_TOOL
from tests.conftest import PROJECT, run_program
from tests.front_rig import KEYS, SERVED, UNLIMITED_ADDRESS, Front, nginx_front, stack, vllm_sim

SECTION = "### A tool call"


def readme_blocks() -> list[tuple[str, str]]:
    """(language, code) of each fenced block in the README's tool-call section, in order."""
    readme = (PROJECT / "README.md").read_text()
    start = readme.index(f"\n{SECTION}\n")
    section = readme[start : readme.index("\n### ", start + 1)]
    return re.findall(r"^```(\w+)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)


@pytest.fixture(scope="module")
def front() -> Iterator[Front]:
    with (
        vllm_sim() as sim_port,
        nginx_front(stack("local", front=UNLIMITED_ADDRESS), f"127.0.0.1:{sim_port}") as f,
    ):
        yield f


@pytest.fixture(scope="module")
def env(front: Front) -> dict[str, str]:
    """What the exports and ``make up``'s key line give the snippets."""
    return {
        **os.environ,
        "GLM_ENDPOINT": f"{front.base}/v1",
        "GLM_MODEL": SERVED,
        "GLM_API_KEY": KEYS["alice"],
    }


def test_the_section_has_the_exports_a_curl_and_a_client() -> None:
    blocks = readme_blocks()
    assert [language for language, _ in blocks] == ["bash", "bash", "python"], blocks
    exports = blocks[0][1]
    outputs = run_program("local").outputs
    for name, output in (("GLM_ENDPOINT", "endpoint"), ("GLM_MODEL", "servedModelName")):
        assert f"export {name}=$(scripts/pulumi.sh stack output {output} -s local)" in exports
        assert output in outputs
    assert outputs["servedModelName"] == SERVED


def test_the_curl_sends_what_the_gate_sends_and_gets_a_tool_call(env: dict[str, str], tmp_path: Path) -> None:
    sent = tmp_path / "argv"
    # The README's command as written; a function in front of the real curl keeps its arguments.
    shim = f'curl() {{ printf "%s\\0" "$@" > {sent}; command curl "$@"; }}\n'
    result = subprocess.run(
        ["bash", "-c", shim + readme_blocks()[1][1]], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    argv = sent.read_text().split("\0")
    body = json.loads(argv[argv.index("-d") + 1])
    gate = {
        "model": SERVED,
        "messages": [{"role": "user", "content": SmokeConfig().tool_prompt}],
        "max_tokens": CHAT_MAX_TOKENS,
        "temperature": 0,
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
    }
    assert body == gate
    reply = json.loads(result.stdout)
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", reply
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_the_openai_client_snippet_sends_what_the_gate_sends() -> None:
    tree = ast.parse(readme_blocks()[2][1])
    assigned = {
        node.targets[0].id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert ast.literal_eval(assigned["weather"]) == WEATHER_TOOL
    create = assigned["reply"]
    assert isinstance(create, ast.Call)
    sent = {k.arg: k.value for k in create.keywords}
    assert ast.literal_eval(sent["messages"]) == [{"role": "user", "content": SmokeConfig().tool_prompt}]
    assert {k: ast.literal_eval(sent[k]) for k in ("tool_choice", "max_tokens", "temperature")} == {
        "tool_choice": "auto",
        "max_tokens": CHAT_MAX_TOKENS,
        "temperature": 0,
    }


def test_the_openai_client_snippet_gets_a_tool_call(env: dict[str, str]) -> None:
    code = readme_blocks()[2][1]
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.strip()
    # The snippet's last line says what it prints; it is what came back.
    assert printed == "tool_calls get_weather {'city': 'Paris'}"
    assert code.rstrip().endswith(f"# {printed}")
