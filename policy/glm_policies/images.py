"""Rule 3: every image is pinned, so the next pull brings the image that was tested. Advisory on
the relaxed stacks (``local``, ``*-staging``, ``*-dev`` by default)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .resource import CONTAINER, IMAGE, REMOTE_IMAGE, UNKNOWN, Resource, Undecidable

DEFAULT_RELAXED_STACKS = ("local",)
DEFAULT_RELAXED_STACK_SUFFIXES = ("-staging", "-dev")

_IMAGE_ID = re.compile(r"(sha256:)?[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def unpinned_reason(ref: str) -> str | None:
    """Why an image reference floats, or None when it is pinned.

    >>> [unpinned_reason(r) for r in ("nginx:1.27", "vllm/vllm-openai:nightly-385dce36b")]
    [None, None]
    >>> unpinned_reason("localhost:5000/vllm")
    'has no tag (Docker pulls :latest)'
    """
    if _IMAGE_ID.fullmatch(ref) or "@sha256:" in ref:
        return None
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag (Docker pulls :latest)"
    tag = last.rsplit(":", 1)[1]
    if tag == "latest":
        return "uses the :latest tag"
    if "nightly" in tag.lower() and not any(
        _COMMIT.fullmatch(part) for part in re.split(r"[-_.]", tag.lower())
    ):
        return f"uses the floating :{tag} tag"
    return None


def image_refs(resource: Resource) -> list[tuple[str, Any]]:
    """(input, reference) pairs of the image references a resource holds."""
    if resource.type == REMOTE_IMAGE:
        return [("name", resource.get("name"))]
    if resource.type == IMAGE:
        refs = [("imageName", resource.get("imageName"))]
        build = resource.get("build", {})
        build_args = build.get("args") if isinstance(build, Mapping) else None
        if isinstance(build_args, Mapping) and build_args.get("BASE_IMAGE") is not None:
            refs.append(("build.args.BASE_IMAGE", build_args["BASE_IMAGE"]))
        return refs
    if resource.type == CONTAINER:
        return [("image", resource.get("image"))]
    return []


def images_pinned(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Every image reference names a fixed image: an ID, a digest, or a tag other than latest/nightly."""
    violations, unknown = [], []
    for key, ref in image_refs(resource):
        if ref is UNKNOWN:
            unknown.append(key)
        elif ref is None or ref == "":
            continue
        elif (reason := unpinned_reason(str(ref))) is not None:
            violations.append(
                f"{resource.name}: {key} {ref!r} {reason}; the next pull can bring a different "
                "image than the one that was tested. Fix: pin a version tag, a commit tag "
                "(nightly-<commit>) or a digest (name@sha256:...)."
            )
    if unknown and not violations:
        raise Undecidable(
            f"{resource.name}: {', '.join(unknown)} is computed (not known during preview); the "
            "RemoteImage/Image it comes from is checked instead"
        )
    return violations


def stack_of(urn: str) -> str | None:
    """The stack name in a URN (``urn:pulumi:<stack>::<project>::<type>::<name>``)."""
    parts = urn.split("::")
    if len(parts) < 4 or not parts[0].startswith("urn:pulumi:"):
        return None
    return parts[0].removeprefix("urn:pulumi:")


def is_relaxed_stack(stack: str, config: Mapping[str, Any]) -> bool:
    """Stacks where an unpinned image is advisory: ``local``, ``*-staging``, ``*-dev`` by default.

    >>> [is_relaxed_stack(s, {}) for s in ("a800", "a800-staging", "local", "rtx5090-dev")]
    [False, True, True, True]
    """
    names = config.get("relaxedStacks", DEFAULT_RELAXED_STACKS)
    suffixes = config.get("relaxedStackSuffixes", DEFAULT_RELAXED_STACK_SUFFIXES)
    return stack in names or any(stack.endswith(s) for s in suffixes)
