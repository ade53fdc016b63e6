"""A refused preflight on two stand-in hosts, through the real engine: what `pulumi up` prints.

Two hosts of an a800 rehearsal stack refuse for real (issue 32, item 7): the first has no NVIDIA
container runtime (no hook on PATH, no ``nvidia`` runtime in its engine, no CDI spec), the second a
half-copied weights folder (its last shard cut short, as an interrupted copy leaves it). `up` must
print each problem once, on one line naming the host, the config key and the fix, and never the
preflight script itself. Skipped, with the reason, without the engine or network namespaces.

    python -m pytest -p no:xdist -s tests/test_preflight_refusal_engine.py   # prints the figures
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.render.preflight import PREFLIGHT_SH, WEIGHTS_CHECK
from tests.engine import PulumiProject, engine_missing
from tests.multihost import host_entry, set_config
from tests.standin_host import StandinHost, unavailable_reason
from tests.weights_folder import write_weights

pytestmark = pytest.mark.skipif(
    engine_missing() is not None or unavailable_reason() is not None,
    reason=str(engine_missing() or unavailable_reason()),
)

STACK = "a800-refused"
WEIGHTS_GIB = 306.0  # the a800 profile's glm:model.weightsGib (seed a800-sm80-production.txt)
SHARDS = 2


@pytest.fixture(scope="module")
def hosts() -> Iterator[tuple[StandinHost, StandinHost, Path]]:
    """(no runtime, half-copied weights, glm:model.hostDir): one path, as on a real fleet, whose
    folder each host has its own copy of; the second host's is cut short."""
    # Under /var/tmp: the hosts' deploy user cannot enter pytest's folders (0700, root's).
    folders = Path(tempfile.mkdtemp(prefix="glm-preflight-refusal-", dir="/var/tmp"))
    folders.chmod(0o755)
    shared, half = folders / "models", folders / "half-copied"
    write_weights(shared / "GLM-5.3-Flash", WEIGHTS_GIB, SHARDS)
    write_weights(half / "GLM-5.3-Flash", WEIGHTS_GIB, SHARDS, cut_short=True)
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, folders, ignore_errors=True)
        no_runtime = stack.enter_context(StandinHost.create(lifetime_s=1800))
        half_copied = stack.enter_context(StandinHost.create(lifetime_s=1800))
        (no_runtime.root / "bin" / "nvidia-container-runtime-hook").unlink()
        # The second host's sessions (sshd's private mount namespace) see the half-copied folder
        # at the same path: the weights live on each host's own disk.
        sshd = half_copied.processes["sshd"].pid
        subprocess.run(
            ["nsenter", f"--mount=/proc/{sshd}/ns/mnt", "mount", "--bind", str(half), str(shared)],
            check=True, capture_output=True, timeout=10,
        )  # fmt: skip
        yield no_runtime, half_copied, shared


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory, hosts: tuple[StandinHost, StandinHost, Path]) -> str:
    """What `pulumi up` printed (stdout and stderr) for the stack on both hosts."""
    no_runtime, half_copied, models = hosts
    project = PulumiProject.copy_of_repo(tmp_path_factory.mktemp("refused") / "glm")
    (project.root / f"Pulumi.{STACK}.yaml").write_text((project.root / "Pulumi.a800.yaml").read_text())
    project.init_stack(
        STACK,
        config={
            "glm:rehearsal.enabled": "true",
            "glm:model.hostDir": str(models),
            "glm:container.name": "glm53-refused",
        },
        secrets={"glm:apiKeys.e2e": "sk-refused-7c41d2e9a0b35f86"},
    )
    set_config(project, STACK, "glm:target", {"hosts": [host_entry(no_runtime), host_entry(half_copied)]})
    out = project.run("up", "--yes", "--skip-preview", "-s", STACK, check=False)
    assert "error:" in out and "Resources:" in out, out[-3000:]
    print_figure("refused preflight on two stand-in hosts", out)
    return out


def print_figure(what: str, out: str) -> None:
    """The figure (bytes and lines `up` printed), then the output itself."""
    print(f"\n{what}: `pulumi up` printed {len(out.encode())} bytes, {len(out.splitlines())} lines\n{out}")


def test_each_problem_is_printed_once_naming_host_key_and_fix(
    refused: str, hosts: tuple[StandinHost, StandinHost, Path]
) -> None:
    no_runtime, half_copied, models = hosts
    runtime = [line for line in refused.splitlines() if "no NVIDIA container runtime" in line]
    assert len(runtime) == 1, runtime
    assert no_runtime.name in runtime[0] and no_runtime.address in runtime[0], runtime
    assert "glm:hardware a800" in runtime[0] and "Fix: install nvidia-container-toolkit" in runtime[0]

    shard = models / "GLM-5.3-Flash" / f"model-{SHARDS:05d}-of-{SHARDS:05d}.safetensors"
    cut = [line for line in refused.splitlines() if f"{shard} is " in line and "cut short" in line]
    assert len(cut) == 1, cut
    assert half_copied.name in cut[0] and half_copied.address in cut[0], cut
    assert "Fix: copy that shard again into glm:model.hostDir/directory" in cut[0], cut
    # The shards' total against the size the profile says.
    short = [line for line in refused.splitlines() if "glm:model.weightsGib says 306 GiB" in line]
    assert len(short) == 1 and half_copied.name in short[0] and "Fix: finish copying" in short[0], short


SCRIPT_MARKERS = ("read -r -d '' NVIDIA_SMI_AWK", "check_container_runtime() {", "def shard_problem(path")


def test_the_preflight_script_is_not_printed(refused: str) -> None:
    script = PREFLIGHT_SH.read_text() + WEIGHTS_CHECK.read_text()
    for marker in SCRIPT_MARKERS:
        assert marker in script
        assert marker not in refused and marker.replace("'", "\\'") not in refused


def test_no_traceback_under_the_refusal(refused: str) -> None:
    """The engine interrupts the program when the preflight fails; it printed a KeyboardInterrupt
    traceback (about 65 lines, twice) under the problems."""
    assert "Traceback" not in refused and "KeyboardInterrupt" not in refused


def test_a_local_refusal_is_printed_once_without_the_script(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The local stack's preflight runs on this machine (pulumi-command's local Command): the
    same, with the weights folder missing. (No stand-in host needed, but the module needs them.)"""
    empty = tmp_path_factory.mktemp("no-weights")
    project = PulumiProject.copy_of_repo(tmp_path_factory.mktemp("local-refused") / "glm")
    project.init_local_stack(
        "glm53-refused", secrets={"glm:apiKeys.e2e": "sk-refused-0d5e8c1b7a4f2963"},
        config={"glm:model.hostDir": str(empty)},
    )  # fmt: skip
    out = project.run("up", "--yes", "--skip-preview", "-s", "local", check=False)
    print_figure("refused local preflight", out)
    folder = empty / "GLM-5.3-Flash-sim"
    missing = [line for line in out.splitlines() if f"{folder}/config.json is missing" in line]
    assert len(missing) == 1, out[-3000:]
    assert "glm:target.hosts[localhost] (this machine)" in missing[0] and "Fix:" in missing[0], missing
    assert not [m for m in SCRIPT_MARKERS if m in out] and "Traceback" not in out, out[-3000:]
