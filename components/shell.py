"""The shell programs the stack runs inside its containers, from ``components/templates/*.sh``.

Each is a ``.sh`` file (so ``shellcheck`` reads it: ``make lint``) whose ``__NAME__`` placeholders
are filled from the program's constants; those run in the front container get
``templates/nginx-workers.sh`` first (finding nginx's workers, the graceful reload).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"
FRONT_LIBRARY = "nginx-workers.sh"
_PLACEHOLDER = re.compile(r"__([A-Z][A-Z_]*)__")


def shell_program(name: str, values: Mapping[str, str], *, front: bool = True) -> str:
    """``templates/<name>`` with every ``__KEY__`` replaced by ``values["KEY"]``; ``front``: the
    front container's library first. A placeholder without a value is an error, not a blank.

    >>> "reload_nginx()" in shell_program("release.sh", {"ROOT": "/r", "TRIES": "1", "WAIT": "1", "DIGEST": "d"})
    True
    """
    text = (TEMPLATES / name).read_text()
    missing = sorted({key for key in _PLACEHOLDER.findall(text) if key not in values})
    if missing:
        raise KeyError(f"templates/{name}: no value for {', '.join(missing)}")
    text = _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
    if front:
        text = (TEMPLATES / FRONT_LIBRARY).read_text() + "\n" + text
    return text


def sources_digest_text(*names: str) -> str:
    """The text of the named templates and the library, for a provider's source hash: a change to
    a program it runs re-delivers what depends on it."""
    return "".join((TEMPLATES / n).read_text() for n in (FRONT_LIBRARY, *names))
