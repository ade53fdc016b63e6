"""Copy the sm_80 patch files over vLLM's installed sources, as listed in patches/MANIFEST.

MANIFEST lines: ``<patch file> <target path relative to site-packages>``; ``#`` starts a comment.
Fails (and so fails the image build) when the manifest lists nothing, a listed file is missing,
or a target does not already exist in the installed vLLM — a patch must replace a real file.
"""

import shutil
import sys
import sysconfig
from pathlib import Path


def main(patches: Path, site_packages: Path) -> int:
    manifest = patches / "MANIFEST"
    entries = []
    if manifest.exists():
        for line in manifest.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                entries.append(line.split())
    if not entries:
        print(
            f"refusing to build an unpatched image: {manifest} lists no patch files. "
            "Put the sm_80 patch files in images/a800/patches/ and list each as "
            "`<file> <target under site-packages>`.",
            file=sys.stderr,
        )
        return 1
    problems = []
    for file, target in entries:
        if not (patches / file).is_file():
            problems.append(f"{file}: listed in MANIFEST but not in images/a800/patches/")
        elif not (site_packages / target).is_file():
            problems.append(f"{file}: target {target} does not exist under {site_packages}")
    if problems:
        print("refusing to build a partly patched image:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    for file, target in entries:
        shutil.copyfile(patches / file, site_packages / target)
        print(f"patched {target} <- {file}")
    return 0


if __name__ == "__main__":
    site = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(sysconfig.get_paths()["purelib"])
    sys.exit(main(Path(sys.argv[1]), site))
