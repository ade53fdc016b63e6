"""Advisories: the stack deploys, but an operator should know (``ADVISORIES``); and the floating
images, refused on a production stack and an advisory on the stacks the policy pack relaxes.
"""

from __future__ import annotations

from components.config.kubernetes import KUBERNETES_ADVISORIES
from components.config.replica import FALSE_ENV, WARNED_ENV
from components.config.sections import StackSections
from policy.glm_policies import is_loopback, unpinned_reason


def floating_images(c: StackSections) -> list[str]:
    """Every image the stack names that can change under it, by the policy pack's images-pinned rule
    (``policy/glm_policies.unpinned_reason``): an error, except on the stacks the pack relaxes."""
    build = c.image.to_build
    images = {
        "image.reference": c.image.reference,
        "image.build.baseImage": build.base_image if build else None,
        "front.image": c.front.image,
        "monitoring.image": c.monitoring.image,
    }
    return [
        f"glm:{key}={ref} {reason}: the next pull can bring another image than the one tested. Fix: "
        "pin a version tag, a commit tag (nightly-<commit>) or a digest (name@sha256:...); only "
        "the stacks local, *-staging and *-dev deploy it with a warning."
        for key, ref in images.items()
        if ref and (reason := unpinned_reason(ref))
    ]


def _warn_mtp(c: StackSections) -> str | None:
    if c.serving.num_speculative_tokens and c.facts.mtp_warning:
        return (
            f"glm:serving.numSpeculativeTokens={c.serving.num_speculative_tokens} on {c.hardware}: "
            f"{c.facts.mtp_warning}. Consider removing it."
        )
    return None


def _warn_dead_env(c: StackSections) -> str | None:
    if "VLLM_RPC_TIMEOUT" in c.serving.merged_env and c.image.vllm_version_tuple >= (0, 23):
        return (
            f"glm:serving.env.VLLM_RPC_TIMEOUT does nothing on vLLM {c.image.vllm_version} "
            "(removed in 0.23.0); it is kept as the seed had it. Remove it, or rely on "
            "VLLM_ENGINE_READY_TIMEOUT_S / VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS."
        )
    return None


def _warn_floating_images(c: StackSections) -> str | None:
    """Reached only on the stacks where floating images are allowed (``build_stack_config``)."""
    return "\n".join(floating_images(c)) or None


def _warn_profiler(c: StackSections) -> str | None:
    found = [
        f"glm:serving.env/extraEnv.{name} {reason}; remove it once the profile is taken."
        for name, value in sorted(c.serving.merged_env.items())
        if name in WARNED_ENV and value.strip().lower() not in FALSE_ENV
        for reason in [WARNED_ENV[name]]
    ]
    return "\n".join(found) or None


def _warn_plain_http(c: StackSections) -> str | None:
    front = c.front
    # No bindAddress is read on Kubernetes: _warn_front_node_port (kubernetes.py) says what is plain HTTP.
    on_cluster = c.target.kubernetes is not None
    if front.tls or not front.allow_plain_http or is_loopback(front.bind_address) or on_cluster:
        return None
    return (
        f"glm:front.allowPlainHttp=true: the API on {front.bind_address}:{front.port} is plain HTTP, so "
        "API keys and prompts cross the network in clear. Set up TLS (docs/front-and-alerts.md "
        '"TLS") and remove the opt-in.'
    )


def _warn_prometheus_bind(c: StackSections) -> str | None:
    monitoring = c.monitoring
    # No bindAddress is read on Kubernetes: _warn_prometheus_node_port (kubernetes.py) says what is open.
    on_cluster = c.target.kubernetes is not None
    if not monitoring.allow_public_bind or is_loopback(monitoring.bind_address) or on_cluster:
        return None
    return (
        f"glm:monitoring.allowPublicBind=true: Prometheus on {monitoring.bind_address}:{monitoring.port} "
        "answers anyone who reaches it, without authentication. Put it on loopback and remove the opt-in."
    )


def _warn_rehearsal(c: StackSections) -> str | None:
    if not c.rehearsing:
        return None
    replaced = c.rehearsal_replaced()
    dropped = [*replaced["devices"], *replaced["mounts"]] + (["--gpus all"] if replaced["gpus"] else [])
    return (
        f"glm:rehearsal=true: this is a REHEARSAL of {c.hardware}, not a model. The engine is the "
        f"vLLM-protocol simulator ({replaced['image']['rehearsal']}, base {c.rehearsal.base_image}) run "
        f"with the profile's argv instead of {replaced['image']['production']}"
        + (f"; left out: {', '.join(dropped)}" if dropped else "")
        + ". Everything else (preflight, weights, front, Prometheus, gate) is production's. A passing "
        "gate proves the plumbing only, and this stack can never be promoted to a real one."
    )


ADVISORIES = [
    _warn_rehearsal,
    _warn_plain_http,
    _warn_prometheus_bind,
    _warn_profiler,
    _warn_mtp,
    _warn_dead_env,
    _warn_floating_images,
    *KUBERNETES_ADVISORIES,
]
