"""Promotion on evidence: a stack serves exactly what a source stack's smoke gate verified.

A stack names its source with ``glm:promoteFrom`` (e.g. ``organization/glm/a800-staging``). Through a
``StackReference`` it reads the source's ``verified`` output — published only by an update whose
smoke gate passed — and refuses, at preview, when

* the source has no passing gate, or
* the source is a rehearsal (``glm:rehearsal``: the simulator passed its gate, not the model) and
  this stack is not, or
* its own served model differs from the verified one in anything but the per-environment keys.

The served model is what defines the answers: the image identity, the vLLM argv, the container
env, the model path and the weights revision. Host, published ports, API keys, TLS and alert
thresholds are per-environment and are deliberately not part of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import pulumi

from components.config import ImageConfig
from components.serving.image import build_tag
from components.serving.spec import ServingSpec


def image_identity(image: ImageConfig) -> str:
    """What the image *is*, known at preview: the content-hash tag of a build, or the reference."""
    build = image.to_build
    if build is not None:
        return build_tag(build.repository, build.context)
    assert image.reference is not None
    return image.reference


def served_model(
    serving: ServingSpec, image: ImageConfig, secret_env_names: Sequence[str] = ()
) -> dict[str, Any]:
    """The settings that define the served model; the fingerprint is their hash.

    Secret env (``glm:servingSecretEnv``) counts by name only: its values never leave the container.
    """
    served: dict[str, Any] = {
        "image": image_identity(image),
        "argv": serving.argv,
        "env": serving.env,
        "modelPath": serving.model_path,
        "revision": serving.revision,
    }
    if secret_env_names:  # absent when empty, so stacks without secret env keep their fingerprint
        served["secretEnvNames"] = sorted(secret_env_names)
    if serving.rehearsal:  # absent for real stacks, whose fingerprints stay as they were
        served["rehearsal"] = True
    return served


def fingerprint(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def differences(own: dict[str, Any], source: dict[str, Any]) -> list[str]:
    """Each differing setting, named: argv flags, env vars, then the scalar settings."""
    found = []
    own_argv, source_argv = own.get("argv") or [], source.get("argv") or []
    found += [f"argv has {a} (source: not set)" for a in own_argv if a not in source_argv]
    found += [f"argv lacks {a} (source has it)" for a in source_argv if a not in own_argv]
    own_env, source_env = own.get("env") or {}, source.get("env") or {}
    for key in sorted(set(own_env) | set(source_env)):
        if own_env.get(key) != source_env.get(key):
            found.append(f"env {key}={own_env.get(key)!r} (source: {source_env.get(key)!r})")
    for key in ("image", "modelPath", "revision", "secretEnvNames", "rehearsal"):
        if own.get(key) != source.get(key):
            found.append(f"{key} {own.get(key)!r} (source: {source.get(key)!r})")
    return found


def judge(source_stack: str, own: dict[str, Any], verified: Any) -> str:
    """The source's verified image reference, or a refusal that names what is wrong."""
    if not isinstance(verified, dict) or not verified.get("servedModel"):
        raise pulumi.RunError(
            f"glm:promoteFrom={source_stack}: the source stack has no passing smoke gate (no "
            f"`verified` output). Run `make up STACK={source_stack}` until its gate passes, then promote."
        )
    source = verified["servedModel"]
    if verified.get("fingerprint") != fingerprint(source):
        raise pulumi.RunError(
            f"glm:promoteFrom={source_stack}: the source's `verified` output is inconsistent "
            f"(its fingerprint does not match its settings); re-run `make up STACK={source_stack}`."
        )
    if source.get("rehearsal") and not own.get("rehearsal"):
        raise pulumi.RunError(
            f"glm:promoteFrom={source_stack}: the source is a rehearsal (glm:rehearsal): its gate was "
            "passed by the vLLM-protocol simulator, not by the model, so it is no evidence for a real "
            f"stack. Fix: deploy {source_stack} without glm:rehearsal and let its gate pass on the "
            "real hardware, then promote."
        )
    diffs = differences(own, source)
    if diffs:
        raise pulumi.RunError(
            f"glm:promoteFrom={source_stack}: this stack would serve a different model than the one "
            f"its gate verified ({len(diffs)} differences):\n  - "
            + "\n  - ".join(diffs)
            + "\nOnly per-environment keys (target, front, monitoring, smoke, preflight, apiKeys, TLS) "
            "may differ. Fix: change the source first and let its gate pass, or drop glm:promoteFrom."
        )
    return str(verified["imageRef"])


def promoted_image(source_stack: str, own: dict[str, Any]) -> pulumi.Output[str]:
    """The source's verified image reference (by digest/ID), after checking the promotion."""
    source = pulumi.StackReference(f"promote-from-{source_stack.replace('/', '-')}", source_stack)
    return source.get_output("verified").apply(lambda verified: judge(source_stack, own, verified))
