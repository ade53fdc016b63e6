"""The gate's settings (``glm:smoke``): the one model its runtime reads, beside it.

The runtime (``checks.py``, ``__main__.py``, the semantic probe) imports this and nothing of the
stack configuration or of Pulumi; ``components/config`` takes ``SmokeConfig`` from here for the
stack's ``smoke`` key.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from components.model_base import Model, Positive

SmokeStep = Literal["models", "arithmetic", "tool_call", "kv_pool", "front_auth", "streaming"]
ALL_SMOKE_STEPS: list[SmokeStep] = ["models", "arithmetic", "tool_call", "kv_pool", "front_auth", "streaming"]


class SmokeConfig(Model):
    deadline_seconds: Positive = Field(1800, description="How long the gate waits for readiness.")
    poll_seconds: float = Field(1.0, description="Readiness poll interval (at most 1 s).", gt=0, le=1)
    prompt: str = Field("What is 13×17? Answer with the number only.", description="Arithmetic prompt.")
    expected_answer: str = Field("221", description="Exact expected `content` after trimming.")
    tool_prompt: str = Field("What is the weather in Paris right now?", description="Tool-call prompt.")
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Sent with each chat (e.g. `reasoning_effort: low`)."
    )
    steps: list[SmokeStep] = Field(
        default_factory=lambda: list(ALL_SMOKE_STEPS), description="Which gate steps run."
    )
    metrics_url: str | None = Field(
        None,
        description="Where the gate reads vLLM's metrics for the KV-pool step instead of the default: "
        "the front's /metrics route with a metrics key the stack generates (every stack, nothing to "
        "open). E.g. vLLM's own /metrics or a Prometheus /federate URL.",
    )
