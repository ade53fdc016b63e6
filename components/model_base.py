"""What every configuration model shares: camelCase keys (``glm:smoke.deadlineSeconds``), unknown
keys refused, values frozen, and the positive-number type whose error names the fix.

Standard library and pydantic only: the gate's runtime (``components/gate/settings.py``) and the
stack configuration (``components/config``) both build on it, and the semantic probe's image ships it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


def _positive(value: int) -> int:
    if value <= 0:
        raise ValueError(
            f"{value} must be greater than 0. Fix: a positive number (README's config table has the default)"
        )
    return value


Positive = Annotated[int, AfterValidator(_positive)]
