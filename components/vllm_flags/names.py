"""How vLLM's parser reads a command-line token: the flag it names, and the flag an abbreviation
stands for. The config's checks (``checks.py``) read ``extraArgs`` and the rendered flags through
these two, and nothing else parses a flag's name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def flag_name(token: str) -> str | None:
    """The flag a token names, normalised as vLLM's parser does, or None for a value.

    >>> flag_name("--max_model_len=8"), flag_name("--compilation-config.mode=3")
    ('--max-model-len', '--compilation-config')
    >>> flag_name("-O3"), flag_name("-tp"), flag_name("glm47"), flag_name("--")
    ('-O', '-tp', None, None)
    """
    if not token.startswith("-") or token == "--":
        return None
    name = token.split("=", 1)[0]
    if re.fullmatch(r"-O[0-9.].*", name):  # vLLM's -O3: the compilation level glued to the flag
        return "-O"
    if name.startswith("--"):
        # `_` and `-` are one to vLLM's FlexibleArgumentParser; `--x.key` sets a key of --x's JSON.
        return "--" + name[2:].split(".", 1)[0].replace("_", "-")
    return name


def expand_abbreviation(name: str, flags: Iterable[str]) -> str | None:
    """The one flag of ``flags`` that ``name`` abbreviates, as argparse reads a unique prefix of a
    long option (``allow_abbrev``, vLLM's default), or None: no such flag, or several.

    >>> expand_abbreviation("--hos", ["--host", "--port"]), expand_abbreviation("--h", ["--host", "--help"])
    ('--host', None)
    """
    if not name.startswith("--"):
        return None
    found = [flag for flag in flags if flag.startswith(name) and flag != name]
    return found[0] if len(found) == 1 else None
