"""``glm:target``: where the stack runs, Docker hosts over SSH (their endpoints and pinned host
keys) or a Kubernetes cluster, and which host carries the front.
"""

from __future__ import annotations

import base64
import getpass
import itertools
import platform
import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from components.config.values import Hardware
from components.model_base import Model, Positive
from policy.glm_policies import binds_all_interfaces, is_loopback


class HostConfig(Model):
    name: str = Field(description="Short name of the host, used in resource names and outputs.")
    docker_host: str = Field(
        description="Docker endpoint of the host: `ssh://[user@]host[:port]` for a GPU box (IPv6 as "
        "`ssh://[2001:db8::1]:2222`; no user means your local user, as with the Docker CLI), "
        "`unix:///var/run/docker.sock` for the local engine. The SSH commands use the same user and port."
    )
    host_key: str | None = Field(
        None,
        description="The host's SSH public key, `ssh-ed25519 AAAA…` (from `ssh-keyscan -p PORT HOST`); "
        "required for `ssh://`: Docker and the commands refuse any other key.",
    )
    identity_file: str | None = Field(
        None,
        description="Private key file (on the machine running Pulumi) used by Docker's ssh and the "
        "commands alike; default: the SSH agent.",
    )
    private_address: str | None = Field(
        None,
        description="With several hosts: the address on the hosts' private network where this host "
        "publishes vLLM for the front (never all interfaces); default: the address of `dockerHost`.",
    )
    hardware: Hardware | None = Field(
        None,
        description="What the box is, when the inventory says so; must equal `glm:hardware` (the "
        "replicas behind one front are identical). Unset: `glm:hardware`.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_ssh_port(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("dockerHost"), str):
            # URL schemes are case-insensitive (RFC 3986 §3.1): `SSH://` is `ssh://`, and every
            # check below (host key, user, port) must see it as such.
            scheme, sep, rest = data["dockerHost"].partition("://")
            if sep:
                data = {**data, "dockerHost": f"{scheme.lower()}://{rest}"}
        if isinstance(data, dict) and "sshPort" in data:
            raise ValueError(
                f"glm:target.hosts[].sshPort={data['sshPort']} is no longer read: Docker took the port "
                f"from dockerHost and the commands from sshPort. Fix: put the port in dockerHost "
                f"(ssh://user@host:{data['sshPort']}) and remove sshPort."
            )
        return data

    @model_validator(mode="after")
    def _ssh_endpoint(self) -> HostConfig:
        key = f"glm:target.hosts[{self.name}]"
        if self.is_local:
            return self
        if not self.docker_host.startswith("ssh://"):
            # tcp:// is the Docker API in clear without authentication; a bare name or any other
            # scheme would reach the host without the pinned host key.
            raise ValueError(
                f"{key}.dockerHost={self.docker_host!r} is neither ssh:// nor unix://: only those two "
                "are accepted (tcp:// talks to the Docker API in clear with no authentication, and "
                "anything else connects without the pinned host key). Fix: "
                "ssh://[user@]host[:port] with hostKey, or unix:///var/run/docker.sock for this machine."
            )
        try:
            url = urlsplit(self.docker_host)
            url.port  # noqa: B018 (parses the port; raises on garbage)
        except ValueError as err:
            raise ValueError(
                f"{key}.dockerHost={self.docker_host!r} is not ssh://[user@]host[:port] ({err}). "
                "Fix: write an IPv6 address in brackets, e.g. ssh://deploy@[2001:db8::1]:2222."
            ) from None
        if not url.hostname or url.path not in ("", "/"):
            raise ValueError(
                f"{key}.dockerHost={self.docker_host!r} has no host or has a path. "
                "Fix: ssh://[user@]host[:port], e.g. ssh://deploy@gpu01:2222."
            )
        keyscan = f"ssh-keyscan -t ed25519 -p {self.ssh_port} {self.ssh_address}"
        if self.host_key is None:
            raise ValueError(
                f"{key}.hostKey is not set for {self.docker_host}: without it, whatever answers at "
                f"that address gets the deployment and your SSH login. Fix: run `{keyscan}`, check "
                f"the key with the host's owner, and set hostKey to its `ssh-ed25519 AAAA…` part."
            )
        if _public_key_line(self.host_key) is None:
            raise ValueError(
                f"{key}.hostKey={self.host_key[:40]!r} is not an SSH public key. Fix: set it to the "
                f"`ssh-ed25519 AAAA…` part of `{keyscan}`."
            )
        return self

    @property
    def is_local(self) -> bool:
        return self.docker_host.startswith("unix://")

    @property
    def build_platform(self) -> str | None:
        """``linux/<arch>`` of an image built by this host's engine, where the program knows it: a
        local engine is this machine's. Over SSH the host's architecture is not known before the
        build: None, and the Docker provider says which one it assumes (this machine's, as here),
        which is worth reading there.

        >>> HostConfig(name="box", dockerHost="unix:///var/run/docker.sock").build_platform in (
        ...     "linux/amd64", "linux/arm64")
        True
        """
        if not self.is_local:
            return None
        machine = platform.machine()
        return f"linux/{ {'x86_64': 'amd64', 'aarch64': 'arm64'}.get(machine, machine) }"

    @property
    def ssh_user(self) -> str:
        """The URL's user or, as the Docker CLI does, the local user (never a silent root)."""
        return urlsplit(self.docker_host).username or getpass.getuser()

    @property
    def ssh_address(self) -> str:
        """Host name or address, IPv6 without brackets (``2001:db8::1``)."""
        return urlsplit(self.docker_host).hostname or ""

    @property
    def ssh_port(self) -> int:
        return urlsplit(self.docker_host).port or 22

    @property
    def replica_address(self) -> str:
        """Where the front reaches this host's vLLM when it runs on another host."""
        return self.private_address or self.ssh_address

    @property
    def host_key_line(self) -> str | None:
        """``hostKey`` as ``type base64`` (what pulumi-command's ``hostKey`` parses)."""
        return _public_key_line(self.host_key) if self.host_key else None

    @property
    def known_hosts_line(self) -> str:
        """``hostKey`` as a known_hosts line for ``dockerHost``'s address and port."""
        address = self.ssh_address if self.ssh_port == 22 else f"[{self.ssh_address}]:{self.ssh_port}"
        return f"{address} {self.host_key_line}"

    @property
    def ssh_options(self) -> list[str]:
        """ssh's options for this host, the Docker provider's and every ssh the program runs itself
        (the gate's tunnel and container watch, ``make`` commands): strict host-key checking against
        ``hostKey`` only, the commands' user and key, and no prompt that would hang ``pulumi up``."""
        opts = [
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "UserKnownHostsFile=/dev/null",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"KnownHostsCommand=/bin/echo {self.known_hosts_line}",
            "-o", f"User={self.ssh_user}",
            "-o", "ConnectTimeout=30",
        ]  # fmt: skip
        if self.identity_file:
            opts += ["-o", "IdentitiesOnly=yes", "-i", self.identity_file]
        return opts


_SSH_KEY_TYPES = (
    "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
)  # fmt: skip


def _public_key_line(text: str) -> str | None:
    """``type base64`` from a public key or ``ssh-keyscan`` line, or None when there is no valid key."""
    words = text.split()
    for kind, blob in itertools.pairwise(words):
        if kind in _SSH_KEY_TYPES:
            try:
                raw = base64.b64decode(blob, validate=True)
            except ValueError:
                return None
            length = int.from_bytes(raw[:4], "big")
            return f"{kind} {blob}" if raw[4 : 4 + length] == kind.encode() else None
    return None


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


OLD_IMAGE_PLACEHOLDER = re.compile(r"(?<!\{)\{image\}(?!\})")
"""``imageLoadCommand``'s placeholder as it was first spelled (Python's ``str.format``)."""


class KubernetesTargetConfig(Model):
    """The Kubernetes form of ``glm:target`` (components/kubernetes/deployment.py; docs/scaling.md)."""

    namespace: str = Field(description="Namespace the stack's objects live in (created by the stack).")
    front_url: str = Field(
        description="The front's OpenAI base URL as the machine running Pulumi reaches its Service "
        "(a load balancer, an ingress, or a NodePort: `http://node:30080/v1`): the smoke gate goes there."
    )
    kubeconfig: str | None = Field(
        None, description="Kubeconfig file; default: `$KUBECONFIG`, else `~/.kube/config`."
    )
    context: str | None = Field(None, description="Kubeconfig context; default: the file's current one.")
    replicas: Positive = Field(1, description="Serving pods; each takes the listed cards on its node.")
    front_replicas: Positive = Field(
        2,
        description="Front pods: nginx with the usage meter, spread over the nodes, a disruption budget "
        "keeping all but one; every pod shares one account per key (docs/scaling.md). 1: a single door.",
    )
    front_node_port: int | None = Field(
        None, ge=30000, le=32767, description="The front Service's NodePort; unset: a ClusterIP Service."
    )
    weights_claim: str | None = Field(
        None,
        description="PersistentVolumeClaim holding `model.directory`, mounted read-only at "
        "`model.mountPath`; unset: the node's `model.hostDir` (hostPath, read-only).",
    )
    cache_claim: str = Field(
        "glm53-jit-cache", description="PersistentVolumeClaim of the JIT/compile cache (kept on destroy)."
    )
    cache_size: str = Field("50Gi", description="Size the cache claim requests.")
    cache_host_path: str | None = Field(
        None,
        description="One-node clusters without a provisioner: a hostPath PersistentVolume (Retain) bound "
        "to the cache claim, writable by the pods' UID 10001 (`install -d -o 10001 -g 10001 DIR`); unset: "
        "the cluster's default StorageClass provides it.",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="The pods' imagePullPolicy (`Never` for images loaded into the nodes)."
    )
    image_load_command: str | None = Field(
        None,
        description="Run on the machine running Pulumi for each image the stack builds, `{{image}}` "
        "replaced (`scripts/k8s/cluster.sh import {{image}}`, `docker push {{image}}`); unset: none. "
        "`{image}`, the old spelling, still works, with an advisory.",
    )
    pre_stop_seconds: int = Field(
        10,
        ge=3,
        description="preStop pause before SIGTERM: the Service stops routing to the pod first, and "
        "the front's connections to it (2 s at most each) end; at least 3.",
    )
    prometheus_node_port: int | None = Field(
        None, ge=30000, le=32767, description="Prometheus' Service NodePort; unset: a ClusterIP Service."
    )
    prometheus_operator: bool = Field(
        False,
        description="The cluster runs the Prometheus Operator: the same alert rules as a PrometheusRule "
        "and the pods' scrape as a PodMonitor, instead of the stack's own Prometheus.",
    )
    readiness_period_seconds: Positive = Field(
        15,
        description="How often each pod's gate sidecar runs the gate's checks (13x17, a tool call, "
        "the KV pool) against it, and the kubelet reads their verdict; each run is one short chat per "
        "step, and the front pods' meter keeps one of each pod's maxNumSeqs for it.",
    )

    @model_validator(mode="after")
    def _names(self) -> KubernetesTargetConfig:
        problems = [
            f"glm:target.kubernetes.{key}={value!r} is not a DNS label (lower-case letters, digits, "
            "`-`, at most 63). Fix: e.g. glm53-prod."
            for key, value in (("namespace", self.namespace), ("cacheClaim", self.cache_claim))
            if not _DNS_LABEL.fullmatch(value)
        ]
        if not self.front_url.startswith(("http://", "https://")) or not self.front_url.endswith("/v1"):
            problems.append(
                f"glm:target.kubernetes.frontUrl={self.front_url!r} is not an http(s) URL ending in /v1. "
                "Fix: e.g. http://10.0.0.5:30080/v1."
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def image_load_template(self) -> str | None:
        """``imageLoadCommand`` in the placeholder style of every template (components/template.py):
        ``{image}``, the old spelling, read as ``{{image}}``."""
        if self.image_load_command is None:
            return None
        return OLD_IMAGE_PLACEHOLDER.sub("{{image}}", self.image_load_command)


class TargetConfig(Model):
    hosts: list[HostConfig] = Field(
        description="Hosts that each run one vLLM replica; with several, one Nginx front on "
        "`frontHost` balances across them (docs/scaling.md)."
    )
    front_host: str | None = Field(
        None, description="Name of the host that runs the front and Prometheus; default: the first host."
    )
    kubernetes: KubernetesTargetConfig | None = Field(
        None,
        description="Run on Kubernetes instead of Docker hosts: the same profile as a Deployment "
        "behind the front's Service (`hosts` then only builds the images).",
    )

    @model_validator(mode="after")
    def _hosts(self) -> TargetConfig:
        """Every problem of the host list at once: names, addresses, the front host."""
        problems = []
        if not self.hosts:
            problems.append("glm:target.hosts is empty. Fix: list at least one host (name, dockerHost).")
        names = [h.name for h in self.hosts]
        for name in sorted({n for n in names if names.count(n) > 1}):
            problems.append(
                f"glm:target.hosts lists the name {name!r} {names.count(name)} times: resources are named "
                "after it. Fix: give each host its own name."
            )
        seen: dict[str, str] = {}
        for host in self.hosts:
            for where in sorted({host.docker_host.rstrip("/").lower(), host.replica_address.lower()}):
                if where in seen and seen[where] != host.name:
                    problems.append(
                        f"glm:target.hosts[{host.name}] and glm:target.hosts[{seen[where]}] are both at "
                        f"{where}: two replicas on one box would clash on its port and GPUs. Fix: "
                        "list each box once (dockerHost, privateAddress)."
                    )
                seen.setdefault(where, host.name)
        if self.front_host is not None and self.front_host not in names:
            problems.append(
                f"glm:target.frontHost={self.front_host!r} is not in glm:target.hosts "
                f"({', '.join(names)}). Fix: set it to one of those names, or remove it (the first host)."
            )
        if len(self.hosts) > 1 and self.kubernetes is not None:
            problems.append(
                f"glm:target.hosts lists {len(self.hosts)} hosts with glm:target.kubernetes: on "
                "Kubernetes the replicas are `kubernetes.replicas` and `hosts` only names the Docker "
                "engine that builds the images. Fix: keep one host (the builder)."
            )
        elif len(self.hosts) > 1:
            problems += [p for h in self.replica_hosts if (p := _replica_address_problem(h))]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def host(self) -> HostConfig:
        """The front's host (with one host: the host)."""
        return next((h for h in self.hosts if h.name == self.front_host), self.hosts[0])

    @property
    def replica_hosts(self) -> list[HostConfig]:
        """The other hosts, in list order: their vLLM is published on ``replica_address``."""
        return [h for h in self.hosts if h is not self.host]


def _replica_address_problem(host: HostConfig) -> str | None:
    address = host.replica_address
    key = f"glm:target.hosts[{host.name}]"
    if host.is_local and host.private_address is None:
        return (
            f"{key}.dockerHost={host.docker_host} is this machine's engine: the front on another host "
            f"cannot reach it. Fix: an ssh:// dockerHost, or set {key}.privateAddress."
        )
    if binds_all_interfaces(address) or is_loopback(address):
        return (
            f"{key}.privateAddress={address!r}: vLLM would be published on every interface or on "
            "loopback, where the world, or not even the front, reaches it. Fix: the host's address "
            "on the private network the front host shares (e.g. 10.0.0.12)."
        )
    return None
