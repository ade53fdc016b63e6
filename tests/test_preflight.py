"""The preflight run for real with bash against what real hosts print (tests/smi_fixtures.py: the
H200 captures, 8-GPU boxes derived from them, a real 8-NPU npu-smi), and where it runs (mocks).

Expected figures come from the fixtures: 143771 MiB total and 143156 free (idle H200), 81190 free and
pid 828 python3 61958 MiB (busy), 580.159.04 (driver); 0.95 is the a800 profile's seed GMU.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from components.config import StackConfig, build_stack_config
from components.render.preflight import CONTEXT_MIB
from tests.conftest import Deployment, unwrap
from tests.host_scripts import HOST, a800, fake_tool, preflight_of, run, weights
from tests.smi_fixtures import (
    H200,
    H200_FACTS,
    eight_gpus,
    npu_smi_info,
    render_h200_scripts,
    without_comments,
)

NEED = int(0.95 * 143771 + CONTEXT_MIB + 0.999)


def nvidia_box(tmp_path: Path, runtime: bool = True, **variant: object) -> Path:
    """``tmp_path/bin``: the fake nvidia-smi of ``eight_gpus(**variant)`` and, with ``runtime``,
    NVIDIA's runtime hook (the preflight only looks for it on PATH)."""
    bin_dir = tmp_path / "bin"
    eight_gpus(**variant).install(bin_dir)
    if runtime:
        fake_tool(bin_dir, "nvidia-container-runtime-hook", "exit 0")
    return bin_dir


def test_eight_idle_h200s_pass(tmp_path: Path) -> None:
    weights(tmp_path)
    result = run(preflight_of(a800(tmp_path), H200_FACTS, "h200"), nvidia_box(tmp_path))
    assert result.returncode == 0, result.stderr
    listed = " ".join(f"{i}:143156/{NEED}" for i in range(8))
    assert (
        f"preflight: 8 GPU(s), driver 580.159.04, free/needed MiB of listed GPUs: {listed}" in result.stdout
    )
    assert "NVIDIA container runtime:" in result.stdout and "weights check:" in result.stdout


def test_a_gpu_held_by_another_process_is_named_with_the_holder(tmp_path: Path) -> None:
    weights(tmp_path)
    result = run(preflight_of(a800(tmp_path), H200_FACTS, "h200"), nvidia_box(tmp_path, busy=(3,)))
    assert result.returncode == 1
    assert (
        f"GPU 3 (NVIDIA H200) has 81190 MiB free; glm:serving.gpuMemoryUtilization 0.95 x 143771 MiB + "
        f"{CONTEXT_MIB} MiB for vLLM's CUDA context needs {NEED} MiB; held by pid 828 python3 61958 MiB"
    ) in result.stderr
    assert "lower glm:serving.gpuMemoryUtilization to 0.56 or less" in result.stderr  # (81190-528)/143771


@pytest.mark.parametrize(
    ("process", "shown"),
    [
        ("\x1b]0;owned\x07\x1b[2Jpython3", "?]0;owned??[2Jpython3"),
        ("py\\nthon, 3", "py\\nthon, 3"),  # a backslash and an n, which awk -v made a newline
        ("python3\n0, x, 1 MiB", "python3?0, x, 1 MiB"),
        ("\u202e\xff", "?????"),  # right-to-left override and ÿ: five bytes in UTF-8
    ],
    ids=["terminal-escapes", "backslash-n", "newline", "non-ascii"],
)
def test_the_holder_is_named_by_uuid_in_printable_characters_only(
    tmp_path: Path, process: str, shown: str
) -> None:
    """Issue 33 finding 5: whatever a process's name holds, GPU 3's holder is the real busy line's
    pid and memory (on GPU 3's UUID), and nothing but printable ASCII reaches the terminal."""
    weights(tmp_path)
    box = nvidia_box(tmp_path, busy=(3,), process=process)
    result = run(preflight_of(a800(tmp_path), H200_FACTS, "h200"), box)
    assert result.returncode == 1
    assert "GPU 3 (NVIDIA H200) has 81190 MiB free;" in result.stderr
    assert f"; held by pid 828 {shown} 61958 MiB. Fix:" in result.stderr
    assert all(" " <= c <= "~" for c in (result.stdout + result.stderr).replace("\n", ""))


