"""What the request-shape tests share: a simulator of their own, its token counters, SSE reading.

The expected values of these tests are vLLM's, read in its source (vLLM 0.25.0, from the
``vllm-0.25.0`` wheel, commit ``dd10e03f9``; checked against 0.33.0, the simulator's default
version, where they agree unless a test says otherwise). File:line references are to 0.25.0.
"""

from __future__ import annotations

import json

import httpx

from .conftest import MODEL, Sim

POEM = "Write a poem about the sea."  # no arithmetic, no tools: filler to max_tokens


class Counters:
    """The engine's token counters before a request; ``delta()`` after it."""

    def __init__(self, sim: Sim):
        self.sim = sim
        self.before = self.read()

    def read(self) -> tuple[float, float]:
        return (
            self.sim.metric("vllm:prompt_tokens_total"),
            self.sim.metric("vllm:generation_tokens_total"),
        )

    def delta(self) -> tuple[float, float]:
        after = self.read()
        return after[0] - self.before[0], after[1] - self.before[1]


def chat_prompt_tokens(sim: Sim, content: str) -> int:
    """The prompt's tokens as the server counts them (``/tokenize`` with the messages)."""
    messages = [{"role": "user", "content": content}]
    return sim.http.post("/tokenize", json={"model": MODEL, "messages": messages}).json()["count"]


def text_prompt_tokens(sim: Sim, prompt: str) -> int:
    return sim.http.post("/tokenize", json={"model": MODEL, "prompt": prompt}).json()["count"]


def sse_events(response: httpx.Response) -> list:
    """The ``data:`` payloads of a server-sent event stream (JSON, or the ``[DONE]`` string)."""
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def bad_request(resp: httpx.Response) -> dict:
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == 400
    return err
