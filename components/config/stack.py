"""``StackConfig``: the stack's sections once the rules across them pass (``rules.py``), with the
advisories it deploys with (``advisories.py``).
"""

from __future__ import annotations

from pydantic import model_validator

from components.config.advisories import ADVISORIES
from components.config.rules import CHECKS
from components.config.sections import StackSections
from components.config.values import named


class StackConfig(StackSections):
    """A stack that may be deployed: every rule passed; ``build_stack_config`` makes one."""

    @model_validator(mode="after")
    def _validate(self) -> StackConfig:
        problems = [p for check in CHECKS if (p := check(self))]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def advisories(self) -> list[str]:
        """Warnings: the stack deploys, but an operator should know."""
        return [named(w, self._stack) for check in ADVISORIES if (w := check(self))]
