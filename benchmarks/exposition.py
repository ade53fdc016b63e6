"""What one scrape of the meter's counters costs the front (components/host/meter/meter_counters.lua
``exposition``), by the number of keys, in nginx's LuaJIT over a table with the shared dict's
get/set/incr/get_keys. An nginx worker serves the scrape between requests: what it takes, the
requests on that worker wait.

    .venv/bin/python benchmarks/exposition.py [--keys 8 32 128] [--scrapes 200]

Every key is active (holds a slot, asked lately), has counters, histograms and a budget per
minute and per day: the most each key can add to the text. Printed: milliseconds per scrape and the
text's size, per number of keys. The store's get is a Lua table lookup, cheaper than the shared
dict's: read the figures as the meter's own work, compared between versions of it.
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
local budgets = require("meter_budget")
local counters = require("meter_counters")
local input = cjson.decode(io.open(IN):read("*a"))
local function scrapes(keys, count)
  local data = {}
  local store = table_dict(data)
  local weights, limits = {}, {}
  for i = 1, keys do
    local name = "key" .. i
    weights[name] = 1
    limits[name] = { tokens_per_minute = 100000, tokens_per_day = 10000000 }
  end
  local capacity = 4 * keys
  local share = shares.new(store, { weights = weights })
  local budget = budgets.new(store, { limits = limits })
  for i = 1, keys do
    local name = "key" .. i
    share:admit(name, 1, capacity, 0)
    for _, family in ipairs({ "prompt", "completion", "cached", "seen" }) do
      data[family .. ":" .. name] = 1000 * i
    end
    data["requests:" .. name .. ":200"] = 10 * i
    for bucket = 1, #counters.TTFT_BUCKETS do data["ttft:" .. name .. ":" .. bucket] = 1 end
    for bucket = 1, #counters.DURATION_BUCKETS do data["duration:" .. name .. ":" .. bucket] = 1 end
  end
  local text = counters.exposition(store, share, budget, capacity, 1)
  local started = os.clock()
  for _ = 1, count do counters.exposition(store, share, budget, capacity, 1) end
  return { (os.clock() - started) / count * 1e3, #text }
end
local said = {}
for _, keys in ipairs(input.keys) do
  scrapes(keys, 5)
  local ms_and_size = scrapes(keys, input.count)
  said[#said + 1] = { keys, ms_and_size[1], ms_and_size[2] }
end
reply(said)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--scrapes", type=int, default=200)
    args = parser.parse_args()
    modules = ["meter_shares", "meter_budget", "meter_counters"]
    said = run_in_nginx_lua(modules, DRIVER, {"keys": args.keys, "count": args.scrapes})
    assert isinstance(said, list)
    print("| keys | ms a scrape | text |")
    print("|---|---|---|")
    for keys, ms, size in said:
        print(f"| {keys} | {ms:.3f} | {size / 1024:.0f} KiB |")


if __name__ == "__main__":
    main()
