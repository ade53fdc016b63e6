"""The rules of ``glm_policies`` as pulumi-policy ``ResourceValidationPolicy`` objects.

This module is the only one that knows pulumi-policy: it turns ``ResourceValidationArgs`` into a
plain ``Resource`` (unknown values become ``UNKNOWN`` instead of raising mid-rule), runs the rule,
and reports what it found:

* violations through ``report_violation`` (the policy's enforcement level: mandatory);
* ``Undecidable`` as "not applicable" with the reason, so a preview with unknown values goes on;
* on relaxed stacks (``images-pinned`` only) findings as advisory lines on stderr, which the engine
  shows as info diagnostics: pulumi-policy fixes a policy's enforcement level for the whole run,
  so a per-stack level has no other channel. The resource is then marked not applicable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from glm_policies import RULES, UNKNOWN, Resource, Rule, Undecidable, is_relaxed_stack, normalize, stack_of
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError


def _unproxy(value: Any) -> Any:
    """pulumi-policy's props raise ``UnknownValueError`` on access to an unknown; make them data."""
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, Mapping):
        out = {}
        for key in value:
            try:
                out[key] = _unproxy(value[key])
            except UnknownValueError:
                out[key] = UNKNOWN
        return out
    if isinstance(value, Sequence):
        items = []
        for i in range(len(value)):
            try:
                items.append(_unproxy(value[i]))
            except UnknownValueError:
                items.append(UNKNOWN)
        return items
    return value


def resource_from_args(args: ResourceValidationArgs) -> Resource:
    opts = args.opts
    return Resource(
        type=args.resource_type,
        name=args.name,
        props=normalize(_unproxy(args.props)),
        urn=args.urn,
        protect=bool(getattr(opts, "protect", False)),
        # pulumi-policy 1.21 and the engine's AnalyzerResourceOptions carry no retainOnDelete; read
        # it if a later SDK adds it, else leave it unknown (None).
        retain_on_delete=getattr(opts, "retain_on_delete", None),
    )


def current_stack(urn: str) -> str:
    """The stack, from the URN: under a language host the analyzer gets no PULUMI_STACK, and
    ``pulumi.get_stack()`` then answers its default ``"stack"``."""
    stack = stack_of(urn) or os.environ.get("PULUMI_STACK")
    if stack:
        return stack
    import pulumi

    return pulumi.get_stack()


def _validator(rule: Rule):
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        config = args.get_config() or {}
        resource = resource_from_args(args)
        try:
            violations = rule.check(resource, config)
        except Undecidable as skip:
            args.not_applicable(f"skipped: {skip}")
            return
        if not violations:
            return
        stack = current_stack(args.urn)
        if rule.advisory_on_relaxed_stacks and is_relaxed_stack(stack, config):
            for message in violations:
                print(f"advisory [{rule.name}] on stack {stack}: {message}", file=sys.stderr, flush=True)
            args.not_applicable(f"advisory on stack {stack}: {'; '.join(violations)}")
            return
        for message in violations:
            report_violation(message, None)

    validate.__name__ = rule.name.replace("-", "_")
    return validate


def policy_for(rule: Rule) -> ResourceValidationPolicy:
    return ResourceValidationPolicy(
        name=rule.name,
        description=rule.description,
        validate=_validator(rule),
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties=dict(rule.config_schema)) if rule.config_schema else None,
    )


POLICIES: list[ResourceValidationPolicy] = [policy_for(rule) for rule in RULES]
"""The pack's policies, in the order of docs/policy.md."""
