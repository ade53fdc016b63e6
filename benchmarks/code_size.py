"""Lines per module and the largest functions, for the redesign's before/after figures.

    .venv/bin/python benchmarks/code_size.py [--top 12] [DIR ...]

Counts physical lines per ``.py`` file (tests included when named) and, with ``ast``, the length of
every function and method (``end_lineno - lineno + 1``, decorators excluded).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIRS = ("components", "capacity_probe", "policy", "scripts", "benchmarks", "tests", "__main__.py")


def modules(dirs: list[str]) -> list[Path]:
    paths: list[Path] = []
    for d in dirs:
        p = ROOT / d
        paths += [p] if p.is_file() else sorted(p.rglob("*.py"))
    return paths


def functions(path: Path) -> list[tuple[int, str]]:
    """(lines, qualified name) of each function in ``path``."""
    found: list[tuple[int, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append(((child.end_lineno or child.lineno) - child.lineno + 1, name))
                walk(child, f"{name}.")

    walk(ast.parse(path.read_text()), "")
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dirs", nargs="*", default=list(DEFAULT_DIRS))
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    paths = modules(args.dirs)
    rows = sorted(((len(p.read_text().splitlines()), p.relative_to(ROOT)) for p in paths), reverse=True)
    print(f"{sum(n for n, _ in rows)} lines in {len(rows)} modules")
    for n, rel in rows:
        print(f"{n:6d}  {rel}")
    largest = sorted(
        ((n, f"{p.relative_to(ROOT)}:{name}") for p in paths for n, name in functions(p)), reverse=True
    )
    print(f"\nlargest {args.top} functions")
    for n, where in largest[: args.top]:
        print(f"{n:6d}  {where}")


if __name__ == "__main__":
    main()
