"""The usage meter, rendered into the front's ``nginx.conf``: what the config gains when the meter is
on. Pure, like components/render/nginx_conf.py, which calls it.

The meter is Lua inside nginx (``components/host/meter/*.lua``, OpenResty's
lua-nginx-module): no hop, no process of its own, nothing separate to die. Its modules are rendered
into the config itself (``init_by_lua_block``), so ``nginx -t`` on a release checks exactly the
code that release runs, and a change of the meter is a graceful reload like any front change;
its counters live in a shared dict, which a reload keeps, and in a file, which a restart reads.
docs/front-and-alerts.md ("The usage meter") says why here and what it costs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from components.config import GATE_METRICS_CLIENT, FrontConfig, StackConfig
from components.config.edge import KeyLimits
from components.template import TEMPLATES, render_file

# vLLM's uvicorn drops idle keep-alive connections after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE). Nginx
# must give them up first, or it may send a POST on a socket uvicorn is closing and answer 502.
UPSTREAM_KEEPALIVE_TIMEOUT_SECONDS = 4

METER_DIR = TEMPLATES.parent / "meter"
LUA_MODULES = (
    "meter_request",
    "meter_answer",
    "meter_shares",
    "meter_budget",
    "meter_counters",
    "meter_peers",
    "meter_handoff",
    "meter_route",
    "meter_pods",
    "meter_replicas",
    "meter_queue",
    "meter_body",
    "meter",
)
"""The meter's Lua modules, each ``meter/<name>.lua``; ``meter`` is the one nginx calls."""
GENERATION_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
"""The routes that take engine slots and are metered in tokens; the other API routes are counted."""
METER_STATE_DIR = "/var/lib/glm53-usage"
"""Where the front keeps the meter's counters across restarts (a volume on Docker hosts)."""
METER_STATE_FILE = f"{METER_STATE_DIR}/counters.json"
SHARED_DICT_SIZE = "16m"
"""The counters of every key (a few hundred entries each) and the slots held: ample."""
METRICS_PATH = "/metrics/usage"
"""Where the stack's Prometheus reads the counters: the front's status port (never published)."""
SMALL_BODY = "64k"
"""``client_body_buffer_size`` on the metered routes: bodies up to this are read in memory (and
decoded whole); larger ones are scanned from nginx's temporary file (meter_request.lua)."""


PEERS_PATH = "/meter/peers"
"""Where a front pod tells the others what each key used (meter_peers.lua), on the status port."""
INHERIT_PATH = "/meter/inherit"
"""Where a front pod takes a leaving one's counts (meter_handoff.lua), on the status port."""
DRAIN_FILE = "/tmp/glm53-front.draining"
"""A front pod's preStop writes it; the meter answers with ``<it>.done`` once nothing is in flight,
then hands the pod's counts to another at ``<it>.handoff`` (``<it>.handoff.done``: what happened)."""


@dataclass(frozen=True)
class MeterPeers:
    """Several front pods, one account (components/host/meter/meter_peers.lua)."""

    discovery: str | None
    """host:port of the pods' status ports behind one Service: how a pod finds the others."""
    port: int
    """The status port, where each pod is asked by its own address."""
    name: str | None = None
    """This pod's name and address: read from /etc/hostname and /etc/hosts when None (a pod); set
    by a harness running two fronts on one machine."""
    address: str | None = None
    drain_file: str = DRAIN_FILE
    """Where the preStop says the pod is leaving: one a front for a harness's two on one machine."""


