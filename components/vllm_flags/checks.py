"""What a stack may add to vLLM's command line, and whether every flag exists in its vLLM.

``glm:serving.extraArgs`` may not set a flag the config renders or owns (``owned.py``): argparse
keeps the last value, so it would silently replace the checked one. Every flag a stack renders or
passes in ``extraArgs`` must exist in the profile's vLLM version (``tables.py``): a misspelt flag
otherwise passes preview and a rehearsal, and on a real box vLLM exits at start in a restart loop.
The message names the nearest real flag (``difflib``). The value after a flag is never quoted: it
may be a secret.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from components.vllm_flags.names import expand_abbreviation, flag_name
from components.vllm_flags.owned import EXTRA_ARGS, owned_flags
from components.vllm_flags.tables import flag_table


def extra_args_problems(extra_args: Iterable[str]) -> list[str]:
    """``extraArgs`` entries that would override a flag the config owns, by its name or by an
    abbreviation argparse would expand (``--hos=0`` is ``--host=0``)."""
    owned = owned_flags()
    found = []
    for i, arg in enumerate(extra_args):
        name = flag_name(arg)
        if name is None:
            continue
        key = owned.get(name)
        if key is None and (expanded := expand_abbreviation(name, owned)) is not None:
            key, name = owned[expanded], f"{name} (argparse reads it as {expanded})"
        if key is not None:
            found.append(
                f"{EXTRA_ARGS}[{i}] sets {name}, which the config already renders: vLLM keeps "
                f"the last value, so it would silently replace the checked one. Fix: remove it from "
                f"extraArgs and set {key} instead."
            )
    return found


def unknown_flags(tokens: Iterable[str], flags: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(flag, what to say)`` for each long flag in ``tokens`` the table does not list, in order
    (the tables list long options only)."""
    found = []
    for token in tokens:
        name = flag_name(token)
        if name is None or not name.startswith("--") or name in flags:
            continue
        expanded = expand_abbreviation(name, flags)
        if expanded is not None:
            # argparse takes a unique prefix as the flag (allow_abbrev): vLLM starts, but one flag
            # added later with the same prefix makes it ambiguous and the engine exits.
            found.append((name, f"an abbreviation vLLM accepts today for {expanded}; spell it out"))
            continue
        near = difflib.get_close_matches(name, list(flags), n=1, cutoff=0.6)
        found.append((name, f"did you mean {near[0]}?" if near else "no flag of that name is close"))
    return found


def check_known_flags(
    version: str, rendered: Iterable[str], extra_args: Iterable[str], added: Iterable[str] = ()
) -> str | None:
    """The config problem for flags the profile's vLLM version does not have, or None.
    ``added``: flags the image adds (``glm:image.addedFlags``), accepted as they are."""
    table = flag_table(version)
    if table is None:
        return None
    flags, source = table
    flags = {**flags, **{name: {"added": True} for a in added if (name := flag_name(a))}}
    problems = []
    for where, tokens in ((EXTRA_ARGS, list(extra_args)), ("a rendered flag", list(rendered))):
        for name, hint in unknown_flags(tokens, flags):
            problems.append(f"{where}: {name} is not a flag of {source} ({hint})")
    if not problems:
        return None
    return (
        "; ".join(problems)
        + ". vLLM exits at start on a flag it does not have (`unrecognized arguments`), again and again "
        f"under the restart policy. Fix: the spelling in components/vllm_flags/ (`vllm serve --help` of "
        f"{version}), glm:image.vllmVersion if the image runs another version, or glm:image.addedFlags "
        "for a switch the image's own patches add."
    )
