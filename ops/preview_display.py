"""``make preview``'s display: the engine's ``pulumi preview --diff`` with what did not change left out.

The engine prints a changed resource's whole input object when its provider gives no detailed diff
(every dynamic resource: the front's config, Prometheus' files, the gates), and every element of a
changed list or map output (``vllmArgs``, ``vllmFlags``: a dozen lines for one flag). A reviewer
needs what changes. This filter keeps, for each resource that is updated or replaced:

* its header and ``[urn=…]`` (which resource), not ``[id=…]`` and ``[provider=…]``;
* the properties marked ``~``, ``+`` or ``-``, and ``effect`` (what applying it costs);
* inside a changed map or list, the changed entries only (``~ bob: 2 => 3``, ``+ [11]: "--enforce-eager"``);
* a changed multi-line text as the engine shows it (its changed lines, with their context), less
  its ``...`` lines;

and everything of a resource created or deleted, and every line outside the resources (warnings,
the gates' and Prometheus' lines, the counts), less the blank line the engine puts after each line
a provider prints, and the header of the stack itself when it is unchanged. ``GLM_FULL_DIFF=1
scripts/pulumi.sh preview --diff`` (or plain ``pulumi``) prints the engine's own display.

Reads stdin, writes stdout, line by line (``python -m ops.preview_display``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;]*m")
MARKS = ("~ ", "+ ", "- ")
"""The engine's change marks before a property (update, add, remove) or a resource."""
RESOURCE_MARKS = ("+-", "-+", "++", "--", ">-", "<-", "+>", "<+")
"""Marks only a resource's header has (``+-`` replace, ``++``/``--`` its halves)."""
HEADER = re.compile(r"^[\w.-]+:[\w./-]+:[\w.-]+: \([\w -]+\)$")
"""A resource's header: ``pulumi-python:dynamic:Resource: (update)``."""
CHANGED_RESOURCE = ("~ ", "+-", "-+", "++", "--")
KEPT = ("effect",)
"""Unchanged properties that stay: what applying the change costs (components/change_cost.py)."""
DROPPED_TAGS = ("[id=", "[provider=")
CLOSERS = ("}", "]")


@dataclass
class Line:
    text: str
    """As printed (colours included)."""
    plain: str
    indent: int
    """Where the property's name begins: the mark, when there is one, sits in the two columns before."""
    mark: str
    body: str


def parse(text: str) -> Line:
    """One display line: its mark and the column its name begins at.

    >>> line = parse("      ~ command: [")
    >>> (line.mark, line.indent, line.body)
    ('~ ', 8, 'command: [')
    >>> parse("    +-docker:index/container:Container: (replace)").mark
    '+-'
    >>> parse("    --outputs:--").mark
    ''
    >>> parse("        --enable-prefix-caching  : true").mark  # a flag, not a mark
    ''
    """
    plain = ANSI.sub("", text.rstrip("\n"))
    stripped = plain.lstrip(" ")
    indent = len(plain) - len(stripped)
    mark = stripped[:2] if stripped[:2] in MARKS else ""
    if stripped[:2] in RESOURCE_MARKS and HEADER.match(stripped[2:]):
        mark = stripped[:2]
    body = stripped[2:].lstrip(" ") if mark else stripped
    return Line(text, plain, indent + 2 if mark else indent, mark, body)


def _opens(line: Line) -> str | None:
    """``{``/``[``: the line opens a map or a list; ``text``: a multi-line text's diff; None."""
    if line.body.endswith(("{", "[")):
        return "container"
    if line.mark and line.plain.rstrip().endswith(":") and not line.body.startswith("["):
        return "text"
    return None


@dataclass
class Block:
    indent: int
    mode: str
    """``changes``: keep only the changed entries; ``keep``: all; ``drop``: none; ``text``: a text's
    diff, all but the engine's ``...``."""


def compact(lines: Iterable[str]) -> Iterator[str]:
    """The lines of ``pulumi preview --diff`` that say what changes (module docstring)."""
    stack: list[Block] = []
    in_resources = False
    said = ""
    for text in lines:
        line = parse(text)
        if not line.plain.strip():
            # The engine follows each line a provider prints ([smoke-gate] …) with a blank one; one
            # blank line is enough anywhere.
            if (not stack or stack[-1].mode != "drop") and said and not said.startswith("["):
                yield text
                said = ""
            continue
        said = line.plain
        if line.indent == 0:
            # A provider's line ([smoke-gate] …) or a warning may come between a resource's lines:
            # it changes nothing. An error ends the block it interrupts: the lines under it are shown.
            if line.plain.startswith("Previewing ") or line.plain == "Resources:":
                in_resources = line.plain != "Resources:"
                stack.clear()
            if line.plain.startswith("error"):
                stack.clear()
            yield text
            continue
        if not in_resources:
            yield text
            continue
        closing = line.plain.strip() in CLOSERS and not line.mark
        while stack and (line.indent < stack[-1].indent or (line.indent == stack[-1].indent and not closing)):
            stack.pop()
        if closing and stack and stack[-1].indent == line.indent:
            block = stack.pop()
            if block.mode != "drop":
                yield text
            continue
        if HEADER.match(line.body) or line.plain.strip() == "--outputs:--":
            outputs = line.plain.strip() == "--outputs:--"
            if not line.mark and line.body.endswith("(same)"):
                # The stack itself, unchanged: its header and urn say nothing (its outputs follow).
                stack = [Block(line.indent, "drop")]
                continue
            changed = line.mark in CHANGED_RESOURCE or outputs
            stack = [Block(line.indent - 2 if outputs else line.indent, "changes" if changed else "keep")]
            yield text
            continue
        parent = stack[-1].mode if stack else "keep"
        if parent == "drop" or (parent == "text" and line.plain.strip() == "..."):
            continue
        if parent == "changes" and line.body.startswith(DROPPED_TAGS):
            continue
        dropped = parent == "changes" and not line.mark and not line.body.startswith("[urn=")
        dropped = dropped and line.body.split(":")[0].strip() not in KEPT
        opens = _opens(line)
        if opens is not None:
            mode = (
                "drop"
                if dropped
                else "text"
                if opens == "text"
                else "changes"
                if line.mark == "~ "
                else "keep"
            )
            stack.append(Block(line.indent, mode))
        if not dropped:
            yield text


def main() -> None:
    """Filter stdin to stdout; should the filter fail on a line it cannot read, the rest as it came."""
    seen: list[str] = []

    def read() -> Iterator[str]:
        for text in sys.stdin:
            seen.append(text)
            yield text

    try:
        for line in compact(read()):
            sys.stdout.write(line)
            sys.stdout.flush()
    except Exception as err:  # a display must never hide the engine's output
        print(f"(ops.preview_display: {err!r}; the rest as the engine printed it)", flush=True)
        sys.stdout.writelines(seen[-1:])
        sys.stdout.writelines(sys.stdin)


if __name__ == "__main__":
    main()
