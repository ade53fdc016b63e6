"""What ``--stack`` reads from Pulumi: the front URL, an API key, the Prometheus URL, the profile.

The ``pulumi`` CLI is run with the caller's environment (backend, passphrase), e.g.
``--pulumi scripts/pulumi.sh`` for this project's. The key is read from
``pulumi config get --path glm:apiKeys.<name>`` into memory only: it is never printed, logged or
written to the result files.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

FEDERATE_MATCH = '{__name__=~"vllm:.*"}'


class StackError(Exception):
    """A Pulumi look-up failed; the message names the command and what to do."""


@dataclass
class StackInfo:
    endpoint: str | None = None
    api_key: str | None = field(default=None, repr=False)
    key_name: str | None = None
    metrics_url: str | None = None
    profile: str | None = None
    max_num_seqs: int | None = None


def federate_url(prometheus_url: str) -> str:
    """Prometheus's /federate for every vLLM series (the text format, with timestamps).

    >>> federate_url("http://atlas-01:9090")
    'http://atlas-01:9090/federate?match[]=%7B__name__%3D~%22vllm%3A.%2A%22%7D'
    """
    return f"{prometheus_url.rstrip('/')}/federate?match[]={quote(FEDERATE_MATCH, safe='')}"


def max_num_seqs_from(vllm_flags: Any) -> int | None:
    """``--max-num-seqs`` of the serving container (stack output ``vllmFlags``: each rendered flag
    and its value).

    >>> max_num_seqs_from({"--max-num-seqs": "16", "--port": "8000"}), max_num_seqs_from({})
    (16, None)
    """
    value = vllm_flags.get("--max-num-seqs") if isinstance(vllm_flags, dict) else None
    return int(value) if isinstance(value, str) and value.isdigit() else None


class PulumiStack:
    def __init__(self, stack: str, pulumi: str = "pulumi"):
        self.stack = stack
        self.argv0 = shlex.split(pulumi)
        if not shutil.which(self.argv0[0]):
            raise StackError(
                f"{self.argv0[0]!r} is not on PATH: install the Pulumi CLI (make engine), pass "
                "--pulumi scripts/pulumi.sh, or give --endpoint URL --api-key-env VAR instead of --stack"
            )

    def _run(self, *args: str, secret: bool = False) -> str:
        argv = [*self.argv0, *args, "-s", self.stack]
        shown = " ".join(argv)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StackError(f"`{shown}` failed: {exc}") from None
        if done.returncode != 0:
            detail = "" if secret else " ".join(done.stderr.split())[:300]
            raise StackError(f"`{shown}` exited {done.returncode}: {detail}")
        return done.stdout.strip()

    def read(self, key_name: str | None = None) -> StackInfo:
        outputs = json.loads(self._run("stack", "output", "--json") or "{}")
        endpoint = outputs.get("endpoint")
        if not isinstance(endpoint, str) or not endpoint:
            raise StackError(f"stack {self.stack} has no `endpoint` output: has `pulumi up` run?")
        info = StackInfo(endpoint=endpoint)
        if isinstance(outputs.get("prometheusUrl"), str):
            info.metrics_url = federate_url(outputs["prometheusUrl"])
        info.max_num_seqs = max_num_seqs_from(outputs.get("vllmFlags"))
        try:
            info.profile = self._run("config", "get", "glm:hardware") or None
        except StackError:
            info.profile = None
        if key_name:
            info.api_key = self._run("config", "get", "--path", f"glm:apiKeys.{key_name}", secret=True)
            info.key_name = key_name
        else:
            # The same choice as the smoke gate: the first client name in sorted order.
            keys = json.loads(self._run("config", "get", "glm:apiKeys", secret=True) or "{}")
            if not isinstance(keys, dict) or not keys:
                raise StackError(f"stack {self.stack} has no glm:apiKeys; give --key-name or --api-key-env")
            info.key_name = sorted(keys)[0]
            info.api_key = str(keys[info.key_name])
        return info
