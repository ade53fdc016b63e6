"""The nginx front on Kubernetes: the same template and renderer as on a Docker host
(``render_front_files``), nginx.conf and the upstream in a ConfigMap, the keys (and the replica key
the serving pods' guards ask for) in a Secret, behind the Service clients use. With
``glm:front.tls`` the Secret also holds ``tls.crt``/``tls.key`` (the Docker front's files, ciphers
and protocols), and the front speaks TLS to the pods' guards, pinning their certificate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.config import FrontConfig, KubernetesTargetConfig
from components.config.values import duration_seconds
from components.kubernetes import workload
from components.kubernetes.pod_security import (
    FRONT_SCRATCH,
    LISTER_SCRIPT,
    api_token_volume,
    lister_account,
    lister_container,
    restricted,
)
from components.kubernetes.state import moved_from_root
from components.render.nginx_conf import (
    CONF_FILE,
    CONTAINER_PORT,
    NEXT_UPSTREAM_TRIES,
    STATUS_PORT,
    render_front_files,
    upstream_server,
)
from components.render.nginx_meter import DRAIN_FILE, METER_STATE_DIR, MeterPeers, MeterRoute
from components.render.openai_errors import no_replica_body
from components.template import one_line_script

TlsFiles = tuple[pulumi.Output[str], pulumi.Output[str]]
"""``glm:tlsCertificate`` and ``glm:tlsKey`` (``Secrets.tls_files``)."""

FRONT_DIR = "/etc/glm53-front"
"""Where the front's release (nginx.conf, the key maps, the upstream) is mounted in its pod."""
FRONT_ROTATION_DIR = f"{FRONT_DIR}/rotation"
FRONT_DRAIN_SECONDS = 5
FRONT_QUIT = one_line_script(
    "nginx-quit.sh", values={"PAUSE_SECONDS": str(FRONT_DRAIN_SECONDS), "CONF": f"{FRONT_DIR}/{CONF_FILE}"}
)
"""The front's preStop: out of its Service first, then nginx's graceful quit (SIGTERM is a fast one)."""
METER_DRAIN_SECONDS = 40
"""How long a metered front pod's preStop waits for its last request before the final scrape."""
HANDOFF_SECONDS = 5
"""How long it then waits for the meter to hand its counts to a pod that stays (meter_handoff.lua)."""
ROUTES_DIR = "/run/glm53-routes"
"""Where a metered front pod's ``routes`` lister writes the serving pods, and nginx reads them."""
ROUTES_FILE = f"{ROUTES_DIR}/pods"
"""The meter's ``pods_file`` (components/host/meter/meter_pods.lua)."""
ROUTES_PERIOD_SECONDS = 0.5
"""How often the lister lists the serving pods: a pod that stops being Ready leaves the front's
choice within about this and the meter's read (0.25 s), as it leaves the Service's."""
ROUTES_ACCOUNT = "glm53-front"
"""The front pods' service account: it may list the namespace's pods (the ``routes`` lister's token)."""
API_TOKEN = api_token_volume()


def final_scrape_seconds(scrape_interval: str) -> int:
    """How long a metered front pod's preStop waits for the final scrape of its counts: the stack's
    scrape interval (``glm:monitoring.scrapeInterval``) and one."""
    return math.ceil(duration_seconds(scrape_interval)) + 1


def front_grace_seconds(metered: bool, scrape_seconds: int) -> int:
    """A front pod's ``terminationGracePeriodSeconds``: with the meter, its preStop's longest (the
    pause, the last requests, the final scrape, the handoff, a scrape of the heir's copy) and 20 s
    for nginx's graceful quit."""
    if not metered:
        return 60
    return FRONT_DRAIN_SECONDS + METER_DRAIN_SECONDS + scrape_seconds + HANDOFF_SECONDS + scrape_seconds + 20


def metered_quit(scrape_seconds: int) -> str:
    """The preStop of a front pod with the meter: as ``FRONT_QUIT``, with the last requests finished
    and their counts scraped (``scrape_seconds``: the stack's scrape interval and one) before nginx quits."""
    return one_line_script("nginx-quit-metered.sh", values={
        "PAUSE_SECONDS": str(FRONT_DRAIN_SECONDS), "DRAIN_FILE": DRAIN_FILE,
        "DRAIN_SECONDS": str(METER_DRAIN_SECONDS), "SCRAPE_SECONDS": str(scrape_seconds),
        "HANDOFF_SECONDS": str(HANDOFF_SECONDS),
        "CONF": f"{FRONT_DIR}/{CONF_FILE}",
    })  # fmt: skip


