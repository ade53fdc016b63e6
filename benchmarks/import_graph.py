"""The project's own import graph: modules, arrows, and every circle, for the redesign's figures.

    .venv/bin/python benchmarks/import_graph.py [ROOT]

Reads ``components/``, ``policy/`` and ``capacity_probe/`` of ROOT (default: this checkout) with ``ast``.
Two passes: the imports a module runs when it is loaded, then those plus the ones inside functions
(imported late on purpose, usually to keep Pulumi out of a path). ``if TYPE_CHECKING:`` blocks
never run, so they are not arrows. A circle is a strongly connected set of two or more modules.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGES = ("components", "policy", "capacity_probe")


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST, late: bool) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    body = tree.body if isinstance(tree, ast.Module | ast.If | ast.Try) else []
    for node in body if not late else ast.iter_child_nodes(tree):
        if _type_checking(node):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif late or isinstance(node, ast.If | ast.Try):
            found += _imports(node, late)
    return found


def arrows(name: str, path: Path, known: dict[str, Path], late: bool) -> set[str]:
    out: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in _imports(ast.parse(path.read_text()), late):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
            continue
        base = node.module or ""
        if node.level:
            base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
        for alias in node.names:
            out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {target for target in out if target in known and target != name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    known = modules(root)
    for late, what in ((False, "imports run at load"), (True, "with imports inside functions")):
        graph = {name: arrows(name, path, known, late) for name, path in known.items()}
        found = circles(graph)
        edges = sum(len(targets) for targets in graph.values())
        print(f"{what}: {len(known)} modules, {edges} arrows, {len(found)} circle(s)")
        for component in found:
            print("   ", " <-> ".join(component))


if __name__ == "__main__":
    main()
