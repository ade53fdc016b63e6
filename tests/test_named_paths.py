"""Every path a product file names exists (issue 51): a comment, a docstring or a shipped text that
names ``components/render/nginx_conf.py`` sends a reader there, and after a move it sends them nowhere.

Read: the files git tracks under ``components/``, ``images/``, ``scripts/``, ``docs/`` and the
Makefile (the shipped templates, the meter's Lua and the images' text included). A path is a word
that starts with one of this repository's top-level folders (``components/host/preflight.sh``) or
with a folder of ``components/`` (``host/templates/rotation.sh``, ``templates/nginx.conf``:
read from ``components/host/`` too, where the templates live); a module path followed by a name
(``components/render/nginx_conf.render_nginx_conf``) names the module. Words with placeholders
(``{{ROOT}}/x``, ``<version>.json``, globs) and paths on a box (``/etc/nginx/…``) are not read.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READ = ["components", "images", "scripts", "docs", "Makefile"]
NOT_TEXT = {".json", ".png", ".svg", ".gz"}

# Paths in another project's tree that happen to start like a folder here, each with why.
ELSEWHERE = {
    ("components/gate/startup.py", "config/parallel.py"): "vLLM's vllm/config/parallel.py",
}


def _folders() -> list[str]:
    top = [p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")]
    nested = {p.name for p in (ROOT / "components").rglob("*") if p.is_dir() and p.name != "__pycache__"}
    return sorted(set(top) | nested, key=len, reverse=True)


def _tracked() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--", *READ], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if Path(name).suffix not in NOT_TEXT and "fixtures" not in name]


def _exists(path: str, named_in: Path) -> bool:
    bases = [ROOT, ROOT / "components", ROOT / "components" / "host", *named_in.parents]
    candidates = [path]
    head, dot, name = path.rpartition(".")
    if dot and "/" not in name:
        candidates += [f"{head}.py", head]  # a module (or a package) and a name in it
    return any((base / c).exists() for base in bases for c in candidates)


def named_paths(text: str, folders: list[str]) -> list[tuple[int, str]]:
    """The repository paths a text names, with their line numbers.

    >>> named_paths("see components/render/nginx_conf.py, and {{ROOT}}/upstream.conf", ["components"])
    [(1, 'components/render/nginx_conf.py')]
    >>> named_paths("rendered by `host/templates/nginx.conf`.", ["host", "templates"])
    [(1, 'host/templates/nginx.conf')]
    """
    alternatives = "|".join(map(re.escape, folders))
    word = re.compile(r"(?<![\w./~${}<>-])((?:" + alternatives + r")/[\w./-]*[\w/])")
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in word.finditer(line):
            path = m.group(1)
            after = line[m.end() : m.end() + 1]
            if after in ("*", "{", "<", "$") or any(c in path for c in "*"):
                continue
            found.append((number, path.rstrip("/.")))
    return found


def test_every_path_a_product_file_names_exists() -> None:
    folders = _folders()
    missing = []
    for file in _tracked():
        try:
            text = file.read_text()
        except UnicodeDecodeError:
            continue
        rel = str(file.relative_to(ROOT))
        for number, path in named_paths(text, folders):
            if (rel, path) not in ELSEWHERE and not _exists(path, file):
                missing.append(f"{rel}:{number}: {path}")
    assert missing == [], (
        "paths named that do not exist (fix the text, or move the file back):\n" + "\n".join(missing)
    )


def test_the_check_finds_a_path_that_is_gone(tmp_path: Path) -> None:
    """The check can fail: a path under a real folder that is not there is reported."""
    named = tmp_path / "x.py"
    named.write_text("# moved: components/host/templates/nginx_gone.conf\n")
    [(_, path)] = named_paths(named.read_text(), _folders())
    assert not _exists(path, named)
    assert _exists("components/host/templates/nginx.conf", named)
