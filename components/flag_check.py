"""Every ``vllm serve`` flag a stack renders or passes in ``glm:serving.extraArgs`` must exist in
the profile's vLLM version, checked against the real parser's table (``components/vllm_flags/``,
made by ``scripts/vllm_flags.py`` from the vLLM package on PyPI).

A misspelt flag otherwise passes preview and a rehearsal, and on a real box vLLM exits at start
in a restart loop. The message names the nearest real flag (``difflib``).

Which table: the version's own; for a build between two releases (the rtx5090 nightly
``0.28.1rc1.dev580+g385dce36b``) the union of the release before and the release after, so that a
flag added on the way is not refused; a flag in neither is refused. vllm-ascend runs vLLM's own
parser (the plugin adds a platform, not flags), so ascend's ``0.23.0`` is vLLM 0.23.0's table.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

FLAG_TABLES = Path(__file__).with_name("vllm_flags")
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def _release(name: str) -> tuple[int, int, int] | None:
    m = _RELEASE.match(name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


@cache
def _load(stem: str) -> dict[str, Any]:
    flags: dict[str, Any] = json.loads((FLAG_TABLES / f"{stem}.json").read_text())["flags"]
    return flags


def flag_table(version: str) -> tuple[dict[str, Any], str] | None:
    """``(flags, what was used)`` for ``version``, or None when no table is near enough."""
    stems = sorted((p.stem for p in FLAG_TABLES.glob("*.json")), key=lambda s: _release(s) or (0, 0, 0))
    if version in stems:
        return _load(version), f"vLLM {version}'s parser"
    wanted = _release(version)
    if wanted is None:
        return None
    before = [s for s in stems if (_release(s) or (0, 0, 0)) <= wanted]
    after = [s for s in stems if (_release(s) or (0, 0, 0)) > wanted]
    # A pre-release or dev build of X.Y.Z (0.28.1rc1.dev580) sits between the last release before it
    # and the next one; with one side missing there is no safe table.
    if not before or not after:
        return None
    return {**_load(after[0]), **_load(before[-1])}, f"vLLM {before[-1]} and {after[0]} (between them)"


def flag_name(token: str) -> str | None:
    """The flag a command-line token spells, normalised as vLLM's parser does (``_`` → ``-``,
    ``--compilation-config.mode`` → ``--compilation-config``); None for a value."""
    if not token.startswith("--") or token == "--":
        return None
    name = token.split("=", 1)[0]
    name = "--" + name[2:].replace("_", "-")
    return name.split(".", 1)[0]


def unknown_flags(tokens: Iterable[str], flags: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(flag, what to say)`` for each token the table does not list, in order."""
    found = []
    for token in tokens:
        name = flag_name(token)
        if name is None or name in flags:
            continue
        prefixed = sorted(f for f in flags if f.startswith(name))
        if len(prefixed) == 1:
            # argparse takes a unique prefix as the flag (allow_abbrev): vLLM starts, but one flag
            # added later with the same prefix makes it ambiguous and the engine exits.
            found.append((name, f"an abbreviation vLLM accepts today for {prefixed[0]}; spell it out"))
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
    for where, tokens in (("glm:serving.extraArgs", list(extra_args)), ("a rendered flag", list(rendered))):
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
