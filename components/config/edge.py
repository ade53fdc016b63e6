"""Around the replicas: the Nginx front and its limits, Prometheus and its alert thresholds, the host
preflight, the semantic probe that runs the gate's checks on a schedule, and the rehearsal switch.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from components.config.certificate import check_ca_certificate, check_tls_name
from components.config.replica import ImageBuildConfig
from components.config.values import (
    CLIENT_NAME,
    Fraction,
    NginxSize,
    NonzeroDuration,
    PrometheusDuration,
    Timeout,
)
from components.model_base import Model, Positive


class RateLimitConfig(Model):
    """The front's limits (docs/front-and-alerts.md "Limits"): per API key for key holders, per
    client address for everything else (no or a wrong key, metrics keys, ``/healthz``)."""

    enabled: bool = Field(True, description="Request and connection limits at the front (429 beyond them).")
    requests_per_second: Positive = Field(10, description="Sustained requests per second per API key.")
    burst: Positive = Field(20, description="Requests per API key allowed above the rate before 429.")
    connections_per_key: Positive = Field(
        64, description="Requests in flight per API key (streams included): twice a800's maxNumSeqs."
    )
    unauthenticated_requests_per_second: Positive = Field(
        5,
        description="Requests per second per client address without an API key (401s, /healthz, "
        "/metrics, /version): key guessing and polling.",
    )
    unauthenticated_burst: Positive = Field(
        20, description="Requests per address without an API key allowed above the rate before 429."
    )
    connections_per_address: Positive = Field(
        16, description="Requests in flight per client address without an API key."
    )


def _queue_seconds(value: float) -> float:
    if not value >= 0:  # NaN too
        raise ValueError(
            f"{value:g} s is no wait a request can make. Fix: 0 or more seconds; 0 refuses a "
            "request beyond its key's share at once, the default 10 rides out a replica leaving the rotation"
        )
    return value


class KeyLimits(Model):
    """One key's budget at the front (any of them; unset: unlimited). A request is admitted when
    its estimate fits what is left in every window, and its real usage settles the account when it
    ends (docs/front-and-alerts.md "Budgets per key")."""

    tokens_per_minute: Positive | None = Field(
        None, description="Prompt and completion tokens per minute (UTC minutes), as the engine counts them."
    )
    tokens_per_day: Positive | None = Field(
        None, description="Prompt and completion tokens per day (UTC days); kept across restarts."
    )
    requests_per_minute: Positive | None = Field(None, description="Generation requests per minute.")


class UsageMeterConfig(Model):
    """The usage meter in the front's path (Lua inside nginx, components/render/nginx_meter.py): usage
    per API key name for the stack's Prometheus, and each key's fair share of the engine's slots."""

    enabled: bool = Field(
        True,
        description="Put the usage meter in the front's path: usage per API key name in Prometheus and "
        "`make status`, the fair share and the budgets below. On by default, on Docker hosts and on "
        "Kubernetes (where the front pods share one account: docs/scaling.md); `false`: nginx straight "
        "to the replicas.",
    )
    fair_share: bool = Field(
        True,
        description="Share the engine's slots among the keys active now (maxNumSeqs x replicas in "
        "rotation x its weight / the active keys' weights, always admitted), and beyond its share let a "
        "key take any slot but those kept free for the other active keys (each one's recent peak); the "
        "rest waits up to `queueSeconds`, then gets a 429 with Retry-After. A lone key gets every slot; a steady key's p99 time to first "
        "token held within 6 % of alone during another's flood (docs/front-and-alerts.md "
        '"Sharing one box"). Takes effect with `enabled`.',
    )
    weights: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="Weight of each API key name in the fair share (default 1 each).",
    )
    limits: dict[str, KeyLimits] = Field(
        default_factory=dict,
        description="Budgets per API key name: `tokensPerMinute`, `tokensPerDay`, `requestsPerMinute` "
        "(any of them). A request is refused with OpenAI's 429 and Retry-After before any byte when its "
        "estimate (prompt bytes bound its tokens, plus max_tokens or the engine's max-model-len) does not "
        "fit; every answer carries OpenAI's x-ratelimit-* headers. The gate's and the probe's keys have none.",
    )
    default_limits: KeyLimits | None = Field(
        None,
        description="The budget of every API key that `limits` does not name (the stack's own keys excepted).",
    )
    queue_seconds: Annotated[float, AfterValidator(_queue_seconds)] = Field(
        10.0,
        description="How long a request beyond its key's share waits at the front for a slot to free "
        "before it gets the 429 with Retry-After: a brief dip in capacity (a replica ejected or "
        "rolling) is latency, not an error; a flood past it is refused. 0: refused at once. Shorter "
        "than `glm:front.readTimeoutSeconds`, which nginx waits for the meter's answer. Takes effect "
        "with `fairShare`.",
    )


