"""The a800 patch layer: the build refuses an unpatched image; the tag follows the content."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.serving.image import context_hash, missing_patches
from tests.conftest import PROJECT, Deployment, run_program, serving_container

APPLY = PROJECT / "images" / "a800" / "apply_patches.py"


def patches(tmp_path: Path, manifest: str, files: dict[str, str]) -> Path:
    folder = tmp_path / "patches"
    folder.mkdir()
    (folder / "MANIFEST").write_text(manifest)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def site(tmp_path: Path) -> Path:
    target = tmp_path / "site-packages" / "vllm" / "model_executor"
    target.mkdir(parents=True)
    (target / "sparse_mla.py").write_text("original\n")
    return tmp_path / "site-packages"


def apply(folder: Path, site_packages: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(APPLY), str(folder), str(site_packages)], capture_output=True, text=True
    )


def test_the_shipped_manifest_lists_nothing_and_preview_says_where_patches_go() -> None:
    problem = missing_patches(PROJECT / "images" / "a800" / "patches")
    assert problem is not None and "MANIFEST lists no patch files" in problem


def test_build_step_refuses_an_empty_manifest(tmp_path: Path) -> None:
    result = apply(patches(tmp_path, "# nothing yet\n", {}), site(tmp_path))
    assert result.returncode == 1
    assert "refusing to build an unpatched image" in result.stderr


def test_build_step_refuses_a_listed_file_that_is_absent(tmp_path: Path) -> None:
    folder = patches(tmp_path, "sparse_mla.py vllm/model_executor/sparse_mla.py\n", {})
    result = apply(folder, site(tmp_path))
    assert result.returncode == 1
    assert "sparse_mla.py: listed in MANIFEST but not in images/a800/patches/" in result.stderr
    assert missing_patches(folder) == f"1 of 1 patch files are missing from {folder}: sparse_mla.py"


def test_build_step_refuses_a_target_vllm_does_not_have(tmp_path: Path) -> None:
    folder = patches(tmp_path, "x.py vllm/not_there.py\n", {"x.py": "patched\n"})
    result = apply(folder, site(tmp_path))
    assert result.returncode == 1 and "target vllm/not_there.py does not exist" in result.stderr


def test_build_step_copies_each_patch_over_vllm(tmp_path: Path) -> None:
    folder = patches(
        tmp_path,
        "sparse_mla.py vllm/model_executor/sparse_mla.py  # sm_80 path\n",
        {"sparse_mla.py": "patched\n"},
    )
    site_packages = site(tmp_path)
    result = apply(folder, site_packages)
    assert result.returncode == 0, result.stderr
    assert (site_packages / "vllm/model_executor/sparse_mla.py").read_text() == "patched\n"
    assert missing_patches(folder) is None


def test_tag_changes_when_a_patch_changes_and_ignores_pycache(tmp_path: Path) -> None:
    context = tmp_path / "a800"
    shutil.copytree(PROJECT / "images" / "a800", context)
    before = context_hash(context)
    (context / "__pycache__").mkdir()
    (context / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert context_hash(context) == before
    (context / "patches" / "sparse_mla.py").write_text("v1\n")
    with_patch = context_hash(context)
    (context / "patches" / "sparse_mla.py").write_text("v2\n")
    assert len({before, with_patch, context_hash(context)}) == 3


@pytest.mark.skipif(
    subprocess.run(
        ["docker", "image", "inspect", "glm53-local/python:bookworm"], capture_output=True
    ).returncode
    != 0,
    reason="needs dockerd and the local base image (offline/images.sh)",
)
def test_real_docker_build_refuses_an_unpatched_image(tmp_path: Path) -> None:
    context = tmp_path / "a800"
    shutil.copytree(PROJECT / "images" / "a800", context)
    result = subprocess.run(
        ["docker", "build", "--force-rm", "--build-arg", "BASE_IMAGE=glm53-local/python:bookworm", "-t", "glm53-unpatched-test", str(context)],
        capture_output=True, text=True, env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/bin:/bin:/usr/sbin"}, timeout=300,
    )  # fmt: skip
    subprocess.run(["docker", "image", "rm", "glm53-unpatched-test"], capture_output=True)
    assert result.returncode != 0
    assert "refusing to build an unpatched image" in result.stdout + result.stderr


def test_a800_builds_the_patched_image_with_a_content_hash_tag(
    deployed: dict[str, Deployment],
) -> None:
    image = deployed["a800"].one("docker:index/image:Image", "-image-build").inputs
    assert image["imageName"].startswith("glm53-flash-sm80:")
    assert len(image["imageName"].split(":")[1]) == 16
    assert image["skipPush"] is True
    assert image["build"]["context"] == "images/a800"
    assert image["build"]["args"] == {"BASE_IMAGE": "vllm/vllm-openai:v0.33.0"}
    assert serving_container(deployed["a800"])["image"] == image["imageName"]


@pytest.mark.parametrize(
    ("stack", "reference"),
    [
        ("ascend", "quay.io/ascend/vllm-ascend:glm-5.3-flash"),
        ("rtx5090", "vllm/vllm-openai:nightly-385dce36b"),
    ],
)
def test_upstream_images_are_pulled_and_pinned(
    deployed: dict[str, Deployment], stack: str, reference: str
) -> None:
    pulled = deployed[stack].one("docker:index/remoteImage:RemoteImage", "-pull").inputs
    assert pulled["name"] == reference
    assert pulled["keepLocally"] is True
    assert serving_container(deployed[stack])["image"].startswith("sha256:")


def test_prebuilt_a800_image_instead_of_the_build() -> None:
    deployment = run_program(
        "a800", overrides={"glm:image": {"reference": "registry.example/glm53-flash-sm80@sha256:" + "e" * 64}}
    )
    assert not deployment.one("glm:image:ServingImage", "-image").name.endswith("-build")
    # Only the image the stack always builds itself remains: the probe's (the usage meter is the
    # front's nginx, its image pulled).
    assert sorted(r.name for r in deployment.of_type("docker:index/image:Image")) == [
        "a800-semantic-probe-image"
    ]
