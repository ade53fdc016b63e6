"""A one-flag `pulumi preview --diff` reads as a review (issue 32 item 6), on the real engine: the
local stack is brought up, `up` again changes nothing and says no gate ran, then the preview of
`serving.maxNumSeqs` 8 → 4, as `make preview` shows it (ops/preview_display.py), is compared with
docs/preview-diff.md's transcript, line for line modulo ids, hashes, ports, the container's name and
the CLI's progress ticks (ordering aside: the engine prints concurrent steps and their warnings in
the order they finish)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.preview_display import compact
from tests.engine import PROJECT, LocalStack, PulumiProject, engine_missing

pytestmark = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))
KEY = "sk-review-8c1f4e2a9b7d3605e1c4"
DOCS = PROJECT / "docs" / "preview-diff.md"
ONE_FLAG = "serving.maxNumSeqs=4"
# Where each run differs: resource ids and hashes (hex), the provider's id, the test's free ports and
# the container's name (glm53-flash-local in a user's stack).
VARYING = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"[0-9a-f]{12,}"), "<hex>"),
    (re.compile(r"glm53-[a-z]+(-[a-z]+)*?-(local|\d+)(?=[-\"\]: ]|$)"), "<container>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
]


def normalised(text: str) -> list[str]:
    # "@ previewing update...." is the CLI's progress tick, printed when a preview takes a while.
    lines = [line.rstrip() for line in text.splitlines() if line.strip() and not line.startswith("@ ")]
    for pattern, stand_in in VARYING:
        lines = [pattern.sub(stand_in, line) for line in lines]
    return sorted(lines)


def documented() -> str:
    """The transcript in docs/preview-diff.md's first code block, without its `$ make …` line."""
    block = DOCS.read_text().split("```\n", 2)[1]
    return "\n".join(line for line in block.splitlines() if not line.startswith("$ "))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PulumiProject, LocalStack]]:
    project = PulumiProject.copy_of_repo(tmp_path_factory.mktemp("review") / "glm")
    (project.root / "scripts").mkdir()
    (project.root / "scripts" / "gate_note.py").write_text((PROJECT / "scripts" / "gate_note.py").read_text())
    # Without the usage meter, as the transcript was recorded (with it, on by default, the front's
    # config reloads too for its share table: docs/preview-diff.md says so under the transcript).
    local = project.init_local_stack(
        "glm53-review", secrets={"glm:apiKeys.review": KEY}, config={"glm:front.usageMeter.enabled": "false"}
    )
    try:
        project.run("up", "--yes", "--skip-preview", "-s", "local")
        yield project, local
    finally:
        project.run("destroy", "--yes", "-s", "local", check=False)
        subprocess.run(["docker", "volume", "rm", f"{local.container}-jit-cache"], capture_output=True)


def gate_note(project: PulumiProject) -> str:
    """What `make up` (scripts/up.sh) says about the gate, from this stack's history and state."""
    folder = project.root
    (folder / "history.json").write_text(project.run("stack", "history", "--json", "-s", "local"))
    (folder / "state.json").write_text(project.run("stack", "export", "-s", "local"))
    said = subprocess.run(
        [sys.executable, "scripts/gate_note.py", "history.json", "state.json"],
        cwd=folder, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return said.stdout.strip()


def test_an_up_that_changed_nothing_says_no_gate_ran(stack: tuple[PulumiProject, LocalStack]) -> None:
    project, _ = stack
    assert gate_note(project) == "the smoke gate passed"
    project.run("up", "--yes", "--skip-preview", "-s", "local")
    note = gate_note(project)
    assert note.startswith("nothing changed, so no gate ran: the smoke gate last passed at "), note


def test_the_one_flag_preview_is_the_docs_example(stack: tuple[PulumiProject, LocalStack]) -> None:
    project, _ = stack
    preview = subprocess.run(
        ["pulumi", "preview", "--diff", "-s", "local", "--non-interactive"], cwd=project.root,
        env={**project.env, "GLM_SET": ONE_FLAG}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    said = "".join(compact(preview.stdout.splitlines(keepends=True)))
    if os.environ.get("GLM_PREVIEW_TRANSCRIPT"):  # docs/preview-diff.md is pasted from here
        Path(os.environ["GLM_PREVIEW_TRANSCRIPT"]).write_text(said)
    print(f"one-flag preview: {len(said.splitlines())} lines")
    assert preview.returncode == 0, said
    assert '~ [5]: "--max-num-seqs=8" => "--max-num-seqs=4"' in said
    assert "consider explicitly setting the `platform` field" not in said
    # Each gate in one line: that it re-runs and why; none of its ~30 inputs dumped.
    assert said.count("re-runs: container_id, flags") == 2, said
    assert "--served-model-name      :" not in said.split("--outputs:--")[0], said
    # The probe is replaced because it judges saturation against maxNumSeqs: said, not only [secret].
    assert re.search(r'\+ label\s*: "glm53.probe-saturated-at-max-num-seqs"\n\s+\+ value\s*: "4"', said), said
    assert normalised(said) == normalised(documented()), (
        "docs/preview-diff.md's transcript is not what the preview prints now: "
        f"GLM_PREVIEW_TRANSCRIPT=/tmp/preview.txt pytest {__file__} writes the real one\n{said}"
    )
