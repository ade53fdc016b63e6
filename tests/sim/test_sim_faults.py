"""VLLM_SIM_FAULT: the misbehaviours the seeds saw, one simulator per fault."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import openai
import pytest

from .conftest import MODEL, SIM, WEATHER_TOOL

LOW = {"chat_template_kwargs": {"reasoning_effort": "low"}}
SHORT_READ = httpx.Timeout(5.0, read=0.5)


def test_wrong_answer(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_FAULT": "wrong-answer"})
    message = s.chat("13×17?", **LOW).json()["choices"][0]["message"]
    assert message["content"] == "222"
    assert message["reasoning"] == "13*17=222"


def test_no_tool_calls(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_FAULT": "no-tool-calls"})
    resp = s.openai().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice="auto",
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    assert choice.message.content


def test_inline_reasoning(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_FAULT": "inline-reasoning"})
    message = s.chat("13×17?", **LOW).json()["choices"][0]["message"]
    assert message["content"] == "<think>13*17=221</think>221"
    assert "reasoning" not in message and "reasoning_content" not in message


def test_silent_accepts_and_never_answers(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_FAULT": "silent"})
    with pytest.raises(httpx.ReadTimeout):
        s.chat("13×17?", timeout=SHORT_READ)
    with (
        pytest.raises(httpx.ReadTimeout),
        s.http.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True},
            timeout=SHORT_READ,
        ),
    ):
        pass  # not even the headers arrive
    assert s.http.get("/health").status_code == 200  # the process itself looks healthy
    assert s.http.get("/v1/models").status_code == 200


def test_http_500(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_FAULT": "http-500"})
    resp = s.chat("13×17?")
    assert resp.status_code == 500
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == 500
    with pytest.raises(openai.InternalServerError):
        s.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "13×17?"}])


def test_reasoning_content_field(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_FAULT": "reasoning-content"})
    message = s.chat("13×17?", **LOW).json()["choices"][0]["message"]
    assert message["reasoning_content"] == "13*17=221"
    assert "reasoning" not in message
    payload = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "13×17?"}],
        "stream": True,
        **LOW,
    }
    deltas = []
    with s.http.stream("POST", "/v1/chat/completions", json=payload) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                deltas.append(json.loads(line[6:])["choices"])
    streamed = "".join(c[0]["delta"].get("reasoning_content", "") for c in deltas if c)
    assert streamed == "13*17=221"
    assert not any("reasoning" in c[0]["delta"] for c in deltas if c)


def test_faults_combine(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_FAULT": "wrong-answer,reasoning-content"})
    message = s.chat("13×17?", **LOW).json()["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"]) == ("222", "13*17=222")


def test_unknown_fault_stops_the_simulator_at_once() -> None:
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(SIM), "serve", "/m"],
        env={"VLLM_SIM_FAULT": "explode"},
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert proc.returncode == 2
    assert "explode" in proc.stderr


def test_runtime_fault_switch_changes_a_running_simulator(start_sim) -> None:
    s = start_sim(env={"VLLM_SIM_RUNTIME_FAULTS": "1"})
    assert s.chat("13×17?", **LOW).json()["choices"][0]["message"]["content"] == "221"
    switched = s.http.put("/sim/faults", json={"faults": ["wrong-answer"]})
    assert switched.json() == {"faults": ["wrong-answer"]}
    assert s.chat("13×17?", **LOW).json()["choices"][0]["message"]["content"] == "222"
    assert s.http.get("/sim/faults").json() == {"faults": ["wrong-answer"]}
    assert s.http.put("/sim/faults", json={"faults": ["no-such-fault"]}).status_code == 400
    s.http.put("/sim/faults", json={"faults": []})
    assert s.chat("13×17?", **LOW).json()["choices"][0]["message"]["content"] == "221"


def test_runtime_fault_switch_is_off_by_default(start_sim) -> None:
    s = start_sim()
    assert s.http.put("/sim/faults", json={"faults": ["wrong-answer"]}).status_code == 404
    assert s.chat("13×17?", **LOW).json()["choices"][0]["message"]["content"] == "221"