def test_an_index_the_box_lacks_is_refused(tmp_path: Path) -> None:
    weights(tmp_path)
    config = a800(tmp_path, container={"accelerators": [0, 1, 2, 3, 4, 5, 6, 9]})
    result = run(preflight_of(config, H200_FACTS, "h200"), nvidia_box(tmp_path))
    assert result.returncode == 1
    assert (
        "glm:container.accelerators lists GPU 9 but nvidia-smi shows 8 GPU(s), indices 0,1,2,3,4,5,6,7"
        in (result.stderr)
    )


def test_eight_listed_on_the_real_one_gpu_host(tmp_path: Path) -> None:
    weights(tmp_path)
    result = run(preflight_of(a800(tmp_path), H200_FACTS, "h200"), nvidia_box(tmp_path, count=1))
    assert result.returncode == 1
    assert "lists GPU 1,2,3,4,5,6,7 but nvidia-smi shows 1 GPU(s), indices 0" in result.stderr


def test_the_a800_profile_refuses_an_h200_box(tmp_path: Path) -> None:
    weights(tmp_path)
    result = run(preflight_of(a800(tmp_path)), nvidia_box(tmp_path))
    assert result.returncode == 1
    assert (
        "GPU 0,1,2,3,4,5,6,7: NVIDIA H200 (compute capability 9.0); glm:hardware a800 is for A800 "
        "(compute capability 8.0)"
    ) in result.stderr


def test_a_driver_older_than_the_images_cuda_is_refused(tmp_path: Path) -> None:
    weights(tmp_path)
    bin_dir = nvidia_box(tmp_path, driver="550.54.15")  # the real row with an older driver
    result = run(preflight_of(a800(tmp_path), H200_FACTS, "h200"), bin_dir)
    assert result.returncode == 1
    assert (
        "driver 550.54.15 is older than 580.65.06, the oldest that runs the image's CUDA 13.0"
        in result.stderr
    )


def test_no_container_runtime_is_refused(tmp_path: Path) -> None:
    weights(tmp_path)
    bin_dir = nvidia_box(tmp_path, runtime=False)
    result = run(preflight_of(a800(tmp_path), H200_FACTS, "h200"), bin_dir)
    assert result.returncode == 1
    assert "no NVIDIA container runtime" in result.stderr and "nvidia-ctk runtime configure" in result.stderr


def test_a_half_copied_weights_folder_is_refused(tmp_path: Path) -> None:
    folder = weights(tmp_path, cut_short=True)
    result = run(preflight_of(a800(tmp_path), H200_FACTS, "h200"), nvidia_box(tmp_path))
    assert result.returncode == 1
    assert (
        f"{folder}/model-00002-of-00002.safetensors is 76.50 GiB, its header says 153.00 GiB: the copy was cut short"
    ) in result.stderr
    assert "total 229.5 GiB, glm:model.weightsGib says 306 GiB" in result.stderr