NO_POD_PASSED = (
    "no serving pod has passed its checks just now (each is starting, or failing them). Retry later."
)
REASON_MAP = f"glm '{no_replica_body(NO_POD_PASSED)}';\n"
"""The front's 503 when the Service had no pod for a request: the Service lists only pods whose
gate passed, so that is why (the template's fallback says "starting or down", which a pod that
answers wrong is not). The Docker front's rotation writes the same file with the failing host's
gate, ``rotation/reason.map``."""

KEEPALIVE_TIME_SECONDS = 2
"""How long nginx reuses one connection to the Service: shorter than the serving pods' preStop
pause, so no request rides an old connection into a pod that has begun to drain."""


def upstream_conf(cluster_ip: str, port: int) -> str:
    """The front's upstream: the serving Service, which lists only pods that passed their gate.

    A Service is one address whatever its pods do, and behind it a connection reaches one pod (the
    node's rules pick it when the connection opens): so the address is never marked failed
    (``max_fails=0``: one failure is one pod stopping, not the Service), it is listed once per
    retry nginx may make (a retry is a new connection, which reaches a Ready pod), and each
    connection lives at most ``KEEPALIVE_TIME_SECONDS``, less than the preStop pause.
    """
    server = f"        {upstream_server(f'{cluster_ip}:{port}', max_fails=0)}\n"
    return server * NEXT_UPSTREAM_TRIES + f"        keepalive_time {KEEPALIVE_TIME_SECONDS}s;\n"


def _front_files(
    front: FrontConfig,
    keys: pulumi.Output[dict[str, str]],
    metrics_keys: pulumi.Output[dict[str, str]],
    guard_files: pulumi.Output[dict[str, str]],
    tls_files: TlsFiles | None,
    meter: pulumi.Output[MeterRoute] | None = None,
    prometheus: pulumi.Output[str] | None = None,
) -> pulumi.Output[dict[str, str]]:
    """The release, with the replica key the pods' guards ask for (components/kubernetes/guard.py) and,
    with ``glm:front.tls``, the stack's TLS pair."""
    pair = pulumi.Output.all(*tls_files) if front.tls and tls_files is not None else None

    def render(args: list[Any]) -> dict[str, str]:
        tls_pair = (str(args[3][0]), str(args[3][1])) if args[3] else None
        return render_front_files(
            front,
            dict(args[0]),
            dict(args[1]),
            tls_pair,
            rotation_dir=FRONT_ROTATION_DIR,
            replica_files=args[2],
            meter=args[4],
            prometheus=args[5],
        )

    every = pulumi.Output.all(keys, metrics_keys, guard_files, pair, meter, prometheus)
    return pulumi.Output.secret(every.apply(render))


