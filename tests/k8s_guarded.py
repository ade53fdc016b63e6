"""A Kubernetes front and a serving pod's guard, rendered and running on the real ``nginx``."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator

from tests.conftest import Deployment, is_secret, unwrap
from tests.engine import free_port
from tests.front_rig import nginx_argv, recording_upstream, running, wait_for_port
from tests.guard_rig import nginx
from tests.k8s_rendered import container, flag

SECRET = "kubernetes:core/v1:Secret"


def named_secret(deployment: Deployment, name: str) -> dict[str, str]:
    [found] = [r for r in deployment.of_type(SECRET) if unwrap(r.inputs)["metadata"]["name"] == name]
    assert is_secret(found.inputs["stringData"]), f"{name}: keys must be stored encrypted"
    return dict(unwrap(found.inputs["stringData"]))


@contextlib.contextmanager
def front_and_guard(
    deployment: Deployment,
    guard_pair: tuple[str, str] | None = None,
    verdict_file: tuple[str, str] | None = None,
) -> Iterator[int]:
    """The front's release and the guard's, as the mocks recorded them, in two real nginx before a
    recording upstream, on free loopback ports; yields the front's port. ``guard_pair`` replaces
    the mocks' placeholder replica certificate (ReplicaCertificate's openssl does not run under
    mocks) in both the guard and the front's pin; ``verdict_file`` (rendered path, local path)
    moves the pod's readiness verdict where the test writes it."""
    from components.kubernetes.front import FRONT_DIR, upstream_conf

    port = flag(container(deployment, "vllm")["args"], "--port")
    guard_release = named_secret(deployment, "glm53-vllm-guard")
    front_config = unwrap(deployment.one("kubernetes:core/v1:ConfigMap", "-front-config").inputs)["data"]
    front_release = {**named_secret(deployment, "glm53-front-keys"), "nginx.conf": front_config["nginx.conf"]}
    if guard_pair is not None:
        guard_release["tls.crt"], guard_release["tls.key"] = guard_pair
        front_release["replica-guard-ca.crt"] = guard_pair[0]
    with recording_upstream() as upstream:
        local_guard = {
            name: text.replace("listen 8080", "listen 127.0.0.1:{port}")
            .replace(f"server 127.0.0.1:{port};", f"server 127.0.0.1:{upstream};")
            .replace("/tmp", "{dir}")
            .replace(*(verdict_file or ("", "")))  # last: the test's path is under /tmp
            for name, text in guard_release.items()
        }
        with nginx(local_guard) as (guard, _):
            from components.render.nginx_meter import METER_STATE_DIR
            from tests.metered_front import nginx_prefix

            directory, front = nginx_prefix(), free_port()  # the meter's Lua module, as in the image
            (directory / "rotation").mkdir()
            (directory / "rotation" / "upstream.conf").write_text(upstream_conf("127.0.0.1", guard))
            (directory / "rotation" / "reason.map").write_text(front_config["reason.map"])
            for name, text in front_release.items():
                (directory / name).write_text(
                    text.replace("/tmp", str(directory))  # first: the directory is under /tmp
                    .replace(METER_STATE_DIR, f"{directory}/usage")
                    .replace(f"{FRONT_DIR}/rotation", f"{directory}/rotation")
                    .replace("listen 8080", f"listen 127.0.0.1:{front}")
                    .replace("listen 9146;", f"listen 127.0.0.1:{free_port()};")
                )
            argv = nginx_argv(directory)
            try:
                with running(argv, directory / "nginx.log") as proc:
                    wait_for_port(front, proc)
                    yield front
            finally:
                shutil.rmtree(directory, ignore_errors=True)
