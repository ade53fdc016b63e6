"""Budgets per key (issue 48): the meter's budget (components/host/meter/meter_budget.lua) as pure
decisions in nginx's LuaJIT, then through the real nginx with the simulator and the real ``openai``
client: the request that would cross a limit is the one refused, before any byte, with OpenAI's 429
and ``Retry-After`` at the window's reset; every answer carries OpenAI's ``x-ratelimit-*`` headers;
the client's own retries wait exactly that; the stack's own keys never spend one; a day's use
survives a restart of the front.

The budget's "minute" is shortened to a few seconds in the harness (``minute_seconds``), so a test
waits for a window's reset without waiting a minute; a stack's minute is 60 s.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from components.config import build_stack_config
from tests.metered_front import MeteredFront, metered_front, run_in_nginx_lua

DRIVER = """
local cjson = require("cjson")
local budgets = require("meter_budget")
local input = cjson.decode(io.open(IN):read("*a"))
local store = table_dict({})
local budget = budgets.new(store, input.config)
local said, held = {}, {}
for i, step in ipairs(input.steps) do
  local op, name, now, tokens = step[1], step[2], step[3], step[4]
  local result = cjson.null
  if op == "ask" then -- admitted and reserved, or the refusal
    local refusal = budget:refusal(name, tokens, now)
    if refusal then
      result = { field = refusal.field, used = refusal.used, retry_after = refusal.retry_after,
                 never = refusal.never }
    else
      held[#held + 1] = budget:reserve(name, tokens, now)
      result = #held
    end
  elseif op == "settle" then
    budget:settle(held[step[2]], step[3])
  elseif op == "state" then
    result = budget:state(name, now)
  elseif op == "duration" then
    result = budgets.duration(step[2])
  end
  said[i] = result
end
reply(said)
"""


def run(steps: list[list[Any]], **config: Any) -> list[Any]:
    said = run_in_nginx_lua(["meter_budget"], DRIVER, {"config": config, "steps": steps})
    assert isinstance(said, list)
    return said


TPM = {"limits": {"alice": {"tokens_per_minute": 1000}}}


def test_the_request_that_would_cross_the_limit_is_the_one_refused_until_the_minute_resets() -> None:
    said = run([["ask", "alice", 0.0, 600], ["ask", "alice", 10.0, 300], ["ask", "alice", 20.0, 200],
                ["ask", "alice", 59.5, 101], ["ask", "alice", 60.0, 1000]], **TPM)  # fmt: skip
    assert said[:2] == [1, 2]  # 600 + 300 fit in 1000
    assert said[2] == {"field": "tokens_per_minute", "used": 900, "retry_after": 40, "never": False}
    assert said[3]["retry_after"] == 1  # at least a second, never 0
    assert said[4] == 3  # a new minute, the whole limit again


def test_real_usage_settles_what_the_estimate_reserved() -> None:
    """An estimate of 800 (a bound) reserves 800; the answer cost 150: 850 are left, not 200."""
    said = run(
        [["ask", "alice", 0.0, 800], ["settle", 1, 150], ["state", "alice", 1.0], ["ask", "alice", 2.0, 850]],
        **TPM,
    )
    [state] = said[2]
    assert (state["used"], state["remaining"], state["limit"]) == (150, 850, 1000)
    assert said[3] == 2


def test_one_request_larger_than_the_whole_limit_is_never_admitted() -> None:
    assert run([["ask", "alice", 0.0, 1001]], **TPM)[0]["never"] is True


def test_requests_per_minute_count_requests_and_a_day_outlasts_its_minutes() -> None:
    limits = {"limits": {"bob": {"requests_per_minute": 2, "tokens_per_day": 500}}}
    said = run([["ask", "bob", 0.0, 100], ["ask", "bob", 1.0, 100], ["ask", "bob", 2.0, 100],
                ["ask", "bob", 60.0, 100], ["ask", "bob", 61.0, 100], ["ask", "bob", 120.0, 200]], **limits)  # fmt: skip
    assert said[2]["field"] == "requests_per_minute"
    assert said[3:5] == [3, 4]
    assert said[5] == {"field": "tokens_per_day", "used": 400, "retry_after": 86400 - 120, "never": False}


def test_default_limits_apply_to_keys_unnamed_and_never_to_the_stacks_own() -> None:
    config = {"default_limits": {"requests_per_minute": 1}, "exempt": ["smoke-gate", "semantic-probe"]}
    said = run(
        [["ask", "carol", 0.0, 1], ["ask", "carol", 0.0, 1], *[["ask", "smoke-gate", 0.0, 1]] * 3], **config
    )
    assert said[0] == 1 and said[1]["field"] == "requests_per_minute"
    assert said[2:] == [2, 3, 4]


def test_durations_are_written_as_openai_writes_them() -> None:
    """platform.openai.com/docs/guides/rate-limits: ``x-ratelimit-reset-requests: 1s``,
    ``x-ratelimit-reset-tokens: 6m0s``."""
    assert run([["duration", 1], ["duration", 360], ["duration", 0.5], ["duration", 7260]]) == [
        "1s",
        "6m0s",
        "0.5s",
        "2h1m0s",
    ]


# ---- through nginx, with the openai client ------------------------------------------------------------

KEYS = {"alice": "sk-alice-1403f1510d19d5295321", "bob": "sk-bob-0d08fac0336e7974aa11"}
SERVED = "glm-5.3-flash"
MINUTE = 4
"""The harness's budget "minute", in seconds."""


@pytest.fixture(scope="module")
def budgeted() -> Iterator[MeteredFront]:
    config = build_stack_config(
        {
            "hardware": "local",
            "front": {
                "rateLimit": {"enabled": False},
                "usageMeter": {"limits": {"alice": {"tokensPerMinute": 600, "requestsPerMinute": 100}}},
            },
        }
    )
    with metered_front(config, KEYS, minute_seconds=MINUTE) as front:
        yield front


def ask(client: openai.OpenAI) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=SERVED, messages=[{"role": "user", "content": "What is 13*17?"}], max_tokens=100
    )


