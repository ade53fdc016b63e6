"""The one template engine of the stack: ``{{name}}`` placeholders in files under
``components/host/templates/`` (nginx.conf, the guard's conf, their snippets, and every program the
stack runs on a host or in a container: the front's scripts and commands, the weights' download
and check, the preflight's settings, the serving container's health check, the ssh wrapper).
``{{name}}`` is also the one placeholder style of what the stack fills elsewhere
(``glm:target.kubernetes.imageLoadCommand``, scripts/k8s/node/).

Why not Jinja2: the templates hold no logic; every choice (TLS or not, which routes, which
replicas) is made in typed, tested Python, which fills plain placeholders. What an engine must do
here is be strict: a placeholder without a value, or a value without a placeholder, is an error,
so a renamed placeholder can never render an empty directive. ``{{NAME}}`` is also a plain word to
``sh`` and to ``shellcheck`` (``root={{ROOT}}`` is an assignment), so the shell programs stay
``.sh`` files that ``make lint`` checks; never a whole command (``shellcheck`` reads a line that
begins ``{{`` as a brace group): a program made of pieces names its templates in order
(:func:`host_script`). A program that is a resource input leaves its templates' leading comments
out (:func:`host_script`, :func:`one_line_script`); the front's scripts keep theirs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

TEMPLATES = Path(__file__).parent / "host" / "templates"
FRONT_LIBRARY = "nginx-workers.sh"
"""What every shell program run in an nginx container starts with: its workers and the reload."""
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def render_template(template: str, values: Mapping[str, str]) -> str:
    r"""Fill ``{{name}}`` placeholders; a line holding only a placeholder that is empty is left out.

    Strict both ways, so a renamed placeholder cannot silently render an empty directive:

    >>> render_template("a {{x}};\n{{opt}}\nb;\n", {"x": "1", "opt": ""})
    'a 1;\nb;\n'
    """
    wanted = placeholders(template)
    if wanted != set(values):
        raise ValueError(f"template placeholders {sorted(wanted)} do not match the values {sorted(values)}")
    lines = []
    for line in template.splitlines(keepends=True):
        alone = _PLACEHOLDER.fullmatch(line.strip())
        if alone and values[alone[1]] == "":
            continue
        lines.append(_PLACEHOLDER.sub(lambda m: values[m[1]], line))
    return "".join(lines)


def placeholders(text: str) -> set[str]:
    """The names of ``text``'s placeholders.

    >>> sorted(placeholders("docker push {{image}} # {image} is not one"))
    ['image']
    """
    return set(_PLACEHOLDER.findall(text))


def template(name: str) -> str:
    """The text of ``components/host/templates/<name>``."""
    return (TEMPLATES / name).read_text()


def render_file(name: str, values: Mapping[str, str]) -> str:
    return render_template(template(name), values)


def shell_program(name: str, values: Mapping[str, str], *, nginx: bool = True) -> str:
    """``templates/<name>`` filled; ``nginx``: run in an nginx container, so
    :data:`FRONT_LIBRARY` goes first.

    >>> "reload_nginx()" in shell_program("release.sh", {"ROOT": "/r", "TRIES": "1", "WAIT": "1", "DIGEST": "d"})
    True
    """
    text = render_file(name, values)
    return template(FRONT_LIBRARY) + "\n" + text if nginx else text


def host_script(*names: str, values: Mapping[str, str]) -> str:
    r"""The named templates filled as one program, each less its leading comment lines (the
    shellcheck directives and the notes for the reader): what runs, a resource input, is only the
    program. A command never stands alone as a placeholder (``shellcheck`` reads ``{{X}}`` there as
    a brace group): a program made of pieces names the templates in order.

    >>> host_script("nginx-start.sh", values={"CONF": "/c"}).startswith("while [ ! -e /c ]")
    True
    """
    body = []
    for name in names:
        lines = template(name).splitlines(keepends=True)
        while lines and lines[0].startswith("#"):
            lines.pop(0)
        body += lines
    return render_template("".join(body), values)


def one_line_script(*names: str, values: Mapping[str, str]) -> str:
    """:func:`host_script` as one line (a container's command, a preStop, a health check), from
    templates written one statement a line, each ending as the shell needs it (``;``, ``&``).

    >>> one_line_script("nginx-start.sh", values={"CONF": "/c"})
    "while [ ! -e /c ]; do sleep 0.1; done; exec nginx -c /c -e stderr -g 'daemon off;'"
    """
    lines = host_script(*names, values=values).splitlines()
    if any(line.lstrip().startswith("#") for line in lines):
        raise ValueError(f"{names}: a comment below the first statement would swallow the rest of the line")
    return " ".join(lines)


def sources_text(*names: str) -> str:
    """The text of the named templates and the library, for a provider's source hash: a change to
    a program it runs re-delivers what depends on it."""
    return "".join(template(n) for n in (FRONT_LIBRARY, *names))
