"""The rules across sections, checked before anything is created (``CHECKS``): each returns the
problem as a message naming the key, the value, the limit and the fix, or None.
"""

from __future__ import annotations

from components.config.edge import FrontConfig
from components.config.kubernetes import KUBERNETES_CHECKS
from components.config.replica import SHUTDOWN_MARGIN_SECONDS, dangerous_env, env_name_problems
from components.config.sections import StackSections, usage_meter_runs
from components.vllm_flags.checks import check_known_flags, extra_args_problems
from components.vllm_flags.render import render_flags
from policy.glm_policies import binds_all_interfaces, is_loopback

# vLLM's own default for VLLM_ENGINE_READY_TIMEOUT_S (vLLM >= 0.14; SPEC §3).
VLLM_DEFAULT_ENGINE_READY_TIMEOUT_S = 600
# Docker's /dev/shm when neither --shm-size nor --ipc=host is given.
DOCKER_DEFAULT_SHM_MB = 64


def _check_weights_fit(c: StackSections) -> str | None:
    if c.facts.hbm_gib == 0:
        return None
    per_card = c.model.weights_gib / c.serving.tensor_parallel_size
    budget = c.facts.hbm_gib * c.serving.gpu_memory_utilization
    if per_card <= budget:
        return None
    return (
        f"glm:serving.tensorParallelSize={c.serving.tensor_parallel_size}: weights "
        f"{c.model.weights_gib:g} GiB / {c.serving.tensor_parallel_size} cards = {per_card:.1f} GiB per "
        f"card exceeds the budget {c.facts.hbm_gib:g} GiB HBM x gpuMemoryUtilization "
        f"{c.serving.gpu_memory_utilization:g} = {budget:.1f} GiB per card, leaving nothing for the KV "
        f"cache. Fix: use more cards (tensorParallelSize and container.accelerators; "
        f"{c.hardware} needs at least "
        f"{_min_cards(c.model.weights_gib, budget)}) or a smaller/quantized model."
    )


def _min_cards(weights_gib: float, budget_gib: float) -> int:
    cards = 1
    while weights_gib / cards > budget_gib:
        cards *= 2
    return cards


def _check_tp_matches_accelerators(c: StackSections) -> str | None:
    cards = len(c.container.accelerators)
    if c.facts.accelerator == "none" or c.serving.tensor_parallel_size == cards:
        return None
    return (
        f"glm:serving.tensorParallelSize={c.serving.tensor_parallel_size} but "
        f"glm:container.accelerators lists {cards} accelerators {c.container.accelerators}: vLLM needs "
        f"exactly one accelerator per tensor-parallel rank. Fix: make them agree."
    )


def _check_cudagraph_sizes(c: StackSections) -> str | None:
    sizes = (c.serving.compilation_config or {}).get("cudagraph_capture_sizes") or []
    too_big = [s for s in sizes if s > c.serving.max_num_seqs]
    if not too_big:
        return None
    return (
        f"glm:serving.compilationConfig.cudagraph_capture_sizes has {too_big} above "
        f"maxNumSeqs={c.serving.max_num_seqs}: graphs larger than the batch are never used and waste "
        f"memory the KV pool needs. Fix: keep every capture size <= maxNumSeqs."
    )


def _check_tool_parser(c: StackSections) -> str | None:
    if not c.serving.enable_auto_tool_choice or c.serving.tool_call_parser:
        return None
    return (
        "glm:serving.enableAutoToolChoice=true without glm:serving.toolCallParser: vLLM refuses to "
        "start. Fix: set toolCallParser (glm47 for GLM-5.3) or turn enableAutoToolChoice off."
    )


def _check_max_model_len(c: StackSections) -> str | None:
    if c.serving.max_model_len <= c.model.max_context_length:
        return None
    return (
        f"glm:serving.maxModelLen={c.serving.max_model_len} exceeds the model's limit "
        f"glm:model.maxContextLength={c.model.max_context_length}. Fix: lower maxModelLen to at most "
        f"{c.model.max_context_length}."
    )


def _engine_ready_timeout(c: StackSections) -> float:
    value = c.serving.merged_env.get("VLLM_ENGINE_READY_TIMEOUT_S")
    return float(value) if value is not None else VLLM_DEFAULT_ENGINE_READY_TIMEOUT_S