def _load_factor(value: float) -> float:
    if not 1 < value <= 4:  # NaN too
        raise ValueError(
            f"{value:g} is no load bound for prefix affinity. Fix: a factor above 1 (the default 1.25): a "
            "replica takes new conversations until it carries that multiple of the mean requests in flight; "
            "1 would send nearly every request past its replica, above 4 lets one replica take most of the load"
        )
    return value


class RoutingConfig(Model):
    """How the front picks a replica for a generation request (docs/scaling.md "Prefix affinity")."""

    policy: Literal["prefix-affinity", "round-robin"] = Field(
        "prefix-affinity",
        description="`prefix-affinity`: a conversation goes to the replica that served its last turn, where "
        "vLLM's prefix cache holds its history (keyed on `prompt_cache_key`, else its system prompt and first "
        "user message; rendezvous hashing over the replicas in rotation, within `loadFactor`); measured "
        "against round-robin in docs/scaling.md. `round-robin`: nginx's, regardless of content (on Kubernetes "
        "the meter's least-loaded serving pod). Runs in the usage meter: with the meter off the front is "
        "round-robin (on Kubernetes, the Service's). With one replica there is nothing to choose.",
    )
    load_factor: Annotated[float, AfterValidator(_load_factor)] = Field(
        1.25,
        description="Prefix affinity's bound: no replica takes a request while it carries this multiple of "
        "the mean requests in flight (rounded up); the request goes to the next replica in its order.",
    )


