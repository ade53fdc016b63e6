"""ServingImage: the image the serving container runs, on either target.

Either built on a Docker engine from a context (a800: base vLLM image + the patch layer; local: the
vLLM-protocol simulator), tagged with a content hash of the whole context so that any changed patch
gives a new tag and replaces the container; or an upstream reference pulled onto the host (ascend,
rtx5090). A Docker host runs it where it was built; Kubernetes builds it on ``glm:target.hosts[0]``'s
engine and loads it onto the nodes (components/kubernetes/images.py).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_docker as docker

from components.config import ImageConfig

PROJECT_DIR = Path(__file__).resolve().parents[2]


def context_hash(context: Path) -> str:
    """sha256 over every file's relative path and bytes, in sorted order: the image tag.

    ``__pycache__`` is skipped (and kept out of the build by .dockerignore): running tests must not
    change the tag.
    """
    digest = hashlib.sha256()
    files = (p for p in context.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in sorted(files):
        digest.update(path.relative_to(context).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def build_tag(repository: str, context: str) -> str:
    """``repository:<content hash of the context>`` — one hash per program run, shared by the
    image build and the served-model fingerprint."""
    return f"{repository}:{context_hash(PROJECT_DIR / context)}"


@dataclass(frozen=True)
class PatchEntry:
    file: str
    target: str


def read_manifest(patches_dir: Path) -> list[PatchEntry]:
    """MANIFEST lines: ``<patch file> <target path under vLLM's site-packages>``; # comments."""
    manifest = patches_dir / "MANIFEST"
    if not manifest.exists():
        return []
    entries = []
    for line in manifest.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            file, target = line.split()
            entries.append(PatchEntry(file, target))
    return entries


def missing_patches(patches_dir: Path) -> str | None:
    """Why the patch layer is incomplete, or None when every listed file is present."""
    entries = read_manifest(patches_dir)
    if not entries:
        return f"{patches_dir}/MANIFEST lists no patch files"
    absent = [e.file for e in entries if not (patches_dir / e.file).is_file()]
    if absent:
        return (
            f"{len(absent)} of {len(entries)} patch files are missing from {patches_dir}: {', '.join(absent)}"
        )
    return None


class ServingImage(pulumi.ComponentResource):
    """The serving image on the target host; ``ref`` is what the container runs."""

    ref: pulumi.Output[str]
    """Image reference the container uses: the content-hash tag, or the pulled image's ID."""
    verified_ref: pulumi.Output[str]
    """What a promotion pins: the content-hash tag, or the pulled image's repo digest."""

    def __init__(
        self,
        name: str,
        image: ImageConfig,
        pinned: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
        platform: str | None = None,
    ) -> None:
        """``pinned``: a promoted stack pulls the source's verified digest instead of the tag;
        ``platform``: what a build is for, where known (``HostConfig.build_platform``)."""
        super().__init__("glm:image:ServingImage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        build = image.to_build
        if build is not None:
            if build.patches_dir:
                problem = missing_patches(PROJECT_DIR / build.patches_dir)
                if problem:
                    pulumi.log.warn(
                        f"{problem}. Put the patch files in {build.patches_dir}/ and list each in its "
                        "MANIFEST as `<file> <target under site-packages>`; the image build refuses "
                        "to produce an unpatched image until then.",
                        resource=self,
                    )
            tag = build_tag(build.repository, build.context)
            built = docker.Image(
                f"{name}-build",
                image_name=tag,
                build=docker.DockerBuildArgs(
                    # Relative paths: the state must not depend on where the repo is cloned.
                    context=build.context,
                    dockerfile=build.dockerfile,
                    args={"BASE_IMAGE": build.base_image},
                    builder_version=docker.BuilderVersion.BUILDER_BUILD_KIT,
                    platform=platform,
                ),
                skip_push=True,
                opts=child,
            )
            self.ref = self.verified_ref = built.image_name
        else:
            assert image.reference is not None
            pulled = docker.RemoteImage(
                f"{name}-pull",
                name=pinned if pinned is not None else image.reference,
                keep_locally=image.keep_locally,
                opts=child,
            )
            self.ref = pulled.image_id
            # Images imported locally have no repo digest; their ID is then the pin.
            self.verified_ref = pulumi.Output.all(pulled.repo_digest, pulled.image_id).apply(
                lambda digest_and_id: digest_and_id[0] or digest_and_id[1]
            )
        self.register_outputs({"ref": self.ref, "verified_ref": self.verified_ref})
