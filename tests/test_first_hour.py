"""A new user's first hour, scripted: `make up` on a fresh clone, and the set-up scripts it runs.

The end-to-end test clones the repository, runs `make up` as the README says (with its own state
folder, and ports and names moved by `GLM_SET` so it cannot meet a stack already running), then
checks what the user is left with: a clean work tree, no stray containers, and a key line that
works in a new shell.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.engine import PROJECT, engine_missing, free_port, free_subnet, stack_file_without_secrets


def apt_sources_uris() -> set[str]:
    """The Debian archive URIs in this machine's apt sources, read without apt."""
    uris: set[str] = set()
    for path in glob.glob("/etc/apt/sources.list.d/*.sources"):
        for stanza in Path(path).read_text().split("\n\n"):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
            if "main" in fields.get("Components", "").split():
                uris.update(fields.get("URIs", "").split())
    for path in ["/etc/apt/sources.list", *glob.glob("/etc/apt/sources.list.d/*.list")]:
        if Path(path).exists():
            for line in Path(path).read_text().splitlines():
                words = re.sub(r"\[.*?\]", "", line).split()
                if words[:1] == ["deb"] and "main" in words[3:]:
                    uris.add(words[1])
    return {u.rstrip("/") for u in uris}


def test_the_debian_mirror_comes_from_apts_own_sources() -> None:
    script = PROJECT / "offline" / "images.sh"
    assert "deb.debian.org" not in script.read_text(), "a mirror host is hard-coded"
    if not apt_sources_uris():
        pytest.skip("this machine has no apt sources to compare with")
    mirror = subprocess.run([str(script), "--print-mirror"], capture_output=True, text=True, check=True)
    assert mirror.stdout.strip().rstrip("/") in apt_sources_uris()
    forced = subprocess.run(
        [str(script), "--print-mirror"], env={**os.environ, "MIRROR": "http://mirror.example/debian"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert forced.stdout.strip() == "http://mirror.example/debian"


def test_test_copies_of_a_stack_file_carry_no_users_secrets(tmp_path: Path) -> None:
    """`make up` then `make test` in one clone: the tests' copies must not need the user's passphrase."""
    stack_file = tmp_path / "Pulumi.local.yaml"
    stack_file.write_text(
        "config:\n  glm:hardware: local\n  glm:apiKeys:\n    local:\n      secure: v1:abc\n"
        "  glm:front:\n    port: 8081\nencryptionsalt: v1:salt\n"
    )
    copied = yaml.safe_load(stack_file_without_secrets(stack_file))
    assert copied == {"config": {"glm:hardware": "local", "glm:front": {"port": 8081}}}


def _stopped_containers() -> dict[str, str]:
    """Created or exited containers, id -> name (a build's leftovers have Docker's random names)."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", "status=created", "--filter", "status=exited",
         "--format", "{{.ID}} {{.Names}}"],
        capture_output=True, text=True,
    )  # fmt: skip
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


@pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))
def test_make_up_on_a_fresh_clone_leaves_it_clean_and_the_key_line_works(tmp_path: Path) -> None:
    clone, state = tmp_path / "glm", tmp_path / "state"
    subprocess.run(["git", "clone", "-q", str(PROJECT), str(clone)], check=True)
    (clone / ".venv").symlink_to(PROJECT / ".venv")  # the requirements are the same; skip the pip run
    name, port = f"glm53-first-{free_port()}", free_port()
    env = {
        **os.environ,
        "GLM_STATE_DIR": str(state),
        "GLM_SET": f"front.port={port} monitoring.port={free_port()} container.name={name} "
        f"container.networkSubnet={free_subnet()}",
    }
    for var in ("PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE"):
        env.pop(var, None)
    before = _stopped_containers()
    try:
        up = subprocess.run(
            ["make", "-C", str(clone), "up"], env=env, capture_output=True, text=True, timeout=900
        )
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        dirty = subprocess.run(
            ["git", "-C", str(clone), "status", "--porcelain"], capture_output=True, text=True
        )
        assert dirty.stdout == "", f"make up modified the clone:\n{dirty.stdout}"
        history = subprocess.run(
            [str(clone / "scripts" / "pulumi.sh"), "stack", "history", "--json", "-s", "local"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert json.loads(history.stdout)[0]["environment"]["git.dirty"] == "false"
        stopped = {i: n for i, n in _stopped_containers().items() if i not in before}
        # Other end-to-end tests run beside this one and stop their own stacks (glm53-review-…):
        # a build's leftover has Docker's random adjective_name, a container of this stack its name.
        leftovers = {i: n for i, n in stopped.items() if re.fullmatch(r"[a-z]+_[a-z]+", n)}
        assert not leftovers, f"the image builds left containers behind: {leftovers}"
        ours = {i: n for i, n in stopped.items() if n.startswith(name)}
        assert not ours, f"containers of the stack are not running: {ours}"

        # The lines `make up` prints, pasted into a new shell that knows nothing of this project.
        key_line = next(line.strip() for line in up.stdout.splitlines() if "export GLM_API_KEY" in line)
        curl_line = [line.strip() for line in up.stdout.splitlines() if line.strip().startswith("curl -s ")][
            -1
        ]
        fresh = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin", "GLM_STATE_DIR": str(state)}
        answer = subprocess.run(
            ["bash", "-c", f"{key_line}\n{curl_line}"], env=fresh, capture_output=True, text=True, timeout=120
        )
        assert answer.returncode == 0 and answer.stdout, (
            f"{key_line}\n{curl_line}\n{answer.stdout}{answer.stderr}"
        )
        assert json.loads(answer.stdout)["choices"][0]["message"]["content"] == "221"

        # Issue 32 item 6: an `up` that changed nothing ran no gate, and says so.
        # Issue 47 item 1: "answers" only after asking, in the same run.
        said = next(line for line in up.stdout.splitlines() if "The local stack answers at" in line)
        assert "(asked just now: 13×17 came back 221 in " in said and said.endswith(
            "; the smoke gate passed)."
        ), said
        again = subprocess.run(
            ["make", "-C", str(clone), "up"], env=env, capture_output=True, text=True, timeout=900
        )
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        said = next(line for line in again.stdout.splitlines() if "The local stack answers at" in line)
        assert "; nothing changed, so no gate ran: the smoke gate last passed at " in said, said
    finally:
        subprocess.run(
            [str(clone / "scripts" / "pulumi.sh"), "destroy", "--yes", "-s", "local"],
            env=env, capture_output=True, timeout=600,
        )  # fmt: skip
        subprocess.run(["docker", "volume", "rm", f"{name}-jit-cache"], capture_output=True)