def test_every_answer_carries_openais_rate_limit_headers(budgeted: MeteredFront) -> None:
    time.sleep(MINUTE - time.time() % MINUTE + 0.05)  # a fresh window: none ends during the request
    answer = ask(budgeted.client(KEYS["alice"]))
    headers = answer.headers
    assert headers["x-ratelimit-limit-tokens"] == "600" and headers["x-ratelimit-limit-requests"] == "100"
    used = answer.parse().usage.total_tokens
    assert 0 <= int(headers["x-ratelimit-remaining-tokens"]) <= 600 - used
    assert int(headers["x-ratelimit-remaining-requests"]) <= 99
    assert re.fullmatch(r"\d+(\.\d+)?s", headers["x-ratelimit-reset-tokens"])
    bob = ask(budgeted.client(KEYS["bob"])).headers  # no budget: no headers
    assert not [h for h in bob if h.startswith("x-ratelimit")]


def test_a_key_at_its_limit_gets_the_429_at_the_reset_and_the_openai_clients_retries_wait_for_it(
    budgeted: MeteredFront,
) -> None:
    """Each chat reserves its prompt's bytes plus max_tokens 100 (~400 tokens), then costs ~60: the
    one that would cross 600 is refused before any byte, with Retry-After at the minute's end. The
    real client, told to retry, waits that long and gets its answer in the next minute."""
    no_retries = budgeted.client(KEYS["alice"])
    refused = None
    for _ in range(40):
        try:
            ask(no_retries)
        except openai.RateLimitError as error:
            refused = error
            break
    assert refused is not None, "never refused"
    body = refused.response.json()["error"]
    assert body["code"] == "rate_limit_exceeded" and body["type"] == "tokens"
    assert "tokens_per_minute: limit 600" in body["message"]
    assert 1 <= int(refused.response.headers["retry-after"]) <= MINUTE
    assert refused.response.headers["x-ratelimit-remaining-tokens"] is not None
    retrying = budgeted.client(KEYS["alice"], max_retries=3)
    started = time.monotonic()
    answer = ask(retrying)
    assert "221" in answer.parse().choices[0].message.content
    assert time.monotonic() - started <= MINUTE + 2
    # Bob, with no budget, was never refused meanwhile.
    assert ask(budgeted.client(KEYS["bob"])).http_response.status_code == 200


def test_the_stacks_own_keys_are_never_under_a_budget() -> None:
    keys = {**KEYS, "smoke-gate": "sk-gate-7c1e4b9a2d6f0c3e8b5a1d7f4c2e9b6a0d3f8c"}
    config = build_stack_config(
        {
            "hardware": "local",
            "front": {
                "rateLimit": {"enabled": False},
                "usageMeter": {"defaultLimits": {"requestsPerMinute": 1}},
            },
        }
    )
    with metered_front(config, keys, minute_seconds=60) as front:
        gate = front.client(keys["smoke-gate"])
        assert all(ask(gate).http_response.status_code == 200 for _ in range(3))
        alice = front.client(KEYS["alice"])
        ask(alice)
        with pytest.raises(openai.RateLimitError):
            ask(alice)


def test_a_days_use_survives_a_restart_of_the_front() -> None:
    config = build_stack_config(
        {"hardware": "local", "front": {"usageMeter": {"limits": {"alice": {"tokensPerDay": 100000}}}}}
    )
    with metered_front(config, KEYS) as front:
        for _ in range(2):
            ask(front.client(KEYS["alice"]))
        before = _used(front)
        assert before > 0
        time.sleep(2.5)  # the counters reach their file every 2 s
        front.restart(signal.SIGKILL)
        assert _used(front) == before
        front.restart(signal.SIGQUIT)
        assert _used(front) == before


def _used(front: MeteredFront) -> float:
    found = re.search(
        r'^glm_key_budget_used\{client="alice",window="tokens_per_day"\} (\S+)$', front.meter_metrics(), re.M
    )
    assert found, front.meter_metrics()
    return float(found[1])


def test_a_limit_for_no_key_or_for_the_stacks_own_is_refused_at_preview() -> None:
    from tests.conftest import run_program

    for name, reason in (("nobody", "names no API key"), ("smoke-gate", "the stack's own client")):
        overrides = {"glm:front": {"usageMeter": {"limits": {name: {"tokensPerMinute": 5}}}}}
        with pytest.raises(Exception, match=rf"glm:front.usageMeter.limits.{name} .*{reason}"):
            run_program("local", overrides=overrides)