def _digest(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class KubernetesFrontArgs:
    """What the front serves and where (pass the cluster's provider in ``opts``)."""

    front: FrontConfig
    """``glm:front``: image, TLS, limits, timeouts, the opt-ins its Service records."""
    k8s_target: KubernetesTargetConfig
    """``glm:target.kubernetes``: namespace, pull policy, the front's NodePort."""
    stack: str
    """The stack's name: the front pods' labels."""
    upstream: pulumi.Output[str]
    """``upstream_conf`` of the serving pods' Service."""
    api_keys: pulumi.Output[dict[str, str]]
    """Client name to API key (secret): ``glm:apiKeys`` and the probe's."""
    metrics_keys: pulumi.Output[dict[str, str]]
    """Client name to metrics key (secret): ``glm:metricsKeys``, the gate's, the guards' scrape key."""
    guard_files: pulumi.Output[dict[str, str]]
    """The replica key (and pinned certificate) the pods' guards ask for (``GuardCredentials.front_files``)."""
    tls_files: TlsFiles | None
    """``glm:tlsCertificate``/``glm:tlsKey``, with ``glm:front.tls``."""
    after: list[pulumi.Resource]
    """What the front's pods wait for: the images' loads onto the nodes."""
    meter: MeterRoute | None = None
    """The usage meter in the inference routes (``meter_route``); the pods share one account
    (``MeterPeers``, found here through their own Service). None: nginx straight to the Service."""
    prometheus: pulumi.Output[str] | None = None
    """host:port of the stack's Prometheus: the front serves the status page from it (/status/)."""
    scrape_seconds: int = 16
    """The stack's scrape interval and one: how long a leaving pod keeps its final counts to be read."""
    lister_image: pulumi.Input[str] | None = None
    """An image with python3 (the gate sidecar's), for the ``routes`` lister beside a metered nginx."""
    serving_port: int = 0
    """The serving pods' guard port: where the meter sends a request it routed to a pod."""


class KubernetesFront(pulumi.ComponentResource):
    """nginx from the same template: nginx.conf and the upstream in a ConfigMap, the key maps in a
    Secret; a change of either rolls the front (their digest is a pod annotation)."""

    deployment: k8s.apps.v1.Deployment
    service: k8s.core.v1.Service
    """The Service clients use (ClusterIP, or the NodePort ``frontNodePort``)."""

    def __init__(
        self, name: str, args: KubernetesFrontArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("glm:k8s_front:KubernetesFront", name, None, opts)
        front, k8s_target = args.front, args.k8s_target
        ns = k8s_target.namespace
        if front.tls and args.tls_files is None:
            raise ValueError(f"{name}: glm:front.tls is on but glm:tlsCertificate/glm:tlsKey are not set")
        child = moved_from_root(self)
        selector = workload.labels(args.stack, "front")
        meter: pulumi.Output[MeterRoute] | None = None
        routed: list[pulumi.Resource] = []
        if args.meter is not None:
            # How each pod finds the others (meter_peers.lua): their status ports behind one Service.
            peers = k8s.core.v1.Service(
                f"{name}-peers",
                metadata={"namespace": ns, "name": "glm53-front-peers"},
                spec={"selector": selector, "ports": [{"name": "status", "port": STATUS_PORT, "targetPort": "status"}]},
                opts=child,
            )  # fmt: skip
            route = args.meter
            # Which serving pods a request may go to: listed by the pod's `routes` sidecar (meter_pods.lua).
            routed = [
                lister_account(f"{name}-routes", ROUTES_ACCOUNT, ns, child),
                k8s.core.v1.ConfigMap(
                    f"{name}-routes-script",
                    metadata={"namespace": ns, "name": "glm53-front-routes"},
                    data={LISTER_SCRIPT.name: LISTER_SCRIPT.read_text()},
                    opts=child,
                ),
            ]
            meter = peers.spec.cluster_ip.apply(
                lambda ip: dataclasses.replace(route, peers=MeterPeers(f"{ip}:{STATUS_PORT}", STATUS_PORT))
            )
        files = _front_files(
            front, args.api_keys, args.metrics_keys, args.guard_files, args.tls_files, meter, args.prometheus
        )
        conf = files.apply(lambda f: {CONF_FILE: f[CONF_FILE], "reason.map": REASON_MAP})
        secret_files = files.apply(lambda f: {k: v for k, v in f.items() if k != CONF_FILE})
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata={"namespace": ns, "name": "glm53-front"},
            data=pulumi.Output.all(pulumi.Output.unsecret(conf), args.upstream).apply(
                lambda a: {**a[0], "upstream.conf": a[1]}
            ),
            opts=child,
        )
        secret = k8s.core.v1.Secret(
            f"{name}-keys",
            metadata={"namespace": ns, "name": "glm53-front-keys"},
            string_data=secret_files,
            opts=child,
        )
        digest = pulumi.Output.unsecret(
            pulumi.Output.all(files, args.upstream).apply(
                lambda a: _digest({**a[0], "u": a[1], "r": REASON_MAP})
            )
        )
        self.deployment = k8s.apps.v1.Deployment(
            name,
            metadata={"namespace": ns, "name": "glm53-front"},
            spec={
                "replicas": k8s_target.front_replicas,
                "selector": {"matchLabels": selector},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {
                    "metadata": {"labels": selector, "annotations": {"glm53/release": digest}},
                    "spec": _front_pod(args, selector),
                },
            },
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[config_map, secret, *routed, *args.after])
            ),
        )  # fmt: skip
        if k8s_target.front_replicas > 1:
            # A drain or an eviction takes one front pod at a time; the others keep the door open.
            k8s.policy.v1.PodDisruptionBudget(
                f"{name}-disruption-budget",
                metadata={"namespace": ns, "name": "glm53-front"},
                spec={"maxUnavailable": 1, "selector": {"matchLabels": selector}},
                opts=child,
            )
        port: dict[str, Any] = {"name": "http", "port": CONTAINER_PORT, "targetPort": "http"}
        if k8s_target.front_node_port is not None:
            port["nodePort"] = k8s_target.front_node_port
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={
                "namespace": ns,
                "name": "glm53-front",
                "annotations": workload.front_annotations(front),
            },
            spec={
                "type": "NodePort" if k8s_target.front_node_port is not None else "ClusterIP",
                "selector": selector,
                "ports": [port],
            },
            opts=child,
        )
        self.register_outputs({})


