"""The semantic probe's image, the same on a Docker host and on Kubernetes (where it is the gate
sidecar's too): built from a context assembled under ``.build/`` (:func:`build_context`) of the
project modules the probe imports and the program's own Python packages, so the build needs no
package index. The target's side builds and runs it (components/docker/semantic_probe.py,
components/kubernetes/images.py).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
DOCKERFILE = "images/semantic-probe/Dockerfile"
REPOSITORY = "glm53-semantic-probe"
BUILD_DIR = ".build"
APP_FILES = (
    "components/__init__.py",
    "components/model_base.py",
    "components/gate/__init__.py",
    "components/gate/__main__.py",  # the in-pod readiness check on Kubernetes (components/kubernetes/readiness.py)
    "components/gate/checks.py",
    "components/gate/container.py",
    "components/gate/messages.py",
    "components/gate/metrics.py",
    "components/gate/readiness.py",
    "components/gate/run.py",
    "components/gate/settings.py",
    "components/gate/sse.py",
    "components/gate/startup.py",
    "components/gate/startup_lines.json",  # startup.py reads its samples at import
    "components/gate/steps.py",
    "components/gate/tls.py",
    "components/gate/transport.py",
    "components/semantic_probe/__init__.py",
    "components/semantic_probe/__main__.py",
    "components/semantic_probe/saturation.py",
    "components/semantic_probe/service.py",
    "components/semantic_probe/settings.py",
    "components/semantic_probe/ejection.py",
    "components/template.py",  # gate/container.py writes its ssh wrapper from a template
    "components/host/templates/ssh-wrapper.sh",
    "components/vllm_flags/__init__.py",
    "components/vllm_flags/owned.py",  # gate/startup.py names the key a failing flag came from
)
"""The project modules the probe imports: the gate's checks themselves, not a copy of their logic."""
ROOT_DISTRIBUTIONS = ("httpx", "prometheus_client", "pydantic")
"""What those modules import from outside the standard library; their requirements come along."""


def required_distributions(
    roots: tuple[str, ...] = ROOT_DISTRIBUTIONS,
) -> list[importlib.metadata.Distribution]:
    """``roots`` and everything they require (extras left out), as installed in this virtualenv."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        dist = importlib.metadata.distribution(name)
        found[name] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [found[name] for name in sorted(found)]


def context_files() -> dict[str, bytes]:
    """Every file of the probe's build context, by its path in the context."""
    files = {"Dockerfile": (PROJECT_DIR / DOCKERFILE).read_bytes()}
    for rel in APP_FILES:
        files[f"app/{rel}"] = (PROJECT_DIR / rel).read_bytes()
    for dist in required_distributions():
        for entry in dist.files or []:
            parts = Path(entry).parts
            if parts[0] == ".." or "__pycache__" in parts or entry.suffix == ".pyc":
                continue  # console scripts outside site-packages; byte code is rebuilt
            files[f"site-packages/{Path(entry).as_posix()}"] = Path(str(dist.locate_file(entry))).read_bytes()
    return files


@functools.cache
def build_context() -> tuple[str, str]:
    """(context path relative to the project, image tag): the tag is the content hash, so any
    change of the checks, the probe or a package gives a new image and replaces the container."""
    files = context_files()
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + files[path] + b"\0")
    tag = digest.hexdigest()[:16]
    relative = f"{BUILD_DIR}/semantic-probe-{tag}"
    target = PROJECT_DIR / relative
    if not target.is_dir():
        target.parent.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="semantic-probe-", dir=target.parent))
        for path, content in files.items():
            (staging / path).parent.mkdir(parents=True, exist_ok=True)
            (staging / path).write_bytes(content)
        try:
            os.rename(staging, target)
        except OSError:  # another run made the same context first
            shutil.rmtree(staging, ignore_errors=True)
    return relative, f"{REPOSITORY}:{tag}"