def _check_engine_ready_timeout(c: StackSections) -> str | None:
    load = c.facts.known_weights_load_seconds
    timeout = _engine_ready_timeout(c)
    if load is None or timeout > load:
        return None
    return (
        f"glm:serving.env.VLLM_ENGINE_READY_TIMEOUT_S={timeout:g} s (vLLM's default is "
        f"{VLLM_DEFAULT_ENGINE_READY_TIMEOUT_S}) is shorter than the {load:g} s the {c.hardware} weights "
        f"take to load: vLLM declares the engine dead mid-load. Fix: set it to 3600 as the seed does."
    )


def _check_smoke_deadline(c: StackSections) -> str | None:
    start = c.facts.known_engine_start_seconds
    if start is None or c.smoke.deadline_seconds > start:
        return None
    return (
        f"glm:smoke.deadlineSeconds={c.smoke.deadline_seconds} is shorter than the {start:g} s a "
        f"{c.hardware} engine is known to take to start: the gate would fail a healthy load. "
        f"Fix: raise it above {start:g} (default 1800)."
    )


def _check_ports(c: StackSections) -> str | None:
    published = {"glm:front.port": c.front.port, "glm:monitoring.port": c.monitoring.port}
    if c.container.network_mode == "host":
        published["glm:serving.port (network host)"] = c.serving.port
    seen: dict[int, str] = {}
    for key, port in published.items():
        if not 0 < port < 65536:
            return f"{key}={port} is not a TCP port (1-65535)."
        if port in seen:
            return f"{key}={port} clashes with {seen[port]}={port} on the host. Fix: give each its own port."
        seen[port] = key
    return None


DOCKER_BRIDGE_GATEWAY = "172.17.0.1"
"""Docker's default bridge gateway: what ``host-gateway`` (the front's ``host.docker.internal``)
resolves to unless dockerd sets ``--bip`` or ``--host-gateway-ip``."""


def _check_vllm_not_exposed(c: StackSections) -> str | None:
    if c.container.network_mode != "host":
        return None
    host, port = c.serving.host, c.serving.port
    fix = (
        f"Fix: keep networkMode bridge, or set glm:serving.host to the Docker bridge gateway "
        f"({DOCKER_BRIDGE_GATEWAY} unless dockerd sets --bip/--host-gateway-ip), where the front "
        "reaches it as host.docker.internal and the world does not."
    )
    if binds_all_interfaces(host):
        shown = "unset" if host is None else repr(host)
        return (
            f"glm:container.networkMode=host with glm:serving.host={shown} publishes vLLM's port "
            f"{port} on every interface without a key (scanned within a day in the A100 seed). {fix}"
        )
    if host is not None and is_loopback(host):
        return (
            f"glm:container.networkMode=host with glm:serving.host={host!r}: vLLM listens on the host's "
            f"loopback only, and the front (in its own container) cannot reach it; the gate would wait "
            f"out its whole deadline. {fix}"
        )
    return None


def _check_plain_http(c: StackSections) -> str | None:
    front = c.front
    # No bindAddress is read on Kubernetes: the front's NodePort is its public bind, which
    # _check_front_node_port (kubernetes.py) checks.
    if front.tls or front.allow_plain_http or c.target.kubernetes is not None:
        return None
    if len(c.target.hosts) > 1:
        return (
            f"{len(c.target.hosts)} hosts without glm:front.tls: the front would send prompts and the "
            "replica key to the other hosts' replicas in clear. Fix: turn on TLS (glm:front.tls true "
            'with glm:tlsCertificate and glm:tlsKey, docs/front-and-alerts.md "TLS"; the replicas then '
            "speak TLS too), or accept it explicitly with glm:front.allowPlainHttp: true."
        )
    if is_loopback(front.bind_address):
        return None
    return (
        f"glm:front.bindAddress={front.bind_address} serves the API over plain HTTP: API keys and "
        "prompts cross the network in clear. Fix: turn on TLS (glm:front.tls true with "
        'glm:tlsCertificate and glm:tlsKey, docs/front-and-alerts.md "TLS"), or bind to '
        "127.0.0.1 behind your own TLS proxy, or accept it explicitly with "
        "glm:front.allowPlainHttp: true (every preview then warns)."
    )


