"""``pulumi destroy`` returns once the stack's pods are gone, not when their Deployments are marked
for deletion.

The serving Deployment is applied without the provider's wait (``pulumi.com/skipAwait``: the roll's
watch waits on ``up`` instead, components/kubernetes/roll.py), which skips the wait on delete too:
destroy returned while the pods were still draining (their preStop and grace). ``PodsGone`` is a
command whose delete waits (components/host/templates/k8s-pods-gone.sh): every component of the
stack depends on it, so the engine deletes it last, after every Deployment, and its delete polls
``kubectl get pods`` with the stack's selector every 2 s, printing the pods it waits for, until none
is left or the bound (the longest grace plus a margin) has passed, which fails the destroy naming
the pods and the command to watch them. It never waits when the serving Deployment still stands (a
replacement on ``up``, not a destroy); without kubectl, or where kubectl cannot list the pods, it
says so and does not wait.
"""

from __future__ import annotations

import os
import shlex

import pulumi
import pulumi_command as command

from components.config import KubernetesTargetConfig
from components.kubernetes.roll import kubectl_argv
from components.kubernetes.serving import SERVING_NAME
from components.template import host_script

MARGIN_SECONDS = 60
"""Beyond the longest grace period: the kubelet's own pace in stopping and removing the pods."""


def instance_selector(stack: str) -> str:
    """Every pod of the stack (the serving pods, the front, Prometheus, the probe)."""
    return f"app.kubernetes.io/instance={stack}"


def pods_gone_script(k8s_target: KubernetesTargetConfig, stack: str, grace_seconds: int) -> str:
    """The delete command: waits for the stack's pods, at most ``grace_seconds`` (the longest of
    the pods' grace periods) plus a margin."""
    kubeconfig = os.path.expanduser(k8s_target.kubeconfig) if k8s_target.kubeconfig else None
    props = {"kubeconfig": kubeconfig, "context": k8s_target.context, "namespace": k8s_target.namespace}
    kubectl = kubectl_argv(props)
    selector = instance_selector(stack)
    values = {
        "KUBECTL": shlex.quote(shlex.join(kubectl)),
        "SELECTOR": shlex.quote(selector),
        "SERVING": shlex.quote(SERVING_NAME),
        "WAIT_SECONDS": str(grace_seconds + MARGIN_SECONDS),
        "WATCH": shlex.quote(shlex.join([*kubectl, "get", "pods", "-l", selector, "--watch"])),
    }
    return host_script("k8s-pods-gone.sh", values=values)


class PodsGone(pulumi.ComponentResource):
    """Nothing on ``up``; on ``destroy``, after every Deployment of the stack, waits for its pods.
    Pass it in every component's ``depends_on``."""

    def __init__(
        self,
        name: str,
        k8s_target: KubernetesTargetConfig,
        stack: str,
        grace_seconds: int,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("glm:k8s_teardown:PodsGone", name, None, opts)
        script = pods_gone_script(k8s_target, stack, grace_seconds)
        # `update` is a no-op: a changed script (another grace) is stored, never a replacement,
        # which would run the old delete while the pods serve.
        self.wait = command.local.Command(
            f"{name}-wait", delete=script, update="true", opts=pulumi.ResourceOptions(parent=self)
        )
        self.register_outputs({})
