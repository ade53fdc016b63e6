"""The ``vllm serve`` flags a config renders, and the argv items they become.

A flag is rendered once, to its value: ``True`` for a bare switch, a string for ``--flag=value``,
a tuple of words for a flag that takes several arguments (``--allowed-media-domains a b``). The
argv is built from those values, each word its own item; nothing is joined and split back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from components.vllm_flags.owned import OWNED

FlagValue = str | bool | tuple[str, ...]
"""A rendered flag's value: True (a bare switch), one argument, or several."""


def _value(value: Any, several: bool) -> str | tuple[str, ...]:
    if several:
        return tuple(str(v) for v in value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=False)
    return str(value)


def render_flags(config: object) -> dict[str, FlagValue]:
    """Each flag a ``StackSections`` sets, in argv order. Taken as any object with the table's
    attributes, so that the config's rules can ask before the rules have passed, and this package
    imports nothing of the config's.

    >>> from components.config import build_stack_config
    >>> flags = render_flags(build_stack_config({"hardware": "local"}))
    >>> flags["--served-model-name"], flags["--max-num-seqs"], flags["--enable-prefix-caching"]
    ('glm-5.3-flash', '8', True)
    """
    flags: dict[str, FlagValue] = {}
    for row in OWNED:
        value = attrgetter(row.source)(config)
        if row.kind in ("value", "values"):
            if value is not None:
                flags[row.flag] = _value(value, several=row.kind == "values")
        elif row.kind == "switch":
            if value:
                flags[row.flag] = True
        elif value is not None:
            flags[row.spellings[0] if value else row.spellings[1]] = True
    return flags


def flag_args(flags: Mapping[str, FlagValue]) -> list[str]:
    """The argv items of rendered flags: ``--flag`` for a switch, ``--flag=value``, or the flag and
    then one item per word.

    >>> flag_args({"--port": "8000", "--allowed-media-domains": ("a.example", "b.example"), "--enforce-eager": True})
    ['--port=8000', '--allowed-media-domains', 'a.example', 'b.example', '--enforce-eager']
    """
    argv: list[str] = []
    for flag, value in flags.items():
        if value is True:
            argv.append(flag)
        elif isinstance(value, tuple):
            argv += [flag, *value]
        else:
            argv.append(f"{flag}={value}")
    return argv


def argv_of(model_path: str, flags: Mapping[str, FlagValue], extra_args: Sequence[str]) -> list[str]:
    """The ``vllm serve`` arguments: the model path, the flags' items, then the extra args verbatim."""
    return [model_path, *flag_args(flags), *extra_args]


def shown_flags(flags: Mapping[str, FlagValue]) -> dict[str, str | bool]:
    """The flags as people read them (the ``vllmFlags`` output, the gate's messages and its
    inputs): several words joined by spaces. For display only; the argv never comes from it."""
    return {flag: " ".join(value) if isinstance(value, tuple) else value for flag, value in flags.items()}
