"""Tests stand alone (issue 51): no module of tests/, benchmarks/ or scripts/ imports a test module
(``test_*.py``). What several share lives in support modules, tests/ files not named ``test_*``;
their fixtures reach every test module as the suite's plugins (``pytest_plugins`` in conftest.py)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str) -> list[str]:
    """The test modules a source imports.

    >>> imported_test_modules("from tests.test_config import make\\nfrom tests.front_rig import KEYS\\n")
    ['tests.test_config']
    >>> imported_test_modules("def f():\\n    import tests.gate.test_cli as cli\\n")
    ['tests.gate.test_cli']
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found += [n for n in names if n.split(".")[0] == "tests" and n.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_module_of_tests_imports_a_test_module() -> None:
    """Nor do the benchmarks and scripts that reuse the tests' rigs (a running front, a rehearsal)."""
    root = TESTS.parent
    readers = [*TESTS.rglob("*.py"), *(root / "benchmarks").glob("*.py"), *(root / "scripts").rglob("*.py")]
    leaning = {
        str(path.relative_to(root)): imported
        for path in sorted(readers)
        if (imported := imported_test_modules(path.read_text()))
    }
    assert leaning == {}, "move what they share into a support module (tests/<what it makes>.py)"


def test_the_suite_names_its_shared_fixtures_in_one_place() -> None:
    """Every support module the conftest lists exists and defines a fixture."""
    from tests import conftest

    for module in conftest.pytest_plugins:
        text = (TESTS.parent / Path(*module.split("."))).with_suffix(".py").read_text()
        assert "@pytest.fixture" in text, module