@dataclass(frozen=True)
class MeterRoute:
    """The inference routes go through the usage meter."""

    slots_per_replica: int
    """Each replica's ``--max-num-seqs``: the meter shares that many times the replicas in rotation."""
    replicas: int = 1
    """The replicas there are: the count until the rotation has written its own (a release), or for
    good (a one-file harness, whose replicas are all in)."""
    state_file: str | None = METER_STATE_FILE
    """Where the counters are kept across restarts (None: nowhere)."""
    max_model_len: int = 0
    """The engine's ``--max-model-len``: a request with no ``max_tokens`` may cost that much per
    sequence (a budget's estimate)."""
    own_clients: tuple[str, ...] = ()
    """The stack's own clients (the gate, the semantic probe): never under a budget."""
    unshared: tuple[str, ...] = ()
    """Clients that take no part in the fair share (the gate: a request at a time, in a deploy):
    admitted as they come, no slot kept free for them."""
    minute_seconds: int = 60
    """A budget's "minute": a harness's test clock may shorten it; a stack never does."""
    peers: MeterPeers | None = None
    """The other front pods that share the account (Kubernetes); None: this front is the only one."""
    pods_file: str | None = None
    """Kubernetes: the file the front pod's ``routes`` lister keeps of the serving pods a request may
    go to (components/host/k8s_targets.py ``--routes``); the meter picks each request's pod from it
    (meter_pods.lua), the least loaded or, with prefix affinity, the conversation's. None: a Docker
    front, whose rotation names each replica's upstream group."""


def meter_route(config: StackConfig, replicas: int) -> MeterRoute:
    """The meter of ``config``'s stack over ``replicas`` replicas."""
    return MeterRoute(
        config.serving.max_num_seqs,
        replicas,
        max_model_len=config.serving.max_model_len,
        own_clients=(GATE_METRICS_CLIENT, config.semantic_probe.client_name),
        unshared=(GATE_METRICS_CLIENT,),
    )


def routes_by_prefix(front: FrontConfig, meter: MeterRoute | None) -> bool:
    """Whether a Docker front picks each generation request's replica group by its prefix
    (meter_route.lua): prefix affinity asked for, the meter on (it reads the body), and more than one
    replica to choose from."""
    return (
        meter is not None
        and meter.pods_file is None
        and front.routing.policy == "prefix-affinity"
        and meter.replicas > 1
    )


POD_TRIES = 3
"""A Kubernetes front's tries of a request, each on another pod (the Docker front's
``proxy_next_upstream_tries``, components/render/nginx_conf.py)."""


def routing_settings(front: FrontConfig, meter: MeterRoute) -> dict[str, object] | None:
    """The meter's ``routing``: on a Kubernetes front every generation request's pod (``keyed``: by
    its prefix, else the least loaded); on a Docker front the replica of a request with prefix
    affinity; None: the upstream picks."""
    if meter.pods_file is not None:
        return {
            "keyed": front.routing.policy == "prefix-affinity",
            "load_factor": front.routing.load_factor,
            "pods_file": meter.pods_file,
            "tries": POD_TRIES,
        }
    return {"load_factor": front.routing.load_factor} if routes_by_prefix(front, meter) else None


def _limits(limits: KeyLimits) -> dict[str, int]:
    """A key's budget as the meter reads it (snake_case fields, unset ones left out)."""
    return {field: value for field, value in limits.model_dump().items() if value is not None}


def lua_modules() -> str:
    """Every module as ``package.preload`` entries, so ``require`` finds them in any worker."""
    parts = []
    for name in LUA_MODULES:
        source = (METER_DIR / f"{name}.lua").read_text()
        parts.append(f'package.preload["{name}"] = function(...)\n{source}end\n')
    return "".join(parts)