class FrontConfig(Model):
    image: str = Field(
        "openresty/openresty:1.27.1.2-bookworm",
        description="Nginx image. With the usage meter (on by default) it needs the Lua module the meter "
        "runs in: OpenResty's, or Debian's nginx with libnginx-mod-http-lua and lua-cjson (the local stack's).",
    )
    port: int = Field(8080, description="The stack's one published port (the API).")
    bind_address: str = Field("0.0.0.0", description="Host address the API port binds to.")
    max_body_size: NginxSize = Field("20m", description="`client_max_body_size`.")
    read_timeout_seconds: Timeout = Field(600, description="`proxy_read_timeout`.")
    send_timeout_seconds: Timeout = Field(600, description="`proxy_send_timeout`.")
    keepalive: Positive = Field(32, description="Upstream keepalive connections.")
    rate_limit: RateLimitConfig = Field(default_factory=RateLimitConfig)
    usage_meter: UsageMeterConfig = Field(default_factory=UsageMeterConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    tls: bool = Field(False, description="Serve TLS with `glm:tlsCertificate`/`glm:tlsKey`.")
    tls_name: str | None = Field(
        None,
        description="The name the smoke gate and the semantic probe verify in the front's certificate: "
        "they reach the front by its own address (`localhost`, the host's, its container name) and send "
        "this name instead (SNI). Default: the certificate's first name (DNS, else IP).",
    )
    tls_ca_certificate: str | None = Field(
        None,
        description="PEM certificate of the CA that signed `glm:tlsCertificate` (or a self-signed "
        "certificate itself): the gate and the probe trust it, and nothing else, for the front. "
        "Default: the system's CAs.",
    )
    allow_plain_http: bool = Field(
        False,
        description="Accept plain HTTP on a non-loopback `bindAddress` (keys and prompts cross the "
        "network in clear); without it such a stack is refused. Prefer `tls`.",
    )

    @field_validator("tls_name")
    @classmethod
    def _tls_name(cls, value: str | None) -> str | None:
        return None if value is None else check_tls_name(value)

    @field_validator("tls_ca_certificate")
    @classmethod
    def _tls_ca_certificate(cls, value: str | None) -> str | None:
        return None if value is None else check_ca_certificate(value)

    @model_validator(mode="after")
    def _meter_answers_first(self) -> FrontConfig:
        """nginx waits ``readTimeoutSeconds`` for the meter's answer: a request that waits longer in
        the meter's queue gets nginx's 504 instead of the meter's 429 and its Retry-After."""
        queue = self.usage_meter.queue_seconds
        if queue >= self.read_timeout_seconds:
            raise ValueError(
                f"glm:front.usageMeter.queueSeconds={queue:g} is not shorter than "
                f"glm:front.readTimeoutSeconds={self.read_timeout_seconds}: nginx would give up on the "
                "waiting request (a 504) before the meter answers its 429 with Retry-After. Fix: "
                f"queueSeconds below {self.read_timeout_seconds} (the default 10), or a longer readTimeoutSeconds."
            )
        return self

    @model_validator(mode="after")
    def _affinity_needs_the_meter(self) -> FrontConfig:
        """Prefix affinity reads the request's body in the meter's access phase: without the meter
        nginx cannot see the conversation. Left at its default, the front is round-robin then."""
        if (
            "policy" in self.routing.model_fields_set
            and self.routing.policy == "prefix-affinity"
            and not self.usage_meter.enabled
        ):
            raise ValueError(
                "glm:front.routing.policy=prefix-affinity needs the usage meter, which reads the request's "
                "body to find its conversation, and glm:front.usageMeter.enabled is false. Fix: turn the "
                "meter on, or set glm:front.routing.policy round-robin (or leave it unset)."
            )
        return self


class AlertThresholds(Model):
    kv_cache_usage: Fraction = Field(0.9, description="KV cache usage fraction that alerts.")
    ttft_p99_seconds: float = Field(10.0, description="TTFT p99 bound in seconds.", gt=0)
    spec_acceptance_min: Fraction = Field(0.3, description="Minimum MTP draft acceptance rate.")
    capacity_wait_for: PrometheusDuration = Field(
        "2m", description="How long capacity-waiting with nothing running may last."
    )


class MonitoringConfig(Model):
    image: str = Field("prom/prometheus:v2.53.0", description="Prometheus image.")
    port: int = Field(9090, description="Host port of the Prometheus UI.")
    bind_address: str = Field("127.0.0.1", description="Host address Prometheus binds to (loopback).")
    allow_public_bind: bool = Field(
        False,
        description="Accept a non-loopback `bindAddress`: Prometheus has no authentication, so anyone "
        "who reaches it reads every metric and can query the API. Without it such a stack is refused.",
    )
    scrape_interval: NonzeroDuration = Field("15s", description="Scrape interval of vLLM /metrics.")
    thresholds: AlertThresholds = Field(default_factory=AlertThresholds)
    target_down_for: PrometheusDuration | None = Field(
        None,
        description="How long vLLM's scrape may fail before VllmTargetDown fires (default: the "
        "profile's measured start time plus 20 %, at least 5m).",
    )


class PreflightConfig(Model):
    enabled: bool = Field(True, description="Check the host before creating the container.")
    min_free_disk_gib: float | None = Field(
        None, description="Free disk needed under `model.hostDir` (default: the weights size)."
    )
    min_shm_gib: float = Field(1, description="Minimum /dev/shm on the host in GiB.")


# ---- the semantic probe (issue 18): the gate's checks on a schedule, after the deploy ----------

SEMANTIC_PROBE_CHAT_STEPS = 2
"""Steps of one probe run that wait on the model (arithmetic, tool_call): what a stalled engine
holds for ``timeoutSeconds`` each."""


def _probe_interval(value: int) -> int:
    if value <= 0:
        raise ValueError(
            f"{value} s: the probe would never run or never pause. Fix: a positive number of seconds; "
            "the default 60 costs one request slot for a few seconds a minute"
        )
    return value


def _probe_failures(value: int) -> int:
    if value < 1:
        raise ValueError(
            f"{value}: an alert needs at least one failed run. Fix: 1 or more; the default 3 alerts "
            "after three failed runs in a row (3 minutes at the default interval)"
        )
    return value


class SemanticProbeConfig(Model):
    """The semantic probe: a container of the stack that runs the gate's readiness, arithmetic,
    tool-call and KV-pool checks through the front on a schedule (docs/semantic-probe.md)."""

    enabled: bool = Field(True, description="Run the semantic probe container with the stack.")
    interval_seconds: Annotated[int, AfterValidator(_probe_interval)] = Field(
        60,
        description="Seconds between the starts of two probe runs. Every probe request takes one of "
        "the users' `maxNumSeqs` slots while it runs: shorter alerts sooner and costs more.",
    )
    failures_before_alert: Annotated[int, AfterValidator(_probe_failures)] = Field(
        3,
        description="K: consecutive failed runs of a step before its alert fires; with `ejectReplicas`, "
        "a replica asked directly also leaves the front's rotation after K failed runs and comes back "
        "after K passed ones.",
    )
    eject_replicas: bool = Field(
        True,
        description="Take a replica that fails a probe step K runs in a row out of the front's "
        "rotation, and put it back after K passes (docs/semantic-probe.md). With every replica out, the "
        "front answers a JSON 503 naming the failing check. False: alerts only.",
    )
    max_tokens: Positive = Field(
        256, description="`max_tokens` of the probe's chats: room for low-effort reasoning and the answer."
    )
    timeout_seconds: Positive = Field(15, description="Limit of one probe request, body included.")
    client_name: str = Field(
        "semantic-probe",
        description="The probe's client name in the front's key map and access log; its key is "
        "generated by the stack. No `glm:apiKeys` entry may use it.",
    )
    base_image: str = Field(
        "python:3.11-slim",
        description="Base of the probe image; needs Python 3.11 (the program's own packages are copied in).",
    )
    port: int = Field(9101, description="Port of the probe's /metrics on the private network.")

    @model_validator(mode="after")
    def _fits(self) -> SemanticProbeConfig:
        problems = []
        if not CLIENT_NAME.fullmatch(self.client_name):
            problems.append(
                f"glm:semanticProbe.clientName={self.client_name!r} is not a client name. Fix: 1-64 "
                "letters, digits, `_`, `.` and `-`, starting with a letter or digit (e.g. semantic-probe)."
            )
        worst_run = SEMANTIC_PROBE_CHAT_STEPS * self.timeout_seconds
        if self.interval_seconds < worst_run:
            problems.append(
                f"glm:semanticProbe.intervalSeconds={self.interval_seconds} is shorter than "
                f"{SEMANTIC_PROBE_CHAT_STEPS} x timeoutSeconds={self.timeout_seconds} = {worst_run} s, what "
                "one run takes when the engine stalls: runs would start late and the alert with them. "
                f"Fix: intervalSeconds >= {worst_run}, or a smaller timeoutSeconds."
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def silent_after_seconds(self) -> int:
        """How long without a finished run means the probe itself is silent: two intervals plus
        a run that stalled on every chat step."""
        return 2 * self.interval_seconds + SEMANTIC_PROBE_CHAT_STEPS * self.timeout_seconds

    @property
    def unprobed_after_seconds(self) -> int:
        """How long a replica skipped as saturated may go unprobed before it alerts: ten intervals
        (10 min with the defaults), and never sooner than the probe counts as silent."""
        return max(10 * self.interval_seconds, self.silent_after_seconds)


# Host paths that exist only on a box with the accelerator's driver: a rehearsal leaves these mounts
# out (with the devices and --gpus), because the stand-in or new box has no such driver yet.
DRIVER_PATHS = ("/usr/local/Ascend", "/usr/local/sbin/npu-smi", "/etc/hccn.conf", "/usr/local/nvidia")
REHEARSAL_IMAGE = ImageBuildConfig(
    context="images/vllm-sim",
    dockerfile="images/vllm-sim/Dockerfile",
    base_image="python:3.11-slim",
    repository="glm53-vllm-sim",
)
"""The vLLM-protocol simulator a rehearsal builds on the target host (the local stack's image)."""


def is_driver_path(path: str) -> bool:
    """``/usr/local/Ascend/driver`` yes, ``/home/glm/glm53_site`` no."""
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in DRIVER_PATHS)


class RehearsalConfig(Model):
    enabled: bool = Field(
        False,
        description="Deploy the hardware profile as in production, with the vLLM-protocol simulator "
        "(images/vllm-sim, built on the host) as the engine and no accelerator devices, `--gpus` or "
        "driver mounts; `glm:rehearsal: true` is short for `{enabled: true}`. Never promotable to a "
        "real stack.",
    )
    base_image: str = Field(
        REHEARSAL_IMAGE.base_image,
        description="Base image of the simulator build (any image with python3; offline: a local one "
        "loaded onto the host, e.g. glm53-local/python:bookworm).",
    )

    @model_validator(mode="before")
    @classmethod
    def _switch(cls, data: Any) -> Any:
        """``glm:rehearsal: true`` (the one switch) or the full object."""
        if isinstance(data, bool):
            return {"enabled": data}
        if isinstance(data, str) and data.lower() in ("true", "false"):
            return {"enabled": data.lower() == "true"}
        return data
