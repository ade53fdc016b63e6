"""A stand-in GPU host for tests: its own address, sshd, Docker engine, fake accelerators and weights.

    with StandinHost.create() as host:       # or the ``standin_host`` pytest fixture
        host.present("rtx5090")               # its fake nvidia-smi shows 8 RTX 5090s
        host.docker("info")                   # the host's own engine, reached only over SSH
        host.load_image("nginx:1.27")         # docker save | docker -H ssh://… load

What it is made of (all under names and addresses this module owns):

- a network namespace ``glm-standin-N`` joined to the root namespace by a veth pair
  (``10.203.N.1`` here, ``10.203.N.2`` there, a /30 nobody else routes);
- Debian's sshd on ``10.203.N.2:2222`` only, with a generated ed25519 host key, one user (``glm``)
  whose only key is a generated client key. sshd runs in the namespace (``nsenter --net``) and in a
  private mount namespace where ``/etc/passwd`` knows ``glm``, and ``/dev`` is a small tmpfs with
  the usual nodes plus eight fake ``/dev/davinci*`` (Ascend's preflight counts them);
- a dockerd in the namespace (``nsenter --net``; ``ip netns exec`` remounts /sys and dockerd then
  fails on the devices cgroup), listening only on ``/run/glm-standin-N/docker.sock``; sshd's
  ``SetEnv DOCKER_HOST`` points ``docker system dial-stdio`` (what ``docker -H ssh://`` runs) at it;
- fake ``nvidia-smi`` / ``npu-smi`` (8 cards of the profile under test, ``present``; a driver) and
  NVIDIA's runtime hook first on the SSH user's PATH, and a weights folder (config.json, index, one
  sparse shard of the profile's ``weightsGib``) for each hardware profile.

Bounded: every subprocess has a timeout; a watchdog tears the host down when the test process dies
or the lifetime runs out; teardown kills sshd, dockerd and the engine's containers (their cgroup),
unmounts, removes the namespace, the veth pair and the folders, also after a failure. Leftovers of a
crashed run are removed when the next host is created (an instance whose lock is free is stale).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from components.profiles import PROFILES
from tests import weights_folder
from tests.smi_fixtures import NvidiaSmi, apps_header_and_busy_line, idle_row, npu_smi_info

PREFIX = "glm-standin"
USER, UID = "glm", 20053
SSH_PORT = 2222
CARDS = 8
MAX_INSTANCES = 16
DEFAULT_LIFETIME_S = 3600
BASE = Path("/var/tmp")
RUN = Path("/run")
CGROUP = Path("/sys/fs/cgroup")
ENGINE_BRIDGE = "172.31.250.1/24"
WEIGHT_FOLDERS = ("GLM-5.3-Flash", "GLM-5.3-Flash-w8a8", "GLM-5.3-Flash-NVFP4", "GLM-5.3-Flash-sim")

# The fake tools answer the preflight's queries in the formats real hosts print (tests/smi_fixtures.py):
# nvidia-smi's --query-gpu rows and --query-compute-apps csv like the real H200's, for the card of the
# profile under test (``present``), with the real host's driver (new enough for every profile's CUDA);
# npu-smi info as the real 8-NPU table, idle, named 910B3.
DRIVER = idle_row()[4]
GPUS = {
    # nvidia-smi's name and memory.total (MiB) of the card, and its compute capability.
    "a800": ("NVIDIA A800-SXM4-80GB", 81920, "8.0"),
    "rtx5090": ("NVIDIA GeForce RTX 5090", 32607, "12.0"),
}
RESERVED_MIB = 616  # what the real H200's driver keeps (total - free when idle)


def fake_nvidia_smi(hardware: str) -> NvidiaSmi:
    """``CARDS`` idle cards of ``hardware``'s profile, in the real H200 rows' format."""
    name, total, cc = GPUS[hardware]
    header, _ = apps_header_and_busy_line()
    rows = [
        f"{i}, {name}, GPU-standin-{i}, 00000000:00:{6 + i:02X}.0, {DRIVER}, {total}, 0, {total - RESERVED_MIB}, {cc}"
        for i in range(CARDS)
    ]
    return NvidiaSmi("\n".join(rows) + "\n", header + "\n")


NPU_SMI = """#!/bin/sh
# Stand-in for npu-smi: the real 8-NPU table (tests/smi_fixtures.py), idle, 910B3.
[ "$1" = info ] || { echo "usage: npu-smi info" >&2; exit 1; }
cat "$(dirname "$0")/npu-smi.info"
"""

# Runs as root in the namespace's new mount namespace, then becomes sshd.
_SSHD_MOUNTS = """set -eu
root=$1
for f in passwd group shadow; do mount --bind "$root/server/etc/$f" "/etc/$f"; done
stage="$root/server/dev-stage"
mount --rbind /dev "$stage"
mount -t tmpfs -o mode=0755,size=1m standin-dev /dev
for n in null zero full random urandom tty; do : > "/dev/$n"; mount --bind "$stage/$n" "/dev/$n"; done
mkdir /dev/pts /dev/shm
mount --rbind "$stage/pts" /dev/pts
mount --rbind "$stage/shm" /dev/shm
umount -l "$stage"
ln -s pts/ptmx /dev/ptmx; ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin; ln -s /proc/self/fd/1 /dev/stdout; ln -s /proc/self/fd/2 /dev/stderr
i=0; while [ $i -lt {cards} ]; do : > "/dev/davinci$i"; i=$((i+1)); done
: > /dev/davinci_manager; : > /dev/devmm_svm; : > /dev/hisi_hdc
mkdir -p /run/sshd
exec /usr/sbin/sshd -D -e -f "$root/server/sshd_config"
"""


class StandinUnavailable(RuntimeError):
    """This machine cannot make a stand-in host (not root, no ``ip``, no namespaces…)."""


def unavailable_reason() -> str | None:
    """Why a stand-in host cannot be made here, or None."""
    if os.geteuid() != 0:
        return "the stand-in host needs root (network namespaces, mounts, a second dockerd)"
    for tool in (
        "ip",
        "nsenter",
        "unshare",
        "mount",
        "/usr/sbin/sshd",
        "ssh",
        "ssh-keygen",
        "dockerd",
        "docker",
    ):
        if shutil.which(tool) is None:
            return f"the stand-in host needs `{tool}`, which is not installed"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    try:
        _run(["ip", "netns", "add", probe], timeout=10)
    except (subprocess.SubprocessError, OSError) as err:
        return f"network namespaces are not available here ({err})"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


def _run(argv: list[str], timeout: float = 30, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run and fail loudly: the command, its exit status and stderr in the message."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise subprocess.CalledProcessError(result.returncode, argv, result.stdout, result.stderr)
    return result  # type: ignore[no-any-return]


def _wait_for(
    what: str, process: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float, log: Path
) -> None:
    """Wait until ``ready()``; fail at once, with the log's tail, when the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if ready():
            return
        time.sleep(0.1)
    state = "not ready" if process.poll() is None else f"exited with status {process.returncode}"
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise TimeoutError(f"stand-in host: {what} {state} after {timeout:g} s\n{tail}")