def meter_settings(front: FrontConfig, meter: MeterRoute) -> str:
    """What ``meter.configure`` gets, as JSON: the weights by key name, the slots per replica, the
    queue time and where the counters are kept. No key, no secret. One value a line, so that
    `pulumi preview --diff` of the front's config shows which one changes (on one line, the engine
    printed the whole line twice, cut at 150 characters, before the change).

    >>> print(meter_settings(FrontConfig(), MeterRoute(8, state_file=None)))
    {
      "default_limits": null,
      "exempt": [],
      "fair_share": true,
      "limits": {},
      "max_model_len": 0,
      "minute_seconds": 60,
      "queue_seconds": 10.0,
      "routing": null,
      "slots": 8,
      "state_file": null,
      "unshared": [],
      "weights": {}
    }
    """
    limits = {name: _limits(value) for name, value in sorted(front.usage_meter.limits.items())}
    default = front.usage_meter.default_limits
    settings: dict[str, object] = {
        "default_limits": _limits(default) if default is not None else None,
        "exempt": sorted(meter.own_clients),
        "fair_share": front.usage_meter.fair_share,
        "limits": limits,
        "max_model_len": meter.max_model_len,
        "minute_seconds": meter.minute_seconds,
        "queue_seconds": front.usage_meter.queue_seconds,
        "routing": routing_settings(front, meter),
        "slots": meter.slots_per_replica,
        "state_file": meter.state_file,
        "unshared": sorted(meter.unshared),
        "weights": dict(sorted(front.usage_meter.weights.items())),
    }
    if meter.peers is not None:
        peers = {"discovery": meter.peers.discovery, "port": meter.peers.port, "drain_file": meter.peers.drain_file,
                 "name": meter.peers.name, "address": meter.peers.address}  # fmt: skip
        settings["peers"] = {field: value for field, value in peers.items() if value is not None}
    return json.dumps(settings, sort_keys=True, indent=2)


@dataclass(frozen=True)
class MeterConf:
    """The pieces of ``nginx.conf`` the meter adds or changes."""

    http: str
    """http level: the shared dict, the modules, ``$replicas_in_rotation``."""
    routes: str
    """The public server's inference locations, each with the meter's phase handlers."""
    metrics: str
    """The status server's location of the counters."""


def meter_conf(
    front: FrontConfig, meter: MeterRoute, *, routes: tuple[str, ...], scheme: str, rotation_dir: str | None
) -> MeterConf:
    """``rotation_dir``: where the rotation writes how many replicas are in (None: a harness, all in)."""
    settings = meter_settings(front, meter)
    if "]==]" in settings:
        raise ValueError("the usage meter's settings cannot hold ']==]'")
    # replicas.map (``glm N;``) is what templates/rotation.sh writes at each change. A bracket makes
    # the name a pattern, which may match nothing: before the first change, the replicas there are.
    count = f"        include {rotation_dir}/replicas.ma[p];" if rotation_dir else ""
    http = render_file(
        "nginx-meter-http.conf",
        {
            "dict_size": SHARED_DICT_SIZE,
            "modules": lua_modules().rstrip("\n"),
            "settings": settings.replace("\n", "\n" + " " * 8),  # under the line that decodes them
            "replicas": str(meter.replicas),
            "rotation_count": count,
        },
    )
    # With prefix affinity the meter names the request's replica group in $glm_upstream (nginx's
    # upstream of that replica, the others its backups); on Kubernetes ``glm_pods``, whose balancer
    # connects to the request's pod. Anything it did not route goes to ``vllm``: the rotation's
    # replicas round-robin, or the serving Service.
    chosen_by_meter = routing_settings(front, meter) is not None
    chosen = {
        "set_upstream": "            set $glm_upstream vllm;" if chosen_by_meter else "",
        "upstream": "$glm_upstream" if chosen_by_meter else "vllm",
    }
    if meter.pods_file is not None:
        timeout = {"keepalive_timeout": str(UPSTREAM_KEEPALIVE_TIMEOUT_SECONDS)}
        http += "\n" + render_file("nginx-meter-pods.conf", timeout)
    located = "".join(
        render_file(
            "nginx-meter-route.conf",
            {"route": route, "scheme": scheme, "body_buffer": SMALL_BODY, **chosen},
        )
        if route in GENERATION_ROUTES
        else render_file("nginx-meter-count-route.conf", {"route": route, "scheme": scheme})
        for route in routes
    )
    metrics = render_file("nginx-meter-metrics.conf", {"path": METRICS_PATH})
    if meter.peers is not None:
        metrics += render_file("nginx-meter-peers.conf", {"path": PEERS_PATH, "inherit_path": INHERIT_PATH})
    return MeterConf(http, located, metrics)
