"""Every command a refusal prints, pasted as printed (issue 47 item 2).

A new user broke the local stack's file the way the README tells them to change it
(``scripts/pulumi.sh config set … -s local``), read the refusal, and pasted its ``Fix:``: without
``-s local`` the command exited 0, changed another stack (or the tracked file, not the user's copy
where the local stack's config lives) and the next preview refused the same way. Here each broken
file is made with the real CLI through ``scripts/pulumi.sh`` in a copy of the project with its own
state folder, the refusal is what the models say about that file (the program's own loading, read
back through ``pulumi config --json --show-secrets``), and every backticked command in it is run in
``bash`` as printed; then the file is read again and the problem is gone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from components.config import ConfigError, SecretInputs, build_stack_config
from components.config.loading import KNOWN_KEYS, STACK_KEYS
from components.config.secret_inputs import PLAIN_TEXT_REFUSED
from tests.engine import PROJECT, PulumiProject

PRINTED = re.compile(r"`(scripts/pulumi\.sh [^`]+)`")
HF_TOKEN = "hf_pasted0fix0test0b7c9d1e3f5a"


def engine_bin() -> str | None:
    """The folder of the pulumi CLI (scripts/engine.sh), or None where the engine is incomplete."""
    try:
        found = subprocess.run(
            [str(PROJECT / "scripts" / "engine.sh")], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return None
    lines = found.stdout.strip().splitlines()
    return lines[-1] if found.returncode == 0 and lines and Path(lines[-1], "pulumi").exists() else None


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of the project (scripts included) and the environment of a user with their own state."""
    folder = engine_bin()
    if folder is None:
        pytest.skip("the Pulumi engine is incomplete here (scripts/engine.sh)")
    root = PulumiProject.copy_of_repo(tmp_path_factory.mktemp("fixes") / "glm").root
    shutil.copytree(PROJECT / "scripts", root / "scripts")
    shutil.copy2(PROJECT / "requirements-dev.txt", root / "requirements-dev.txt")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")},
        "PATH": f"{folder}:{os.environ['PATH']}",
        "GLM_STATE_DIR": str(root / "user-state"),
        "PULUMI_CONFIG_PASSPHRASE": "printed-fixes-only",
        "SSH_AUTH_SOCK": str(root / "no-agent"),  # scripts/pulumi.sh starts none for a config command
        "HF_TOKEN": HF_TOKEN,  # the user's own, which a printed fix reads from their shell
    }
    return root, env


