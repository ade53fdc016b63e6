"""Rules 4, 5 and 6: the memory and the data a serving container relies on. /dev/shm large
enough for tensor parallel, the weights mounted read-only, Docker volumes kept on delete."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .resource import CONTAINER, UNKNOWN, VOLUME, Resource, Undecidable, command_args, flag_value, is_serving

DOCKER_DEFAULT_SHM_MB = 64
DEFAULT_RETAINED_VOLUME_SUFFIXES = ("-jit-cache",)
"""Volumes the program creates with ``retain_on_delete=True``, which no analyzer can see (the
engine's AnalyzerResourceOptions has no such field); tests/test_policy.py checks this list
against the program."""


# --- 4. shm-for-tensor-parallel -----------------------------------------------------------------


def tensor_parallel_size(argv: Sequence[str]) -> int:
    value = flag_value(argv, "--tensor-parallel-size", "-tp")
    try:
        return int(value) if value is not None else 1
    except ValueError:
        return 1


def shm_for_tensor_parallel(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """Tensor parallel > 1 needs more than Docker's 64 MB /dev/shm, or the host's IPC namespace."""
    if resource.type != CONTAINER:
        return []
    tp = tensor_parallel_size(command_args(resource))
    if tp <= 1 or resource.known("ipcMode", "") == "host":
        return []
    shm = resource.known("shmSize", None)
    if shm is not None and float(shm) > DOCKER_DEFAULT_SHM_MB:
        return []
    shown = f"{float(shm):g} MB" if shm is not None else f"unset (Docker's {DOCKER_DEFAULT_SHM_MB} MB)"
    return [
        f"{resource.name} runs --tensor-parallel-size={tp} with shmSize {shown} and ipcMode "
        f"{resource.get('ipcMode', 'unset')}: the workers exchange tensors through /dev/shm and "
        "crash on Docker's 64 MB. Fix: glm:container.shmSize (e.g. 64g) or glm:container.ipcMode host."
    ]


# --- 5. weights-read-only -----------------------------------------------------------------------


def _binds(resource: Resource) -> list[dict[str, Any]]:
    """Bind mounts from ``mounts`` and host-path ``volumes``, as ``{source, target, readOnly}``."""
    binds = []
    for mount in resource.known("mounts", []):
        if mount is UNKNOWN:
            raise Undecidable(f"{resource.name}: a `mounts` entry is not known until the update runs")
        if mount.get("type") == "bind":
            binds.append(mount)
    for volume in resource.known("volumes", []):
        if isinstance(volume, Mapping) and volume.get("hostPath"):
            binds.append(
                {
                    "source": volume["hostPath"],
                    "target": volume.get("containerPath"),
                    "readOnly": volume.get("readOnly"),
                }
            )
    return binds


def _contains(target: Any, path: str) -> bool:
    if not isinstance(target, str) or not target.startswith("/"):
        return False
    target = target.rstrip("/") or "/"
    return path == target or path.startswith(target if target == "/" else target + "/")


def weights_mounts(resource: Resource) -> list[dict[str, Any]]:
    """The bind mounts that hold the weights vLLM serves.

    The first bind mount (``ModelVolume`` puts the weights first), and every bind mount whose target
    contains the model path vLLM is given (``command[0]``, e.g. ``/models/GLM-5.3-Flash``).
    """
    binds = _binds(resource)
    argv = command_args(resource)
    model = argv[0] if argv and argv[0].startswith("/") else None
    return [b for i, b in enumerate(binds) if i == 0 or (model and _contains(b.get("target"), model))]


def weights_read_only(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """The vLLM container mounts the weights read-only: a serving process must not be able to alter them."""
    if not is_serving(resource):
        return []
    violations = []
    for bind in weights_mounts(resource):
        if bind.get("readOnly") is UNKNOWN:
            raise Undecidable(f"{resource.name}: readOnly of {bind.get('target')} is not known yet")
        if bind.get("readOnly") is not True:
            violations.append(
                f"{resource.name} mounts the weights {bind.get('source')} -> {bind.get('target')} "
                "writable: a bug or a compromised vLLM could corrupt the only copy of the weights. "
                "Fix: readOnly true on that mount (ModelVolume does this; check glm:container.mounts)."
            )
    return violations


# --- 6. volumes-retained ------------------------------------------------------------------------


def volumes_retained(resource: Resource, config: Mapping[str, Any]) -> list[str]:
    """A Docker volume survives ``pulumi destroy`` and replacement: protect or retain_on_delete.

    ``retain_on_delete`` never reaches an analyzer, so a volume whose logical name ends with one of
    ``retainedVolumeSuffixes`` (policy config) counts as retained: the program's word, which
    tests/test_policy.py checks.
    """
    if resource.type != VOLUME:
        return []
    if resource.protect or resource.retain_on_delete:
        return []
    suffixes = config.get("retainedVolumeSuffixes", DEFAULT_RETAINED_VOLUME_SUFFIXES)
    if resource.retain_on_delete is None and any(resource.name.endswith(s) for s in suffixes):
        return []
    return [
        f"{resource.name} (Docker volume {resource.get('name', '?')}) is neither protected nor "
        "retained: `pulumi destroy` or a replacement deletes it and its data. Fix: "
        "ResourceOptions(retain_on_delete=True) and add its name suffix to the policy config "
        "retainedVolumeSuffixes (analyzers cannot see retain_on_delete), or protect=True."
    ]
