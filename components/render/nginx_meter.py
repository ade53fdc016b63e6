"""The front's side of the usage meter (components/docker/usage_meter.py): what ``nginx.conf`` gains when
the inference routes go through the meter. Pure, like components/render/nginx_conf.py, which calls it.

nginx sends the meter the key's name and the share table with every request, finds the meter by
name per request (Docker's DNS), and serves the meter's way back to the replicas in rotation on a
return listener that is never published.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from components.config import FrontConfig
from components.template import render_file

USAGE_SHARES_FILE = "usage-shares.conf"
"""The share table nginx sends the meter (key names and weights, no key). Delivered with the key
maps, as it changes with them."""
DOCKER_DNS = "127.0.0.11"
"""Docker's embedded DNS on a user-defined network: nginx finds the meter by name at request time,
so a replaced meter container (a new address) needs no reload."""
METER_RETURN_PORT = 8081
"""The front's return listener: the usage meter sends each request back here, and nginx sends it on
to a replica in rotation (images/usage-meter). Never published."""
RETURN_ERRORS = ("not_found", "upstream_unavailable", "upstream_timeout")
"""The public server's answers the return listener gives too."""
_IP_PORT = re.compile(r"([0-9.]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}")


@dataclass(frozen=True)
class MeterRoute:
    """The inference routes go through the usage meter (components/docker/usage_meter.py)."""

    address: str
    """The meter's ``host:port`` on the private network."""
    slots_per_replica: int
    """Each replica's ``--max-num-seqs``: the meter shares that many times the replicas in rotation."""
    replicas: int = 1
    """The replicas there are: the count until the rotation has written its own (a release), or for
    good (a one-file harness, whose replicas are all in)."""


def shares_header(front: FrontConfig, key_names: Sequence[str], slots_per_replica: int) -> str:
    """The share table nginx sends the meter with every request (``X-Glm-Shares``): the slots, as
    ``maxNumSeqs x`` the replicas in rotation (nginx's ``$replicas_in_rotation``, filled per request),
    and each key name's weight. In nginx's config, not the meter's: a key, slot or rotation change is
    a graceful reload, and the meter (its counters, its streams in flight) keeps running.

    >>> shares_header(FrontConfig(), ["bob", "alice"], 32)
    'capacity=32x$replicas_in_rotation alice=1 bob=1'
    """
    meter = front.usage_meter
    weights = " ".join(f"{name}={meter.weights.get(name, 1.0):g}" for name in sorted(key_names))
    capacity = f"capacity={slots_per_replica}x$replicas_in_rotation"
    return f"{capacity}{' ' + weights if weights else ''}" + ("" if meter.fair_share else " off")


def shares_directive(front: FrontConfig, key_names: Sequence[str], meter: MeterRoute) -> str:
    """The header that tells the meter every key's weight and the slots (``usage-shares.conf``)."""
    table = shares_header(front, key_names, meter.slots_per_replica)
    return f'        proxy_set_header X-Glm-Shares "{table}";\n'


@dataclass(frozen=True)
class MeterConf:
    """The pieces of ``nginx.conf`` the meter adds or changes."""

    headers: str
    """Server level: the key's name, the share table, the meter's address (a variable)."""
    resolver: str
    """http level: Docker's DNS, when the meter has a name (empty for an address)."""
    replicas: str
    """http level: ``$replicas_in_rotation``, from the rotation's count (a release)."""
    routes: str
    """The public server's inference locations, to the meter."""
    return_server: str
    """The return listener's ``server`` block."""


def meter_conf(
    front: FrontConfig,
    meter: MeterRoute,
    *,
    shares: str | None,
    proxy: Mapping[str, str],
    routes: Sequence[str],
    scheme: str,
    return_listen: str,
    errors: Mapping[str, str],
    rotation_dir: str | None,
) -> MeterConf:
    """``shares``: the share table inline (a one-file harness), else the release's file; ``proxy``:
    the proxy settings' values, which the return listener repeats (credential, timeouts, retries);
    ``rotation_dir``: where the rotation writes how many replicas are in (None: a harness, all in)."""
    # Only the key's name goes to the meter, as a header nginx sets itself (a client's own is
    # replaced), with the share table; the address is a variable, so nginx resolves it per request.
    table = shares.rstrip("\n") if shares is not None else f"        include {USAGE_SHARES_FILE};"
    headers = (
        f"        proxy_set_header X-Glm-Client $api_client;\n{table}\n"
        f'        set $usage_meter "{meter.address}";'
    )
    resolver = (
        ""
        if _IP_PORT.fullmatch(meter.address)
        else render_file("nginx-meter-resolver.conf", {"resolver": DOCKER_DNS})
    )
    return_server = render_file(
        "nginx-meter-return.conf",
        {
            "meter_return_listen": return_listen,
            "max_body_size": front.max_body_size,
            "proxy_settings": render_file("nginx-proxy.conf", {**proxy, "meter_headers": ""}).rstrip("\n"),
            "routes": "".join(
                render_file("nginx-return-route.conf", {"route": route, "scheme": scheme}) for route in routes
            ).rstrip("\n"),
            **{f"error_{code}": errors[code] for code in RETURN_ERRORS},
        },
    )
    meter_routes = "".join(render_file("nginx-meter-route.conf", {"route": route}) for route in routes)
    # replicas.map (``glm N;``) is what templates/rotation.sh writes at each change. A bracket makes
    # the name a pattern, which may match nothing: before the first change, the replicas there are.
    count = f"        include {rotation_dir}/replicas.ma[p];" if rotation_dir else ""
    replicas = render_file(
        "nginx-meter-replicas.conf", {"replicas": str(meter.replicas), "rotation_count": count}
    )
    return MeterConf(headers, resolver, replicas, meter_routes, return_server)
