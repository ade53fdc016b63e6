"""The semantic probe's TLS: the stack's certificate set as a stack file holds it."""

from __future__ import annotations

import subprocess

from tests.engine import PulumiProject

NAME = "glm-front.test"
"""The certificate's only name: the gate connects to 127.0.0.1, the probe to the front's container."""


def set_pem(project: PulumiProject, key: str, pem: str, secret: bool = False) -> None:
    """A PEM value begins with dashes: it goes after ``--``, where the CLI reads no flag."""
    flags = ["--secret"] if secret else ["--path"]
    argv = ["pulumi", "config", "set", *flags, key, "-s", "local", "--non-interactive", "--", pem]
    done = subprocess.run(argv, cwd=project.root, env=project.env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