def _check_prometheus_bind(c: StackSections) -> str | None:
    monitoring = c.monitoring
    # No bindAddress is read on Kubernetes: Prometheus' NodePort is its public bind, which
    # _check_prometheus_node_port (kubernetes.py) checks.
    on_cluster = c.target.kubernetes is not None
    if monitoring.allow_public_bind or is_loopback(monitoring.bind_address) or on_cluster:
        return None
    return (
        f"glm:monitoring.bindAddress={monitoring.bind_address!r} publishes Prometheus beyond loopback: it "
        "has no authentication, so anyone who reaches the port reads every metric and queries its API. "
        "Fix: keep 127.0.0.1 and reach it over `ssh -L 9090:127.0.0.1:9090`, scrape vLLM through the "
        "front with a glm:metricsKeys key, or accept it explicitly with "
        "glm:monitoring.allowPublicBind: true (every preview then warns)."
    )


def _check_extra_args(c: StackSections) -> str | None:
    return "\n".join(extra_args_problems(c.serving.extra_args)) or None


def _check_env_names(c: StackSections) -> str | None:
    found = env_name_problems(c.serving.env, "glm:serving.env")
    found += env_name_problems(c.serving.extra_env, "glm:serving.extraEnv")
    return "\n".join(found) or None


MEDIA_DOMAINS_SINCE = (0, 22)
"""The oldest vLLM whose documentation this project checked for ``--allowed-media-domains``."""


def media_input_allowed(c: StackSections) -> bool:
    """``limitMmPerPrompt`` lets a prompt carry media, which vLLM fetches when given as a URL."""
    return any(n > 0 for n in (c.serving.limit_mm_per_prompt or {}).values())


def _check_media_fetching(c: StackSections) -> str | None:
    if not media_input_allowed(c):
        return None
    allowed = {k: v for k, v in (c.serving.limit_mm_per_prompt or {}).items() if v > 0}
    if c.image.vllm_version_tuple < MEDIA_DOMAINS_SINCE:
        return (
            f"glm:serving.limitMmPerPrompt={allowed} on vLLM {c.image.vllm_version}: any key holder can "
            "make vLLM fetch URLs on the private network (Prometheus, the replicas, a cloud metadata "
            f"address), and this vLLM predates the checked --allowed-media-domains "
            f"({'.'.join(map(str, MEDIA_DOMAINS_SINCE))}). Fix: set the media limits to 0, or a newer image."
        )
    if not c.serving.allowed_media_domains:
        return (
            f"glm:serving.limitMmPerPrompt={allowed} without glm:serving.allowedMediaDomains: any key "
            "holder can make vLLM fetch URLs on the private network (Prometheus, the replicas, a cloud "
            "metadata address), and vLLM reads an empty list as `any host`. Fix: list the hosts image URLs "
            "may name, or set it to [no-remote-media.invalid] (never resolves: clients send images "
            "inline as data: URLs), or set the media limits to 0."
        )
    return None


def _check_dangerous_env(c: StackSections) -> str | None:
    found = [
        f"glm:serving.env/extraEnv.{name}={value!r}: {reason}"
        for name, value in sorted(c.serving.merged_env.items())
        if (reason := dangerous_env(name, value)) is not None
    ]
    return "\n".join(found) or None


def _check_rehearsal(c: StackSections) -> str | None:
    if c.rehearsing and c.hardware == "local":
        return (
            "glm:rehearsal=true on hardware local: the local stack already runs the simulator. "
            "Fix: remove glm:rehearsal, or set glm:hardware to the profile to rehearse (a800, ascend, rtx5090)."
        )
    return None


def _check_nvidia_gpus(c: StackSections) -> str | None:
    if c.container.gpus is None:
        return None
    if c.facts.accelerator != "nvidia":
        return f"glm:container.gpus is for NVIDIA hardware; {c.hardware} takes accelerators as devices."
    if c.container.gpus != "all":
        return (
            f"glm:container.gpus={c.container.gpus!r}: pulumi-docker 4.11 supports only `all` (any other "
            "value replaces the container on every up). Fix: remove it and list the cards in "
            "glm:container.accelerators; vLLM is pinned to them with CUDA_VISIBLE_DEVICES."
        )
    return None