@dataclass
class StandinHost:
    """One stand-in GPU host. Everything a deployment to it needs is an attribute."""

    index: int
    root: Path
    lock: IO[str] = field(repr=False)
    host_key: str = ""
    """The host's public key line, ``ssh-ed25519 AAAA…`` (what ``glm:…hostKey`` takes)."""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    # ---- what a deployment reads ----------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{PREFIX}-{self.index}"

    @property
    def address(self) -> str:
        """The host's address, in its namespace; reachable from this machine only."""
        return f"10.203.{self.index}.2"

    @property
    def gateway(self) -> str:
        """This machine's end of the veth pair."""
        return f"10.203.{self.index}.1"

    ssh_port: int = SSH_PORT
    user: str = USER

    @property
    def docker_host(self) -> str:
        """``ssh://glm@10.203.N.2:2222``: the ``dockerHost`` of a stack deployed here."""
        return f"ssh://{self.user}@{self.address}:{self.ssh_port}"

    @property
    def private_key_path(self) -> Path:
        return self.root / "client" / "id_ed25519"

    @property
    def private_key(self) -> str:
        return self.private_key_path.read_text()

    @property
    def known_hosts(self) -> Path:
        return self.root / "client" / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.root / "client" / "ssh_config"

    def present(self, hardware: str) -> None:
        """Make the fake ``nvidia-smi`` show the cards of ``hardware``'s profile (a800 at creation;
        the fake ``npu-smi`` always shows 910B3s, the ascend profile's)."""
        if hardware in GPUS:
            fake_nvidia_smi(hardware).install(self.root / "bin")

    @property
    def models_dir(self) -> Path:
        """Weights folders, one per hardware profile (``glm:model.hostDir`` on this host)."""
        return self.root / "models"

    @property
    def run_dir(self) -> Path:
        return RUN / self.name

    @property
    def docker_socket(self) -> Path:
        return self.run_dir / "docker.sock"

    def env(self) -> dict[str, str]:
        """Environment for the docker CLI / ssh on this machine: ``ssh`` reads the harness's config."""
        return {**os.environ, "PATH": f"{self.root / 'client' / 'bin'}:{os.environ['PATH']}"}

    # ---- using it ---------------------------------------------------------------------------

    def ssh(
        self, *command: str, timeout: float = 60, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` (one shell string, as pulumi-command sends it) on the host; not checked."""
        argv = ["ssh", "-F", str(self.ssh_config), self.address, *command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``docker -H ssh://glm@ADDR:2222 ARGS`` from this machine; not checked."""
        argv = ["docker", "-H", self.docker_host, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=self.env())

    def load_image(self, reference: str, timeout: float = 900) -> None:
        """Copy a local image onto the host: ``docker save REF | docker -H ssh://… load``."""
        with subprocess.Popen(["docker", "save", reference], stdout=subprocess.PIPE) as save:
            load = subprocess.run(
                ["docker", "-H", self.docker_host, "load"],
                stdin=save.stdout,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=self.env(),
            )
            save.wait(timeout=30)
        if save.returncode != 0 or load.returncode != 0:
            raise RuntimeError(f"loading {reference} onto {self.docker_host} failed: {load.stderr.strip()}")

    # ---- faults and restarts (for the fault tests) -------------------------------------------

    def stop_sshd(self, sessions: bool = False) -> None:
        """Stop the listener; with ``sessions`` also cut every open SSH session (the host is gone,
        not just refusing new logins: Docker's and pulumi-command's connections break too)."""
        _stop(self.processes.pop("sshd", None), grace=5)
        if sessions:
            for pid in _processes_of(self.index):
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                        os.kill(pid, signal.SIGKILL)

    def start_sshd(self, new_host_key: bool = False) -> None:
        """Start sshd; with ``new_host_key`` it comes back with another key (known_hosts is left alone)."""
        if new_host_key:
            key = self.root / "server" / "ssh_host_ed25519_key"
            key.unlink()
            key.with_suffix(".pub").unlink()
            self.host_key = _keygen(key, "standin-host")
        log = open(self.root / "log" / "sshd.log", "ab")  # noqa: SIM115 (sshd keeps it open)
        self.processes["sshd"] = subprocess.Popen(
            ["nsenter", f"--net=/var/run/netns/{self.name}", "unshare", "--mount", "--propagation", "private",
             "sh", "-c", _SSHD_MOUNTS.format(cards=CARDS), "standin-sshd", str(self.root)],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        log.close()
        _wait_for("sshd", self.processes["sshd"], self._sshd_answers, 15, self.root / "log" / "sshd.log")

    def stop_engine(self) -> None:
        _stop(self.processes.pop("dockerd", None), grace=20)

    def start_engine(self) -> None:
        self.run_dir.mkdir(mode=0o755, exist_ok=True)
        log = open(self.root / "log" / "dockerd.log", "ab")  # noqa: SIM115 (dockerd keeps it open)
        self.processes["dockerd"] = subprocess.Popen(
            ["nsenter", f"--net=/var/run/netns/{self.name}", "dockerd",
             "--config-file", str(self.root / "server" / "daemon.json"),
             "-H", f"unix://{self.docker_socket}", "--group", str(UID),
             "--data-root", str(self.root / "docker"), "--exec-root", str(self.run_dir / "exec"),
             "--pidfile", str(self.run_dir / "dockerd.pid"), "--cgroup-parent", f"/{self.name}",
             "--iptables=false", "--ip-masq=false", "--bip", ENGINE_BRIDGE, "--shutdown-timeout", "5"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        log.close()
        _wait_for(
            "dockerd", self.processes["dockerd"], self._engine_answers, 60, self.root / "log" / "dockerd.log"
        )

    def _sshd_answers(self) -> bool:
        """sshd sends its banner (a login is not tried: after a key change it must fail)."""
        try:
            with socket.create_connection((self.address, self.ssh_port), timeout=2) as conn:
                return conn.recv(8).startswith(b"SSH-2.0")
        except OSError:
            return False

    def _engine_answers(self) -> bool:
        probe = subprocess.run(
            ["docker", "-H", f"unix://{self.docker_socket}", "version"], capture_output=True, timeout=10
        )
        return probe.returncode == 0

    # ---- life cycle --------------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def create(cls, lifetime_s: float = DEFAULT_LIFETIME_S) -> Iterator[StandinHost]:
        """Make a host (cleaning stale ones first), yield it, and always tear it down."""
        reason = unavailable_reason()
        if reason is not None:
            raise StandinUnavailable(reason)
        host = cls._claim()
        try:
            host._build(lifetime_s)
            yield host
        finally:
            host.teardown()

    @classmethod
    def _claim(cls) -> StandinHost:
        """The first free instance number; instances whose lock is free are stale and removed."""
        for index in range(MAX_INSTANCES):
            path = RUN / f"{PREFIX}-{index}.lock"
            lock = open(path, "a")  # noqa: SIM115 (held for the host's life)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(lock.fileno()).st_ino != path.stat().st_ino:
                    raise BlockingIOError  # its owner removed it meanwhile: not ours
            except (BlockingIOError, FileNotFoundError):
                lock.close()
                continue
            _remove(index)
            return cls(index=index, root=BASE / f"{PREFIX}-{index}", lock=lock)
        raise StandinUnavailable(f"all {MAX_INSTANCES} stand-in host slots are in use")

    def _build(self, lifetime_s: float) -> None:
        self._watchdog(lifetime_s)
        self._network()
        self._files()
        self.start_engine()
        self.start_sshd()

    def _watchdog(self, lifetime_s: float) -> None:
        """A process that removes this host when the test process dies or the lifetime is over."""
        self.processes["watchdog"] = subprocess.Popen(
            # As a module from the repository root: this file imports the project's own modules.
            [sys.executable, "-m", "tests.standin_host", "--watch", str(self.index), str(os.getpid()), str(lifetime_s)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, pass_fds=(self.lock.fileno(),), cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip

    def _network(self) -> None:
        veth, peer = f"glmsh{self.index}h", f"glmsh{self.index}n"
        steps = [
            ["ip", "netns", "add", self.name],
            ["ip", "link", "add", veth, "type", "veth", "peer", "name", peer],
            ["ip", "link", "set", peer, "netns", self.name],
            ["ip", "addr", "add", f"{self.gateway}/30", "dev", veth],
            ["ip", "link", "set", veth, "up"],
            ["ip", "-n", self.name, "addr", "add", f"{self.address}/30", "dev", peer],
            ["ip", "-n", self.name, "link", "set", peer, "up"],
            ["ip", "-n", self.name, "link", "set", "lo", "up"],
        ]
        for step in steps:
            _run(step, timeout=10)

    def _files(self) -> None:
        root = self.root
        for sub, mode in (("server", 0o700), ("client", 0o700), ("client/bin", 0o755), ("bin", 0o755),
                          ("log", 0o700), ("docker", 0o710), ("server/etc", 0o755),
                          ("server/dev-stage", 0o755), ("home", 0o755)):  # fmt: skip
            (root / sub).mkdir(mode=mode, parents=True, exist_ok=True)
        root.chmod(0o755)
        self.host_key = _keygen(root / "server" / "ssh_host_ed25519_key", "standin-host")
        client_key = _keygen(self.private_key_path, "standin-client")

        home = root / "home" / USER
        (home / ".ssh").mkdir(mode=0o700, parents=True)
        (home / ".ssh" / "authorized_keys").write_text(client_key + "\n")
        self.models_dir.mkdir(mode=0o755)
        for folder in WEIGHT_FOLDERS:
            write_weights(self.models_dir / folder)
        for path in (home, home / ".ssh", home / ".ssh" / "authorized_keys", self.models_dir):
            os.chown(path, UID, UID)
        (home / ".ssh" / "authorized_keys").chmod(0o600)

        etc = root / "server" / "etc"
        passwd = Path("/etc/passwd").read_text().rstrip("\n")
        group = Path("/etc/group").read_text().rstrip("\n")
        shadow = Path("/etc/shadow").read_text().rstrip("\n")
        (etc / "passwd").write_text(f"{passwd}\n{USER}:x:{UID}:{UID}:stand-in deploy user:{home}:/bin/bash\n")
        (etc / "group").write_text(f"{group}\n{USER}:x:{UID}:\n")
        (etc / "shadow").write_text(f"{shadow}\n{USER}:*:19000:0:99999:7:::\n")
        (etc / "shadow").chmod(0o640)
        # Its own engine ID: dockerd 20.10 otherwise derives it from the host's /etc/docker/key.json.
        engine = {"deprecated-key-path": str(root / "server" / "engine-key.json")}
        (root / "server" / "daemon.json").write_text(json.dumps(engine) + "\n")

        self.present("a800")
        (root / "bin" / "npu-smi").write_text(NPU_SMI)
        (root / "bin" / "npu-smi.info").write_text(npu_smi_info(chip="910B3", idle=True))
        # Docker's --gpus needs NVIDIA's hook; the preflight looks for it (a rehearsal asks for no GPU).
        (root / "bin" / "nvidia-container-runtime-hook").write_text("#!/bin/sh\nexit 0\n")
        (root / "server" / "sshd_config").write_text(
            "\n".join([
                f"ListenAddress {self.address}:{self.ssh_port}",
                f"HostKey {root / 'server' / 'ssh_host_ed25519_key'}",
                f"PidFile {self.run_dir / 'sshd.pid'}",
                "AuthorizedKeysFile .ssh/authorized_keys",
                f"AllowUsers {USER}",
                "PermitRootLogin no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                "UsePAM no", "X11Forwarding no", "AllowTcpForwarding yes", "PrintMotd no",
                "MaxStartups 50:30:100", "MaxSessions 50", "LoginGraceTime 20", "LogLevel VERBOSE",
                # What the deploy user's sessions see: the namespace's engine, the fake tools first.
                f"SetEnv DOCKER_HOST=unix://{self.docker_socket} "
                f"PATH={root / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            ]) + "\n"
        )  # fmt: skip
        for tool in ("npu-smi", "nvidia-container-runtime-hook"):
            (root / "bin" / tool).chmod(0o755)

        client = root / "client"
        (client / "known_hosts").write_text(f"[{self.address}]:{self.ssh_port} {self.host_key}\n")
        self.ssh_config.write_text(
            "\n".join([
                f"Host {self.address}",
                f"  User {USER}", f"  Port {self.ssh_port}",
                f"  IdentityFile {self.private_key_path}", "  IdentitiesOnly yes",
                f"  UserKnownHostsFile {client / 'known_hosts'}", "  GlobalKnownHostsFile /dev/null",
                "  StrictHostKeyChecking yes", "  BatchMode yes", "  ConnectTimeout 10",
                "  ServerAliveInterval 5", "  ServerAliveCountMax 3", "  LogLevel ERROR",
            ]) + "\n"
        )  # fmt: skip
        wrapper = client / "bin" / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {shlex.quote(str(self.ssh_config))} "$@"\n')
        wrapper.chmod(0o755)

    def teardown(self) -> None:
        """Stop everything and remove every trace; safe to call twice and after a partial build."""
        _stop(self.processes.pop("watchdog", None), grace=2)
        self.stop_sshd()
        self.stop_engine()
        _remove(self.index)
        if not self.lock.closed:
            with contextlib.suppress(FileNotFoundError):
                Path(RUN / f"{self.name}.lock").unlink()
            self.lock.close()


def link_private_network(hosts: list[StandinHost]) -> None:
    """Let these hosts reach each other's address, as GPU boxes on one private network do.

    In each namespace: a route to every other host's address through this machine (which forwards
    between its veths), IP forwarding, and the host's containers' traffic masqueraded to the host's
    address (the stand-in dockerd runs with ``--ip-masq=false``). All of it lives in the
    namespaces, so teardown removes it; other stand-in hosts stay unreachable (no route back).
    """
    for host in hosts:
        netns = ["nsenter", f"--net=/var/run/netns/{host.name}"]
        for peer in hosts:
            if peer is not host:
                _run(["ip", "-n", host.name, "route", "replace", f"{peer.address}/32", "via", host.gateway])
        _run([*netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        _run(
            [
                *netns,
                "iptables",
                "-w",  # the xtables lock is one for every namespace: hosts made side by side wait
                "-t",
                "nat",
                "-A",
                "POSTROUTING",
                "-o",
                f"glmsh{host.index}n",
                "-j",
                "MASQUERADE",
            ]
        )


# ---- pieces -----------------------------------------------------------------------------------


def write_weights(folder: Path) -> None:
    """A weights folder the project's weights check accepts: the size of the profile that reads it."""
    sizes = {p.defaults["model"]["directory"]: p.defaults["model"]["weightsGib"] for p in PROFILES.values()}
    weights_folder.write_weights(folder, sizes[folder.name], shards=1)


def _keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path``; returns the public key line without the comment."""
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], timeout=15)
    kind, blob, *_ = path.with_suffix(".pub").read_text().split()
    return f"{kind} {blob}"


def _stop(process: subprocess.Popen[bytes] | None, grace: float) -> None:
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _netns_inode(name: str) -> int | None:
    try:
        return os.stat(f"/var/run/netns/{name}").st_ino
    except FileNotFoundError:
        return None


def _processes_of(index: int) -> list[int]:
    """Processes in the instance's network namespace or in its containers' cgroup."""
    name = f"{PREFIX}-{index}"
    pids: set[int] = set()
    inode = _netns_inode(name)
    if inode is not None:
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(proc / "ns" / "net").st_ino == inode:
                        pids.add(int(proc.name))
    for procs in (CGROUP / "pids" / name).glob("**/cgroup.procs"):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in procs.read_text().split())
    pids.discard(os.getpid())
    return sorted(pids)


def _remove(index: int) -> None:
    """Remove every trace of instance ``index``: processes, mounts, cgroups, netns, veth, folders."""
    name = f"{PREFIX}-{index}"
    root, run_dir = BASE / name, RUN / name
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        pids = _processes_of(index)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]
            time.sleep(0.1)
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in sorted(mounts, key=len, reverse=True):
        if mount.startswith((f"{root}/", f"{run_dir}/")) or mount in (str(root), str(run_dir)):
            subprocess.run(["umount", "-l", mount], capture_output=True, timeout=10)
    for controller in CGROUP.iterdir() if CGROUP.exists() else ():
        group = controller / name
        if group.is_dir():
            for sub in sorted(group.glob("**/"), key=lambda p: len(str(p)), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
    if _netns_inode(name) is not None:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    subprocess.run(["ip", "link", "del", f"glmsh{index}h"], capture_output=True, timeout=10)
    for folder in (root, run_dir):
        shutil.rmtree(folder, ignore_errors=True)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def leftovers(index: int) -> list[str]:
    """What of instance ``index`` still exists on this machine (empty after a clean teardown)."""
    name = f"{PREFIX}-{index}"
    found = []
    if _netns_inode(name) is not None:
        found.append(f"netns {name}")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10).stdout
    if f"glmsh{index}h" in links:
        found.append(f"veth glmsh{index}h")
    found += [f"folder {p}" for p in (BASE / name, RUN / name) if p.exists()]
    found += [f"process {pid}" for pid in _processes_of(index)]
    found += [
        f"cgroup {c / name}" for c in (CGROUP.iterdir() if CGROUP.exists() else ()) if (c / name).exists()
    ]
    mountinfo = Path("/proc/self/mountinfo").read_text()
    found += [f"mount {m}" for m in mountinfo.split() if m.startswith((f"{BASE / name}", f"{RUN / name}"))]
    return found


def _watch(index: int, parent: int, lifetime_s: float) -> None:
    """The watchdog: wait for the test process to end or the lifetime to run out, then remove."""
    deadline = time.monotonic() + lifetime_s
    while time.monotonic() < deadline and Path(f"/proc/{parent}").exists():
        time.sleep(1)
    _remove(index)
    (RUN / f"{PREFIX}-{index}.lock").unlink(missing_ok=True)  # the lock is still ours (inherited)


@pytest.fixture(scope="module")
def standin_host() -> Iterator[StandinHost]:
    """A stand-in GPU host for the tests of one module; skipped where one cannot be made."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with StandinHost.create() as host:
        yield host


if __name__ == "__main__" and sys.argv[1:2] == ["--watch"]:
    _watch(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
