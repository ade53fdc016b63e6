"""PrometheusRelease: Prometheus' files delivered as a release and loaded with SIGHUP.

The Prometheus container never changes for a rule, a scrape job or the status page: it runs
``prometheus --config.file=CURRENT/prometheus.yml`` (:data:`START_COMMAND` waits for the first
release). This resource writes each set of files (prometheus.yml, rules.yml, the status page's
files and, with several hosts, the guards' scrape key and certificate) as a new release directory
through ``docker exec`` on the stack's Docker host, checks it with ``promtool check config`` (which
loads the rules it names), and only then points ``current`` at it and sends Prometheus ``SIGHUP``.
Prometheus reloads in place: its series (the status page's charts) and each alert's ``for`` timer
go on. A release that promtool refuses, or that Prometheus does not load, is never left current:
``pulumi up`` fails with the tool's own message.

In ``pulumi preview --diff`` the inputs are hidden (the contents would be a positional diff of
every file); the provider's diff says in one line per changed file what changed in it
(:func:`describe_change`: its size, and which alerts, which scrape jobs or how many lines). The
secret files (the scrape key) reach the container on ``docker exec``'s stdin and are compared
through their digest only.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi.dynamic
import yaml

from components.docker.nginx_reload import bundle, container_exec_argv
from components.render.prometheus_config import CONTAINER_PORT, PROMETHEUS_FLAGS
from components.template import one_line_script, shell_program, sources_text

PROVIDER_VERSION = "1"
"""Bump by hand for a behaviour change that must re-deliver every stack's Prometheus files."""
SOURCE_HASH = hashlib.sha256(
    (ast.dump(ast.parse(Path(__file__).read_text())) + sources_text("prometheus-release.sh")).encode()
).hexdigest()[:12]
VERSION = f"{PROVIDER_VERSION}+{SOURCE_HASH}"

ROOT = "/etc/prometheus/glm53"
"""The releases, in the container (the official image lets its user, ``nobody``, write here)."""
CURRENT = f"{ROOT}/current"
CONFIG_FILE = "prometheus.yml"
RULES_FILE = "rules.yml"
"""Named in prometheus.yml relative to it, as the key and certificate are: Prometheus (and promtool)
resolve them in the config file's directory, so a release is checked where it lies."""
SCRAPE_KEY_FILE = "scrape-key"
REPLICA_CA_FILE = "replica-ca.crt"
PAGE_DIR = "status-page"
"""The status page's files (``--web.user-assets``, served at /user/, which the front proxies)."""
FLAGS = [
    f"--config.file={CURRENT}/{CONFIG_FILE}",
    *[flag for flag in PROMETHEUS_FLAGS if not flag.startswith("--config.file=")],
    f"--web.user-assets={CURRENT}/{PAGE_DIR}",
]
START_COMMAND = one_line_script(
    "prometheus-start.sh",
    values={"CONF": f"{CURRENT}/{CONFIG_FILE}", "PROMETHEUS": " ".join(["/bin/prometheus", *FLAGS])},
)
"""The container's command: wait for the first release, then Prometheus as PID 1 (so ``kill -HUP 1``)."""
LOAD_WAIT_SECONDS = 60
"""How long Prometheus may take to load a release (the first: its TSDB opens first)."""
EXEC_TIMEOUT_SECONDS = 180
RELEASE_SCRIPT = shell_program(
    "prometheus-release.sh",
    {
        "ROOT": ROOT,
        "PORT": str(CONTAINER_PORT),
        "TRIES": str(LOAD_WAIT_SECONDS * 5),
        "WAIT": str(LOAD_WAIT_SECONDS),
    },
    nginx=False,
)
"""Run with ``sh -c RELEASE_SCRIPT sh <release id>``, the release as a base64 tar on stdin."""
EFFECT = (
    "Prometheus files only: checked with `promtool check config`, then Prometheus reloads in place "
    "(SIGHUP). Its series, the status page's charts and the alerts' `for` timers go on; the API is "
    "not affected."
)
"""What applying a change costs: said in the provider's diff line."""
MAX_NAMED = 4
"""How many alerts or jobs one summary line names before it says "and N more"."""


# ---- what changed, in one line per file ---------------------------------------------------------


def size(text: str) -> str:
    """``text``'s size as the summary says it.

    >>> size("é" * 600)
    '1,200 bytes'
    """
    return f"{len(text.encode()):,} bytes"


def _named(kind: str, names: list[str]) -> str:
    shown = names[:MAX_NAMED]
    more = f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    return f"{kind} {', '.join(shown)}{more}"


def _token_change(old: str, new: str) -> str | None:
    """A short edit in a long value, as ```old` → `new```; None when the edit is not short.

    >>> _token_change("rate(x[5m]) > 0.9", "rate(x[5m]) > 0.95")
    '`0.9` → `0.95`'
    """
    a, b = old.split(), new.split()
    edits = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(edits) != 1:
        return None
    _, i1, i2, j1, j2 = edits[0]
    was, now = " ".join(a[i1:i2]), " ".join(b[j1:j2])
    return f"`{was}` → `{now}`" if 0 < len(was) + len(now) <= 40 else None