def _front_pod(args: KubernetesFrontArgs, selector: dict[str, str]) -> dict[str, Any]:
    """The front pod's spec: nginx reading its release (the ConfigMap and the key Secret, projected
    into one folder), its preStop drain and, with the usage meter, the status port and the usage
    volume that outlives a restarted container."""
    projected = {
        "sources": [
            {"configMap": {"name": "glm53-front", "items": [
                {"key": CONF_FILE, "path": CONF_FILE}, {"key": "upstream.conf", "path": "rotation/upstream.conf"},
                {"key": "reason.map", "path": "rotation/reason.map"},
            ]}},
            {"secret": {"name": "glm53-front-keys"}},
        ]
    }  # fmt: skip
    metered = args.meter is not None
    front, k8s_target = args.front, args.k8s_target
    container: dict[str, Any] = {
        "name": "nginx",
        "image": front.image,
        "imagePullPolicy": k8s_target.image_pull_policy,
        "command": ["nginx", "-c", f"{FRONT_DIR}/{CONF_FILE}", "-e", "stderr", "-g", "daemon off;"],
        "ports": [{"name": "http", "containerPort": CONTAINER_PORT}],
        "volumeMounts": [{"name": "release", "mountPath": FRONT_DIR, "readOnly": True}, FRONT_SCRATCH[1]],
        "readinessProbe": workload.listening_probe("http"),
        "lifecycle": {"preStop": {"exec": {"command": [
            "/bin/sh", "-c", metered_quit(args.scrape_seconds) if metered else FRONT_QUIT,
        ]}}},
    }  # fmt: skip
    volumes: list[dict[str, Any]] = [{"name": "release", "projected": projected}, FRONT_SCRATCH[0]]
    if metered:
        # The counters of a container the kubelet restarts (the pod's own volume outlives it).
        container["ports"].append({"name": "status", "containerPort": STATUS_PORT})
        container["volumeMounts"].append({"name": "usage", "mountPath": METER_STATE_DIR})
        volumes.append({"name": "usage", "emptyDir": {}})
        container["volumeMounts"].append({"name": "routes", "mountPath": ROUTES_DIR, "readOnly": True})
        volumes += [
            {"name": "routes", "emptyDir": {"sizeLimit": "1Mi"}},
            {"name": "routes-script", "configMap": {"name": "glm53-front-routes"}},
            API_TOKEN[0],
        ]
    return restricted({
        "terminationGracePeriodSeconds": front_grace_seconds(metered, args.scrape_seconds),
        # One pod per node where there are several: a node lost takes one door, not all.
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": selector},
        }],
        **({"serviceAccountName": ROUTES_ACCOUNT} if metered else {}),
        "containers": [container, *([_routes_container(args)] if metered else [])],
        "volumes": volumes,
    })  # fmt: skip


def _routes_container(args: KubernetesFrontArgs) -> dict[str, Any]:
    """The lister of the serving pods a request may go to (components/host/k8s_targets.py
    ``--routes``), beside a metered nginx: the one container of the pod with the API token."""
    if args.lister_image is None:
        raise ValueError("a metered Kubernetes front needs lister_image (an image with python3)")
    argv = [
        "--routes", args.k8s_target.namespace, workload.label_selector(args.stack, "vllm"),
        str(args.serving_port), ROUTES_FILE, str(ROUTES_PERIOD_SECONDS),
    ]  # fmt: skip
    return lister_container(
        "routes", args.lister_image, args.k8s_target.image_pull_policy, argv,
        script="routes-script", out="routes", out_dir=ROUTES_DIR,
    )  # fmt: skip
