"""The smoke gate alone on the real engine: one ``SmokeTest`` against a front that already runs.

The config is read like the main program's (``glm:*`` objects over the ``local`` profile, validated
by ``build_stack_config``); the front is given as ``glm:frontUrl`` instead of being created, the
metrics URL as ``glm:smoke.metricsUrl``, the key as the secret ``glm:apiKeys`` (first by name, as
components/deployment.py picks it). No Docker or command resources: only the dynamic provider runs.
Run by tests/test_engine_gate.py on a copy of this folder (it sets PYTHONPATH and GLM_REPO_ROOT; see
its docstring for why).
"""

import os
import sys
from pathlib import Path

# The repo root: GLM_REPO_ROOT when the test runs a copy of this folder, else two levels up.
REPO = Path(os.environ.get("GLM_REPO_ROOT") or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(REPO))

import pulumi  # noqa: E402

from components.config import ConfigError, build_stack_config  # noqa: E402
from components.serving.spec import render_serving  # noqa: E402
from components.verification.smoke_gate import SmokeTest, SmokeTestArgs  # noqa: E402

config = pulumi.Config("glm")
raw = {"hardware": "local"}
for key in ("model", "serving", "smoke"):
    value = config.get_object(key)
    if value:
        raw[key] = value
try:
    stack_config = build_stack_config(raw)
except ConfigError as err:
    raise pulumi.RunError(str(err)) from None

api_keys = config.require_secret_object("apiKeys")
smoke = SmokeTest(
    "gate",
    SmokeTestArgs(
        serving=render_serving(stack_config),
        smoke=stack_config.smoke,
        front_url=config.require("frontUrl"),
        api_key=api_keys.apply(lambda keys: keys[sorted(keys)[0]]),
        image_ref=config.get("imageRef") or "glm53-vllm-sim:engine-test",
        metrics_url=stack_config.smoke.metrics_url,
    ),
)
pulumi.export("smoke", smoke.results)
# Which interpreter ran the program: the language host must honour Pulumi.yaml's `virtualenv`.
pulumi.export("programPython", sys.prefix)
