"""What the usage meter's stream reader (components/host/meter/meter_answer.lua ``Stream:feed``) costs
per event, in the real nginx's LuaJIT: the part of the meter's work that every token of every
stream pays (docs/front-and-alerts.md, "What it costs").

The stream is the one vLLM 0.25.0 sent on the H200 (tests/fixtures/vllm-0.25.0-h200/chat-stream.sse)
with the usage the meter asks for on each event (``continuous_usage_stats``), written as vLLM writes
it (compact, last member), and the totals' event at the end. It is fed one event at a time, as the
engine writes them, for each thing a client may have asked: no usage, the final usage, or usage on
every event. Printed: microseconds per event, each the best of 5 rounds.

    .venv/bin/python benchmarks/stream_reader.py [--events 200000]

To compare with another commit, run this file against that commit's meter:
``git worktree add /tmp/before <commit>`` and ``GLM_METER_DIR=/tmp/before/components/host/meter``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import metered_front

RECORDED = (
    Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "vllm-0.25.0-h200" / "chat-stream.sse"
)

DRIVER = r"""
local cjson = require("cjson")
local answer = require("meter_answer")
local given = cjson.decode(io.open(IN):read("*a"))
local results = {}
for _, asked in ipairs(given.asked) do
  local shape = { asked_usage = asked ~= "nothing", asked_continuous = asked == "continuous", n = 1 }
  local best = math.huge
  for _ = 1, 5 do
    local fed, started = 0, os.clock()
    while fed < given.events do
      local stream = answer.Stream(shape, false)
      for _, event in ipairs(given.stream) do
        stream:feed(event, false)
      end
      fed = fed + #given.stream
    end
    best = math.min(best, (os.clock() - started) / fed * 1e6)
  end
  results[asked] = best
end
reply(results)
"""


def metered_stream() -> list[str]:
    """The recorded events, each with vLLM's continuous usage, then the totals' event and [DONE]."""
    prompt, events = 9, []
    chunks = [line for line in RECORDED.read_text().split("\n\n") if line.startswith("data: {")]
    for completion, line in enumerate(chunks, start=1):
        usage = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        }
        event = json.loads(line[6:]) | {"usage": usage}
        events.append(f"data: {json.dumps(event, separators=(',', ':'))}\n\n")
    final = json.loads(chunks[-1][6:]) | {"choices": [], "usage": usage}
    events.append(f"data: {json.dumps(final, separators=(',', ':'))}\n\n")
    return [*events, "data: [DONE]\n\n"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="events fed per round")
    args = parser.parse_args()
    if "GLM_METER_DIR" in os.environ:
        metered_front.METER_DIR = Path(os.environ["GLM_METER_DIR"])
    stream = metered_stream()
    asked = ["nothing", "include_usage", "continuous"]
    said = metered_front.run_in_nginx_lua(
        ["meter_answer"], DRIVER, {"stream": stream, "events": args.events, "asked": asked}
    )
    assert isinstance(said, dict)
    print(
        f"stream reader ({metered_front.METER_DIR}): {len(stream)} events a stream, {args.events} fed per round"
    )
    for name in asked:
        print(f"  asked {name:14s} {said[name]:.2f} us per event")


if __name__ == "__main__":
    main()
