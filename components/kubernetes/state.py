"""The Kubernetes stack's objects keep their identity in the state now that they are components.

Until issue 34 the Kubernetes target registered its objects at the stack's root, from functions:
their URNs were ``urn:pulumi:<stack>::glm::<type>::<name>``. A URN is what the state knows an
object by, and a child's URN carries its parent's type: moved under a component without an alias,
every object would be deleted and created again by the next ``up`` (the pods killed at once, not
rolled; the namespace and the JIT cache's claim, retained on delete, orphaned and adopted again).
So each child keeps its old name and says where it was (tests/test_k8s_components.py runs the
stack under mocks and checks every URN a stack had before against what the components answer to).
"""

from __future__ import annotations

import pulumi


def moved_from_root(parent: pulumi.Resource) -> pulumi.ResourceOptions:
    """``parent=parent``, answering to the URN the resource had at the stack's root. Its own
    children follow it (the engine derives their old URNs from their parent's aliases)."""
    return pulumi.ResourceOptions(parent=parent, aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)])