def _rules(text: str) -> dict[str, dict[str, Any]]:
    """Each rule of a rules file by its alert (or record) name, labels and annotations flattened."""
    rules: dict[str, dict[str, Any]] = {}
    for group in (yaml.safe_load(text) or {}).get("groups") or []:
        for rule in group.get("rules") or []:
            fields = {k: v for k, v in rule.items() if k not in ("labels", "annotations")}
            fields |= rule.get("labels") or {}
            fields |= rule.get("annotations") or {}
            rules[str(rule.get("alert") or rule.get("record"))] = fields
    return rules


def _rules_change(old: str, new: str) -> str:
    """Which alerts a rules file adds, removes or changes, and in which fields.

    >>> was = "groups: [{name: g, rules: [{alert: A, expr: x > 0.9, labels: {severity: warning}}, {alert: B, expr: y}]}]"
    >>> _rules_change(was, was.replace("0.9", "0.8").replace("{alert: B, expr: y}", "{alert: C, expr: z}"))
    'alert A: expr `0.9` → `0.8`; added C; removed B'
    """
    before, after = _rules(old), _rules(new)
    parts = []
    changed = [
        f"{name}: {', '.join(fields)}"
        for name in sorted(before.keys() & after.keys())
        if (fields := _fields_changed(before[name], after[name]))
    ]
    if changed:
        more = f" and {len(changed) - MAX_NAMED} more" if len(changed) > MAX_NAMED else ""
        parts.append(f"{'alert' if len(changed) == 1 else 'alerts'} {'; '.join(changed[:MAX_NAMED])}{more}")
    if added := sorted(after.keys() - before.keys()):
        parts.append(_named("added", added))
    if removed := sorted(before.keys() - after.keys()):
        parts.append(_named("removed", removed))
    return "; ".join(parts) or "same rules, reformatted"