def paste(root: Path, env: dict[str, str], line: str) -> None:
    """One command line, in bash, as a user pastes it."""
    done = subprocess.run(
        ["bash", "-c", line], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"


def stack_file(root: Path, env: dict[str, str]) -> dict[str, Any]:
    shown = subprocess.run(
        ["scripts/pulumi.sh", "config", "--json", "--show-secrets", "-s", "local"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(shown.stdout)


def refusal(values: dict[str, Any]) -> str | None:
    """What the program says about this stack file (``load_stack_config``'s reading), or None."""

    def value(key: str) -> Any:
        entry = values.get(f"glm:{key}") or {}
        return entry.get("objectValue", entry.get("value"))

    def secret(key: str) -> bool:
        return bool((values.get(f"glm:{key}") or {}).get("secret"))

    raw: dict[str, Any] = {"hardware": value("hardware")}
    raw |= {key: value(key) for key in STACK_KEYS if value(key) not in (None, "", {})}
    names = [k.removeprefix("glm:") for k in values if k.startswith("glm:")]
    raw |= {name: value(name) for name in names if name not in KNOWN_KEYS}
    secrets = SecretInputs(
        api_keys=value("apiKeys"),
        metrics_keys=value("metricsKeys"),
        serving_env=value("servingSecretEnv"),
        tls_certificate=value("tlsCertificate") is not None,
        tls_certificate_pem=value("tlsCertificate"),
        tls_key=value("tlsKey") is not None,
        secret_plain_keys=tuple(k for k in ["hardware", *STACK_KEYS] if secret(k)),
        plain_secret_keys=tuple(k for k in PLAIN_TEXT_REFUSED if value(k) is not None and not secret(k)),
    )
    try:
        build_stack_config(raw, secrets, stack="local")
    except ConfigError as err:
        return str(err)
    return None


# How a user breaks the file (each line pasted as the README writes such commands), the key the
# refusal names, and what the file holds once the printed fixes ran.
CASES = {
    "a misspelt serving key": (
        ["scripts/pulumi.sh config set --path glm:serving.maxNumSeq 6 -s local"],
        "glm:serving.maxNumSeq",
        lambda v: v["glm:serving"]["objectValue"].get("maxNumSeqs") == 6,
    ),
    "a misspelt section": (
        ["scripts/pulumi.sh config set --path glm:servng.maxModelLen 4096 -s local"],
        "glm:servng",
        lambda v: "glm:servng" not in v,
    ),
    "a misspelt front key": (
        ["scripts/pulumi.sh config set --path glm:front.maxBodySise 20m -s local"],
        "glm:front.maxBodySise",
        lambda v: v["glm:front"]["objectValue"].get("maxBodySize") == "20m",
    ),
    "a bad front size": (
        ["scripts/pulumi.sh config set --path glm:front.maxBodySize 20x -s local"],
        "glm:front.maxBodySize",
        lambda v: "maxBodySize" not in v["glm:front"]["objectValue"],
    ),
    "a serving value out of range": (
        ["scripts/pulumi.sh config set --path glm:serving.maxModelLen 0 -s local"],
        "glm:serving.maxModelLen",
        lambda v: "maxModelLen" not in v.get("glm:serving", {}).get("objectValue", {}),
    ),
    "an unknown profile": (
        ["scripts/pulumi.sh config set glm:hardware lcoal -s local"],
        "glm:hardware",
        lambda v: v["glm:hardware"]["value"] == "local",
    ),
    "an env value read as a boolean": (
        ["scripts/pulumi.sh config set --path glm:serving.extraEnv.VLLM_SIM_FLAG true -s local"],
        "glm:serving.extraEnv.VLLM_SIM_FLAG",
        lambda v: v["glm:serving"]["objectValue"]["extraEnv"]["VLLM_SIM_FLAG"] == "1",
    ),
    "a meter weight for no key": (
        ["scripts/pulumi.sh config set --path glm:front.usageMeter.weights.carol 2 -s local"],
        "glm:front.usageMeter.weights.carol",
        lambda v: "carol" not in v["glm:front"]["objectValue"].get("usageMeter", {}).get("weights", {}),
    ),
    "no API key": (
        ["scripts/pulumi.sh config rm glm:apiKeys -s local"],
        "glm:apiKeys",
        lambda v: v["glm:apiKeys"]["secret"] and v["glm:apiKeys"]["objectValue"]["ops"].startswith("sk-"),
    ),
    "a metrics key in plain text": (
        ["scripts/pulumi.sh config set --path glm:metricsKeys.prom sk-plain-1b2e7f9c0d4a8e6f3c5b -s local"],
        "glm:metricsKeys",
        lambda v: v["glm:metricsKeys"]["secret"] and "prom" not in v["glm:metricsKeys"]["objectValue"],
    ),
    "secret env that is not a map": (
        ["scripts/pulumi.sh config set --secret glm:servingSecretEnv hf_not_a_map -s local"],
        "glm:servingSecretEnv",
        lambda v: v["glm:servingSecretEnv"]["objectValue"] == {"HF_TOKEN": HF_TOKEN},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_fix_a_refusal_prints_works_when_pasted(case: str, project: tuple[Path, dict[str, str]]) -> None:
    root, env = project
    broken, key, fixed = CASES[case]
    state = Path(env["GLM_STATE_DIR"])
    shutil.rmtree(state, ignore_errors=True)  # each case from the repository's defaults
    tracked = (root / "Pulumi.local.yaml").read_text()
    paste(
        root,
        env,
        "scripts/pulumi.sh config set --secret --path glm:apiKeys.local sk-local-0c4e8a2f6b1d3e5f7a9c -s local",
    )
    assert refusal(stack_file(root, env)) is None, "the defaults are refused"
    for line in broken:
        paste(root, env, line)
    said = refusal(stack_file(root, env))
    assert said is not None and key in said, said
    problem = next(line for line in said.splitlines() if key in line)
    commands = PRINTED.findall(problem)
    assert commands, f"the refusal prints no command to paste: {problem}"
    assert all(" -s local" in c for c in commands), commands
    for command in commands:
        paste(root, env, command)
    values = stack_file(root, env)
    after = refusal(values)
    assert after is None or key not in after, f"after pasting {commands}:\n{after}"
    assert fixed(values), json.dumps(values)[:2000]
    # Where the local stack's config lives: the user's copy, never the tracked file.
    assert (root / "Pulumi.local.yaml").read_text() == tracked