def test_weights_of_another_model_are_refused(tmp_path: Path) -> None:
    weights(tmp_path, config={"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    result = run(preflight_of(a800(tmp_path), H200_FACTS, "h200"), nvidia_box(tmp_path))
    assert result.returncode == 1
    assert (
        "says model_type 'llama', architectures ['LlamaForCausalLM']; glm:hardware's profile serves 'glm5_next'"
        in (result.stderr)
    )


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    weights(tmp_path, cut_short=True)
    config = a800(tmp_path, container={"accelerators": [0, 1, 2, 3, 4, 5, 6, 9]})
    result = run(preflight_of(config), nvidia_box(tmp_path, runtime=False, busy=(3,), driver="470.82.01"))
    assert result.returncode == 1
    for part in ("GPU 3 (NVIDIA H200) has 81190 MiB free", "lists GPU 9", "glm:hardware a800 is for A800",
                 "driver 470.82.01 is older than 525.60.13", "no NVIDIA container runtime", "the copy was cut short",
                 "glm:model.weightsGib says 306 GiB"):  # fmt: skip
        assert part in result.stderr, part


def test_preflight_fails_without_nvidia_smi(tmp_path: Path) -> None:
    weights(tmp_path)
    script = preflight_of(a800(tmp_path))
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert result.returncode == 1
    assert "nvidia-smi not found on the host" in result.stderr


def ascend_config(tmp_path: Path) -> StackConfig:
    """The ascend profile with its weights (the a800 folder layout) in ``tmp_path``."""
    weights(tmp_path)
    return build_stack_config(
        {
            "hardware": "ascend",
            "target": HOST,
            "front": {"allowPlainHttp": True},
            "model": {"hostDir": str(tmp_path), "directory": "GLM-5.3-Flash"},
        }
    )


def test_ascend_reads_the_real_npu_smi_table(tmp_path: Path) -> None:
    """The real 8-NPU 910B2 box of vllm-ascend#5021, NPUs 1-7 busy: wrong chip and busy HBM, with pids.
    This machine has no /dev/davinci*, so that is reported too (all problems at once)."""
    (tmp_path / "info.txt").write_text(npu_smi_info())
    fake_tool(tmp_path / "bin", "npu-smi", f'[ "$1" = info ] && cat {tmp_path}/info.txt')
    result = run(preflight_of(ascend_config(tmp_path)), tmp_path / "bin")
    assert result.returncode == 1
    assert "NPU 0,1,2,3,4,5,6,7: 910B2; glm:hardware ascend is for 910B3" in result.stderr
    assert (
        "NPU 1 (910B2) has 61258 of 65536 MB HBM in use (3500 MB when idle); glm:serving.gpuMemoryUtilization "
        "0.95 needs 62260 MB; held by pid 30496 328 MB, pid 30336 3790 MB"
    ) in result.stderr
    assert "NPU 0 (910B2)" not in result.stderr  # 3414 MB in use, no process: the driver's own
    assert "glm:container.accelerators lists NPU 0,1,2,3,4,5,6,7 but /dev/davinci" in result.stderr


def test_ascend_idle_910b3_passes_the_npu_checks(tmp_path: Path) -> None:
    (tmp_path / "info.txt").write_text(npu_smi_info(chip="910B3", idle=True))
    fake_tool(tmp_path / "bin", "npu-smi", f'[ "$1" = info ] && cat {tmp_path}/info.txt')
    result = run(preflight_of(ascend_config(tmp_path)), tmp_path / "bin")
    assert (
        "preflight: 8 NPU(s), HBM in use/total MB of listed NPUs: "
        + " ".join(f"{i}:3414/65536" for i in range(8))
        in result.stdout
    )
    assert "910B3" not in result.stderr and "HBM in use" not in result.stderr


def test_ascend_preflight_writes_no_fixed_tmp_file(tmp_path: Path) -> None:
    """A fixed /tmp path can be a planted symlink (another user's file gets overwritten): mktemp."""
    fake_tool(tmp_path / "bin", "npu-smi", "echo 'npu-smi: driver not loaded' >&2; exit 3")
    script = preflight_of(ascend_config(tmp_path))
    assert "glm53-npu-smi.txt" not in script  # the output stays in a variable: no file in /tmp at all
    result = run(script, tmp_path / "bin")
    assert result.returncode == 1
    assert "npu-smi info failed: npu-smi: driver not loaded" in result.stderr


def test_preflight_refuses_too_little_disk(tmp_path: Path) -> None:
    weights(tmp_path)
    config = a800(tmp_path, preflight={"minFreeDiskGib": 10**7})
    result = run(preflight_of(config, H200_FACTS, "h200"), nvidia_box(tmp_path))
    assert result.returncode == 1
    assert (
        "the weights need 10000000 GiB (glm:model.weightsGib / glm:preflight.minFreeDiskGib)" in result.stderr
    )


def test_preflight_refuses_a_small_dev_shm(tmp_path: Path) -> None:
    weights(tmp_path)
    config = a800(tmp_path, preflight={"minShmGib": 10**6})
    result = run(preflight_of(config, H200_FACTS, "h200"), nvidia_box(tmp_path))
    assert result.returncode == 1
    assert "glm:preflight.minShmGib asks for 1000000 GiB" in result.stderr


def test_local_preflight_runs_on_this_machine() -> None:
    config = build_stack_config({"hardware": "local"})
    if not Path(config.model.host_path, "config.json").exists():
        pytest.skip(f"the local weights fixture {config.model.host_path} is missing (make test writes it)")
    result = run(preflight_of(config))
    assert result.returncode == 0, result.stderr
    assert "weights check:" in result.stdout and "GPU" not in result.stdout


def test_the_scripts_run_on_the_real_h200_are_what_the_renderer_makes() -> None:
    """rendered/ is what run-on-h200.sh ran; its results are in the fixtures beside it. Its commands,
    that is: comments renamed since do not make it another script."""
    for name, script in render_h200_scripts().items():
        ran = without_comments((H200 / "rendered" / name).read_text())
        assert ran == without_comments(script), f"re-render {name} and run it again"


@pytest.mark.parametrize("stack", ["a800", "ascend", "rtx5090"])
def test_preflight_runs_on_the_host_over_ssh(deployed: dict[str, Deployment], stack: str) -> None:
    check = deployed[stack].one("command:remote:Command", "-preflight-check").inputs
    assert unwrap(check["connection"])["user"] == "deploy"
    tool = "npu-smi" if stack == "ascend" else "nvidia-smi"
    assert tool in check["stdin"] and tool not in check["create"]


SHARED_SHA256 = {
    "nvidia-smi-idle.txt": "4a9fae9c421c03c2f7ca18f2511977b8878790bd611e9b2403e6a10488188085",
    "nvidia-smi-busy.txt": "d3abfe9a5a4efa37ec4f62764b30838530c56770bc26772197b66f28e3c8ce25",
}
"""``sha256sum`` of ../shared/fixtures/nvidia-h200/ as the H200 host wrote them: the copies here
must be those bytes, wherever this checkout lives (a CI clone has no shared/ beside it)."""


@pytest.mark.parametrize("name", sorted(SHARED_SHA256))
def test_the_h200_captures_are_shareds_verbatim(name: str) -> None:
    assert hashlib.sha256((H200 / name).read_bytes()).hexdigest() == SHARED_SHA256[name]


RERUN = H200 / "rerun-2026-12-03"
HOST_PREFIX = "preflight on glm:target.hosts[gpu01] (deploy@gpu01.example.internal:22): "


def _outcomes(path: Path) -> list[tuple[str, list[str], str]]:
    """Each ``### title`` section of a run's file: (title, its lines, its exit line)."""
    found: list[tuple[str, list[str], str]] = []
    for block in path.read_text().split("### ")[1:]:
        title, *lines = block.rstrip("\n").split("\n")
        ends = [line for line in lines if line.startswith("exit=")]
        found.append(
            (
                title,
                [line for line in lines if not line.startswith("exit=")],
                ends[0].split()[0] if ends else "",
            )
        )
    return found


@pytest.mark.parametrize(
    "name", ["preflight-h200-idle.txt", "preflight-h200-busy.txt", "preflight-h200-weights.txt"]
)
def test_on_the_real_h200_the_rerun_names_the_host_and_decides_as_before(name: str) -> None:
    """Issue 32 item 7 changed what the preflight prints, not what it checks: the rendered scripts ran
    again on the real H200 (2026-12-03, rerun-2026-12-03/, same run-on-h200.sh). Every problem line
    now names the host, and each script exits as it did on 2026-12-01 with the same problems (the
    holder's pid and the GPU's UUID are the new machine's)."""
    before, after = _outcomes(H200 / name), _outcomes(RERUN / name)
    assert [(t, e) for t, _, e in after] == [(t, e) for t, _, e in before]
    for (title, old, _), (_, new, _) in zip(before, after, strict=True):
        problems = [line for line in new if "Fix:" in line]
        assert all(line.startswith(HOST_PREFIX) for line in problems), (title, problems)

        def bare(line: str) -> str:
            line = line.removeprefix(HOST_PREFIX).removeprefix("preflight: ")
            line = line.replace(
                "Fix: copy that shard again into glm:model.hostDir/directory", "Fix: copy that shard again"
            )
            return " ".join(
                w for w in line.split() if not w.startswith("GPU-") and not w.strip(",").isdigit()
            )

        assert [bare(line) for line in new if "Fix:" in line] == [
            bare(line) for line in old if "Fix:" in line
        ], title
