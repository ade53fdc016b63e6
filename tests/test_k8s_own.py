"""The Kubernetes target stands on its own (issue 49): components/kubernetes/ imports nothing of
components/docker/, and a Kubernetes stack loads the Docker provider's SDK only where it builds its
images on ``glm:target.hosts[0]``'s engine (components/kubernetes/images.py, and
components/serving/image.py for a built serving image).

What both targets use lives where both import it: the guard's files and the no-replica body in
components/render/ (replica_guard.py, openai_errors.py), the preflight's script in
components/render/preflight.py, the guard keys and certificate in
components/serving/replica_credentials.py.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KUBERNETES = ROOT / "components" / "kubernetes"

IMAGE_BUILDERS = {"components.kubernetes.images", "components.serving.image"}
"""The modules of a Kubernetes stack that may import ``pulumi_docker``: the images are built by the
first host's Docker engine, as on Docker hosts (docs/scaling.md)."""

_RUN_A_STACK = """
import json, sys
from tests.k8s_urns import KINDS
KINDS[sys.argv[1]]()
print(json.dumps(sorted(
    (name, getattr(module, "__file__", None))
    for name, module in sys.modules.items()
    if name.startswith("components") or name.startswith("pulumi_docker")
)))
"""


def _imported(path: Path, package: str | None = None) -> set[str]:
    """Every module ``path`` names in an import statement (relative imports resolved from
    ``package``, by default the one ``path`` is in)."""
    if package is None:
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def _loaded_by_a_kubernetes_stack(kind: str) -> dict[str, str | None]:
    """The project's modules (and pulumi_docker's) loaded once a whole Kubernetes stack of ``kind``
    (tests/k8s_urns.py) has run under the mocks, in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", _RUN_A_STACK, kind], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_no_module_of_the_kubernetes_target_imports_the_docker_target() -> None:
    crossings = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted(KUBERNETES.rglob("*.py"))
        for name in _imported(path)
        if name == "components.docker" or name.startswith("components.docker.")
    }
    assert crossings == set()


def test_the_import_check_sees_an_import_of_the_docker_target(tmp_path: Path) -> None:
    """The walk above can fail: each way of writing the import is found."""
    module = tmp_path / "front.py"
    module.write_text(
        "from components.docker.rotation import run\nimport components.docker.target\n"
        "from ..docker import preflight\nfrom components import docker\n"
    )
    found = {n for n in _imported(module, "components.kubernetes") if n.startswith("components.docker")}
    assert found == {
        "components.docker.rotation",
        "components.docker.rotation.run",
        "components.docker.target",
        "components.docker",
        "components.docker.preflight",
    }


def test_a_kubernetes_stack_loads_nothing_of_the_docker_target() -> None:
    """The a800 kind builds its serving image; every kind builds the gate's."""
    for kind in ("a800", "local-tls-operator"):
        loaded = _loaded_by_a_kubernetes_stack(kind)
        assert "components.kubernetes.deployment" in loaded, kind
        assert [name for name in loaded if name.startswith("components.docker")] == [], kind


def test_only_the_image_builds_of_a_kubernetes_stack_import_the_docker_provider() -> None:
    loaded = _loaded_by_a_kubernetes_stack("a800")
    importers = {
        name
        for name, file in loaded.items()
        if name.startswith("components") and file and file.endswith(".py")
        if any(n == "pulumi_docker" or n.startswith("pulumi_docker.") for n in _imported(Path(file)))
    }
    assert importers == IMAGE_BUILDERS
