"""What one fair-share decision costs the meter (components/host/meter/meter_shares.lua ``fits``),
on one front and on a front pod that also weighs the whole stack's share (Kubernetes), side by side
in one run of nginx's LuaJIT, over a table with the shared dict's get/set/incr.

    .venv/bin/python benchmarks/share_decision.py [--keys 2 8 32] [--decisions 20000]

The case is the one that costs most: a key beyond this pod's share asking while every other key is
active (each holds a slot and asked lately), so ``fits`` weighs every other key's headroom. Printed:
microseconds per decision, one front and a front pod, and their ratio, per number of keys.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.metered_front import run_in_nginx_lua

DRIVER = """
local cjson = require("cjson")
local shares = require("meter_shares")
local input = cjson.decode(io.open(IN):read("*a"))
local function decisions(keys, stack, count)
  local data = {}
  local store = table_dict(data)
  local weights = {}
  for i = 1, keys do weights["key" .. i] = 1 end
  local capacity = 4 * keys
  local share = shares.new(store, { weights = weights }, stack and 2 * capacity or nil)
  for i = 1, keys do
    share:admit("key" .. i, 1, capacity, 0)
    data["peers:held:key" .. i] = 1
  end
  for _ = 1, 4 * keys do share:admit("key1", 1, capacity, 0) end -- key1 beyond its share here
  local started = os.clock()
  for _ = 1, count do share:fits("key1", 1, capacity, 1) end
  return (os.clock() - started) / count * 1e6
end
local said = {}
for _, keys in ipairs(input.keys) do
  decisions(keys, false, 1000)
  said[#said + 1] = { keys, decisions(keys, false, input.count), decisions(keys, true, input.count) }
end
reply(said)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--decisions", type=int, default=20_000)
    args = parser.parse_args()
    said = run_in_nginx_lua(["meter_shares"], DRIVER, {"keys": args.keys, "count": args.decisions})
    assert isinstance(said, list)
    print("| keys | one front, µs a decision | a front pod (the stack's share too) | ratio |")
    print("|---|---|---|---|")
    for keys, alone, pod in said:
        print(f"| {keys} | {alone:.2f} | {pod:.2f} | {pod / alone:.2f}× |")


if __name__ == "__main__":
    main()