def _fields_changed(was: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """A rule's changed fields, expr and for first; a short edit in one of them as old → new.

    >>> _fields_changed({"expr": "x > 1", "for": "5m", "summary": "s"}, {"expr": "x > 2", "for": "5m", "summary": "t"})
    ['expr `1` → `2`', 'summary']
    """
    fields = []
    for field in sorted(was.keys() | now.keys(), key=_field_order):
        if was.get(field) == now.get(field):
            continue
        edit = _token_change(str(was.get(field)), str(now.get(field))) if field in ("expr", "for") else None
        fields.append(f"{field} {edit}" if edit else field)
    return fields


def _field_order(field: str) -> tuple[int, str]:
    """expr and for first, then the labels and annotations by name."""
    return ({"expr": 0, "for": 1}.get(field, 2), field)


def _scrape_change(old: str, new: str) -> str:
    """Which scrape jobs prometheus.yml adds, removes or changes, and its other settings.

    >>> was = "global: {scrape_interval: 15s}\\nscrape_configs: [{job_name: vllm, static_configs: [{targets: [a:1]}]}]"
    >>> _scrape_change(was, was.replace("15s", "5s").replace("a:1", "b:1"))
    'global changed; job vllm: static_configs'
    """
    before, after = yaml.safe_load(old) or {}, yaml.safe_load(new) or {}
    parts = [
        f"{k} changed"
        for k in sorted(before.keys() | after.keys())
        if k != "scrape_configs" and before.get(k) != after.get(k)
    ]
    jobs_before = {str(j.get("job_name")): j for j in before.get("scrape_configs") or []}
    jobs_after = {str(j.get("job_name")): j for j in after.get("scrape_configs") or []}
    for name in sorted(jobs_before.keys() & jobs_after.keys()):
        was, now = jobs_before[name], jobs_after[name]
        fields = [k for k in sorted(was.keys() | now.keys()) if was.get(k) != now.get(k)]
        if fields:
            parts.append(f"job {name}: {', '.join(fields)}")
    if added := sorted(jobs_after.keys() - jobs_before.keys()):
        parts.append(_named("added job", added))
    if removed := sorted(jobs_before.keys() - jobs_after.keys()):
        parts.append(_named("removed job", removed))
    return "; ".join(parts) or "same settings, reformatted"


def _lines_change(old: str, new: str) -> str:
    """How many lines a text file loses and gains.

    >>> _lines_change("a\\nb\\nc\\n", "a\\nB\\nc\\nd\\n")
    '1 line out, 2 in (of 4)'
    """
    a, b = old.splitlines(), new.splitlines()
    out = into = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            out, into = out + i2 - i1, into + j2 - j1
    return f"{out} {'line' if out == 1 else 'lines'} out, {into} in (of {len(b)})"


def describe_change(name: str, old: str | None, new: str | None) -> str:
    """One line for one file of a release: its name, its size, and what changed in it.

    >>> describe_change("status-page/status.css", "a {}\\n", "a {}\\nb {}\\n")
    'status-page/status.css: 5 → 10 bytes; 0 lines out, 1 in (of 2)'
    >>> describe_change("rules.yml", None, "groups: []\\n")
    'rules.yml: added, 11 bytes'
    """
    if old is None or new is None:
        return f"{name}: added, {size(new)}" if new is not None else f"{name}: removed"
    try:
        if name == RULES_FILE:
            what = _rules_change(old, new)
        elif name == CONFIG_FILE:
            what = _scrape_change(old, new)
        else:
            what = _lines_change(old, new)
    except (yaml.YAMLError, AttributeError, TypeError):
        what = _lines_change(old, new)
    return f"{name}: {len(old.encode()):,} → {size(new)}; {what}"


def files_changes(olds: Mapping[str, str], news: Mapping[str, str]) -> list[str]:
    """:func:`describe_change` for every file that differs, by name."""
    return [
        describe_change(name, olds.get(name), news.get(name))
        for name in sorted(olds.keys() | news.keys())
        if olds.get(name) != news.get(name)
    ]


def release_id(contents: Mapping[str, str], digest: str) -> str:
    """The release directory's name: 16 hex digits of its files (the secret ones by their digest)."""
    blob = json.dumps({"files": dict(sorted(contents.items())), "secrets": digest}, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---- the dynamic provider -------------------------------------------------------------------------

COMPARED = ("container", "container_id", "contents", "docker_host", "secrets_digest", "ssh", "version")
"""Inputs compared by diff; ``secret_files`` is compared through ``secrets_digest``."""


def say_what_changes(olds: Mapping[str, Any], news: Mapping[str, Any]) -> None:
    """The preview's (and the up's) lines for a release: one per changed file, then the effect.
    Said only when the new contents are known (the engine also asks with unknowns)."""
    from pulumi.runtime import rpc

    contents = news.get("contents")
    if not isinstance(contents, dict) or rpc.contains_unknowns(contents):
        return
    lines = files_changes(olds.get("contents") or {}, contents)
    if olds.get("secrets_digest") != news.get("secrets_digest") and not rpc.contains_unknowns(
        news.get("secrets_digest")
    ):
        lines.append("the scrape key or the guards' certificate changed")
    if not lines and olds.get("contents"):
        if olds.get("container_id") != news.get("container_id"):
            lines.append("the same files, delivered again to a new Prometheus container")
        elif olds.get("version") != news.get("version"):
            lines.append("the same files, delivered again: the release's code changed (version)")
    for line in lines:
        print(f"[prometheus] {line}", file=sys.stderr, flush=True)
    if lines and olds.get("contents") and olds.get("contents") != contents:
        print(f"[prometheus] {EFFECT}", file=sys.stderr, flush=True)


def apply_release(props: Mapping[str, Any]) -> str:
    """Write, check and load one release; returns the script's last line. Raises with its error."""
    import subprocess

    contents, secret_files = dict(props["contents"]), dict(props.get("secret_files") or {})
    release = release_id(contents, str(props["secrets_digest"]))
    argv = container_exec_argv(
        str(props["docker_host"]), props.get("ssh"), str(props["container"]), RELEASE_SCRIPT, release
    )
    try:
        done = subprocess.run(
            argv, input=bundle({**contents, **secret_files}), capture_output=True,
            timeout=EXEC_TIMEOUT_SECONDS, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"delivering Prometheus release {release} to {props['container']} took over "
            f"{EXEC_TIMEOUT_SECONDS} s; Prometheus keeps its current files"
        ) from None
    if done.returncode != 0:
        raise RuntimeError(
            f"Prometheus release {release} was not applied to container {props['container']} "
            f"(exit {done.returncode}):\n{done.stderr.decode(errors='replace').strip()}"
        )
    return done.stdout.decode(errors="replace").strip().splitlines()[-1]


def release_outputs(props: Mapping[str, Any]) -> dict[str, Any]:
    """Every compared input (so the next diff can compare) and the live release; no secret."""
    outs = {k: props.get(k) for k in COMPARED if props.get(k) is not None}
    outs["release"] = release_id(dict(props["contents"]), str(props["secrets_digest"]))
    return outs


class PrometheusReleaseProvider(pulumi.dynamic.ResourceProvider):
    """Pickled with dill: imports live inside the methods (and in module functions they call)."""

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        changed = [k for k in COMPARED if olds.get(k) != news.get(k)]
        if changed:
            say_what_changes(olds, news)
        # Never a replacement: any change is an update, and an update is a reload.
        return pulumi.dynamic.DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        apply_release(props)
        return pulumi.dynamic.CreateResult(f"prometheus-files-{props['container']}", release_outputs(props))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        apply_release(news)
        return pulumi.dynamic.UpdateResult(release_outputs(news))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Nothing to undo: the files live in the container, and go with it."""


class PrometheusRelease(pulumi.dynamic.Resource):
    """One Prometheus release: the files by name (``contents``), the secret ones as one secret."""

    release: pulumi.Output[str]
    """The live release directory (``releases/<release>``), from the files."""

    def __init__(self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        # Display only: the contents as a positional diff of every file would bury the change; the
        # provider's diff says it in one line per file (say_what_changes).
        hidden = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(hide_diffs=["*"]))
        super().__init__(
            PrometheusReleaseProvider(), name, {**props, "version": VERSION, "release": None}, hidden
        )
