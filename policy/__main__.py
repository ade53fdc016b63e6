"""Policy pack glm-serving: what every glm stack must satisfy before anything is deployed.

    pulumi preview --policy-pack policy -s a800

The rules are pure functions in ``glm_policies``; ``glm_analyzer`` wires them to pulumi-policy.
Constructing ``PolicyPack`` starts the analyzer's gRPC server and serves until the engine stops it.
See docs/policy.md.
"""

from glm_analyzer import POLICIES
from pulumi_policy import EnforcementLevel, PolicyPack

PolicyPack(
    "glm-serving",
    policies=POLICIES,
    enforcement_level=EnforcementLevel.MANDATORY,
    description="GLM-5.3-Flash serving: private vLLM, keyed front, pinned images, shm, read-only weights, kept volumes, Kubernetes objects.",
)
