"""The serving pods' readiness: the gate's own checks (``python3 -m components.gate --every``), which
the ``gate`` sidecar runs against its pod's vLLM every ``readinessPeriodSeconds``, the probe that
reads their verdict, and what their failures name.

The sidecar is one Python process for the pod's life: the kubelet's probe only reads the verdict
file (a shell, no Python). When the probe itself ran the checks, every period started a Python
process in each pod (about 0.16 s of a core, plus the kubelet's exec): on the one-node cluster key
B's time to first token had its slowest requests at those moments, alone and during a flood alike
(docs/scaling.md, "The meter on Kubernetes").

Pure: the command lines as the API server receives them (components/kubernetes/workload.py puts
them in the pod template). A failure is the check's message, which the probe prints, so ``kubectl
describe pod`` shows it among the pod's events: it names the cluster's commands (``--look-at-*``),
never Docker's.
"""

from __future__ import annotations

import json

from components.config import SmokeConfig
from components.gate.messages import LookAt
from components.serving.spec import ServingSpec

READINESS_STEPS = ("models", "arithmetic", "tool_call", "kv_pool")
"""The gate's steps a pod passes before it is Ready (not ``front_auth``/``streaming``: the front's)."""
READINESS_SEQUENCES = 1
"""The engine sequences a pod's own readiness check runs at once: its steps ask one chat at a time,
on the pod's loopback, past the fronts' meter."""
GATE_KEY_ENV = "GLM_GATE_KEY"
"""vLLM runs without a key behind the front; the gate's command line still wants one to send."""
READINESS_REQUEST_TIMEOUT_SECONDS = 30
VERDICT_PROBE_TIMEOUT_SECONDS = 10
"""The probe reads two files; the kubelet's exec on a loaded node is what may take time."""
VERDICT_VOLUME = "readiness"
"""A memory ``emptyDir`` the gate sidecar writes and the guard reads: the pod's last verdict."""
VERDICT_DIR = "/run/glm53-readiness"
VERDICT_FILE = f"{VERDICT_DIR}/failed"
"""Present from the sidecar's start until a check passes, and again from the check that fails: the
guard answers no inference while it is there. A Service drops a not-Ready pod only when its
endpoints reach every node's rules, and the front's open connections still reach it for
``KEEPALIVE_TIME_SECONDS``; the guard closes that window from the failing check on."""
CHECKED_FILE = f"{VERDICT_DIR}/checked"
"""Touched as each of the sidecar's runs ends: older than :func:`stale_after_seconds`, its loop is stuck."""


def client_sequences(max_num_seqs: int) -> int:
    """Of each serving pod's ``--max-num-seqs``, the sequences the front pods' meter shares among
    the keys: all but the readiness check's. Every ``readinessPeriodSeconds`` each pod's check asks
    vLLM itself, where the fronts cannot count it; had they shared every slot, a flood would keep
    the pod full, the check would wait inside vLLM for one of the running generations to end (the
    ``readinessProbe`` fails it after ``READINESS_REQUEST_TIMEOUT_SECONDS``: a busy, healthy pod
    taken out of the Service), and the request the front sent next would wait behind it, however
    small its key's share. With one sequence, nothing is kept (the check waits for a slot)."""
    return max(1, max_num_seqs - READINESS_SEQUENCES)


def _smoke_questions(smoke: SmokeConfig) -> list[str]:
    """``glm:smoke``'s questions and answer where the stack sets them (the gate's own defaults
    otherwise, left off so that the pods of a stack that sets none stay as they were)."""
    args = []
    for flag, field in (
        ("--prompt", "prompt"),
        ("--expected-answer", "expected_answer"),
        ("--tool-prompt", "tool_prompt"),
    ):
        value = getattr(smoke, field)
        if value != SmokeConfig.model_fields[field].default:
            args += [flag, value]
    return args


def readiness_command(
    serving: ServingSpec, smoke: SmokeConfig, look_at: LookAt, period_seconds: int
) -> list[str]:
    """The gate's own checks against this pod's vLLM (the pod shares one network namespace), with
    the stack's questions, as the front's gate asks them, every ``period_seconds``; ``look_at``: the
    cluster's commands that its failures name (``ServingPods.look_at``)."""
    base = f"http://127.0.0.1:{serving.port}"
    return [
        "python3", "-m", "components.gate",
        "--endpoint", f"{base}/v1",
        "--api-key-env", GATE_KEY_ENV,
        "--metrics-url", f"{base}/metrics",
        "--served-name", serving.served_name,
        "--max-model-len", str(serving.max_model_len),
        "--steps", ",".join(s for s in READINESS_STEPS if s in smoke.steps),
        "--deadline-seconds", "5",
        "--request-timeout", str(READINESS_REQUEST_TIMEOUT_SECONDS),
        "--verdict-file", VERDICT_FILE,
        "--every", str(period_seconds),
        "--checked-file", CHECKED_FILE,
        "--look-at-logs", look_at.logs,
        "--look-at-running", look_at.running,
        "--look-at-inspect", look_at.inspect,
        "--chat-template-kwargs", json.dumps(smoke.chat_template_kwargs, sort_keys=True),
        *_smoke_questions(smoke),
    ]  # fmt: skip


def stale_after_seconds(period_seconds: int) -> int:
    """How old the last run's end may be before the probe fails a stuck loop: a period, plus the
    longest a run can take (its requests are cut at their timeout, and each step asks at most one
    at a time), with room for three of them."""
    return period_seconds + 3 * READINESS_REQUEST_TIMEOUT_SECONDS


def verdict_probe(period_seconds: int, namespace: str) -> list[str]:
    """The readiness probe's command: fails printing the verdict while it stands, or naming the
    stuck loop and its log (``$HOSTNAME``: the pod's name, which Kubernetes sets); passes once a run
    has passed and the last run ended recently."""
    stale = stale_after_seconds(period_seconds)
    script = (
        f"if [ -e {VERDICT_FILE} ]; then cat {VERDICT_FILE}; exit 1; fi; "
        f'checked=$(stat -c %Y {CHECKED_FILE} 2>/dev/null) || {{ echo "no check has ended yet"; exit 1; }}; '
        f"age=$(( $(date +%s) - checked )); "
        f'if [ "$age" -gt {stale} ]; then echo "the gate sidecar\'s last check ended $age s ago (more '
        f'than {stale} s): its loop is stuck. Look at: kubectl -n {namespace} logs $HOSTNAME -c gate"; exit 1; fi'
    )
    return ["sh", "-c", script]
