"""The front's rotation asked for its state, as a test does."""

from __future__ import annotations

import httpx

from tests.front_rig import KEYS, SERVED

KEY = KEYS["alice"]


def ask(base: str) -> tuple[int, str]:
    """13x17 through the front: (status, the answer's content or the error body)."""
    resp = httpx.post(
        f"{base}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={
            "model": SERVED,
            "messages": [{"role": "user", "content": "What is 13*17?"}],
            "max_tokens": 256,
            "temperature": 0,
        },
        timeout=30,
    )
    if resp.status_code != 200:
        return resp.status_code, resp.text
    return 200, str(resp.json()["choices"][0]["message"]["content"]).strip()