def _check_shm(c: StackSections) -> str | None:
    # Also the policy pack's shm-for-tensor-parallel (mandatory): a crash, not a preference.
    shm_mb = c.container.shm_size_mb
    small = shm_mb is None or shm_mb <= DOCKER_DEFAULT_SHM_MB
    if c.serving.tensor_parallel_size > 1 and small and c.container.ipc_mode != "host":
        return (
            f"glm:container.shmSize={c.container.shm_size} and ipcMode is not host: with "
            f"tensorParallelSize={c.serving.tensor_parallel_size} the workers exchange tensors through "
            f"/dev/shm, and Docker's {DOCKER_DEFAULT_SHM_MB} MB default crashes them at random (A100 "
            "seed §8.1). Fix: set glm:container.shmSize (e.g. 64g) or glm:container.ipcMode host."
        )
    return None


def _check_shutdown_timeout(c: StackSections) -> str | None:
    timeout, grace = c.serving.shutdown_timeout, c.container.stop_grace_seconds
    if timeout is not None and timeout >= grace:
        return (
            f"glm:serving.shutdownTimeout={timeout} is not below glm:container.stopGraceSeconds={grace}: "
            "Docker would kill vLLM while it still finishes requests. Fix: stopGraceSeconds at least "
            f"{timeout + SHUTDOWN_MARGIN_SECONDS}, or unset shutdownTimeout (then {grace} - 5)."
        )
    return None


def _check_replicas_alike(c: StackSections) -> str | None:
    """One stack renders one profile: every replica behind the front is the same server."""
    found = [
        f"glm:target.hosts[{h.name}].hardware={h.hardware} but glm:hardware={c.hardware}: the front "
        "would balance across unlike replicas (another image, flags and KV pool). Fix: one stack per "
        "hardware profile; move this host to a stack of its own."
        for h in c.target.hosts
        if h.hardware is not None and h.hardware != c.hardware
    ]
    if len(c.target.hosts) > 1 and c.container.network_mode == "host":
        found.append(
            f"glm:container.networkMode=host with {len(c.target.hosts)} hosts: a replica is published on "
            "its host's private address from the private Docker network. Fix: networkMode bridge."
        )
    return "\n".join(found) or None


PLAIN_NGINX_IMAGES = ("nginx", "docker.io/library/nginx", "library/nginx", "nginxinc/nginx-unprivileged")
"""Official nginx images: no Lua module (they ship njs), which the usage meter runs in."""


def _image_repository(image: str) -> str:
    """``nginx:1.27`` -> ``nginx``; ``host:5000/a/b@sha256:...`` -> ``host:5000/a/b``."""
    name = image.split("@")[0]
    return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name


def _check_front_has_lua(c: StackSections) -> str | None:
    if not usage_meter_runs(c) or _image_repository(c.front.image) not in PLAIN_NGINX_IMAGES:
        return None
    return (
        f"glm:front.image={c.front.image} has no Lua module, and the usage meter (glm:front.usageMeter, on "
        f"by default) runs inside nginx as Lua. Fix: use an nginx with OpenResty's Lua module, such as "
        f"{FrontConfig.model_fields['image'].default} (the default: scripts/pulumi.sh config rm --path "
        f"glm:front.image), or an image with Debian's nginx, libnginx-mod-http-lua and lua-cjson (the local "
        f"stack's, offline/images.sh); or turn the meter off (glm:front.usageMeter.enabled false)."
    )


def _check_known_flags(c: StackSections) -> str | None:
    """Every flag exists in the profile's vLLM version (the real parser's table)."""
    return check_known_flags(c.image.vllm_version, render_flags(c), c.serving.extra_args, c.image.added_flags)


CHECKS = [
    _check_known_flags,
    _check_front_has_lua,
    _check_replicas_alike,
    _check_shutdown_timeout,
    _check_weights_fit,
    _check_tp_matches_accelerators,
    _check_cudagraph_sizes,
    _check_tool_parser,
    _check_max_model_len,
    _check_engine_ready_timeout,
    _check_smoke_deadline,
    _check_ports,
    _check_vllm_not_exposed,
    _check_nvidia_gpus,
    _check_dangerous_env,
    _check_plain_http,
    _check_shm,
    _check_rehearsal,
    _check_prometheus_bind,
    _check_extra_args,
    _check_env_names,
    _check_media_fetching,
    *KUBERNETES_CHECKS,
]
