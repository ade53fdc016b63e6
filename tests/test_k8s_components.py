"""The Kubernetes target as components (issue 34): one per concern, every object of a stack made
before them kept, none deleted and created again.

The URNs a stack had before are a snapshot of main at 3a8e588, the last commit with the functions
(``tests/fixtures/k8s-urns-before-components.json``, made by ``tests/k8s_urns.py`` in a checkout
of that commit), never regenerated from this code.
"""

from __future__ import annotations

import json

import pytest

from tests.k8s_urns import BEFORE_COMPONENTS, KINDS, answers_to, recorded

KUBERNETES_OBJECT = "kubernetes:"
COMPONENTS = {
    "glm:k8s_images:ClusterImages",
    "glm:k8s_serving:JitCache",
    "glm:k8s_guard:PodGuard",
    "glm:k8s_serving:ServingPods",
    "glm:k8s_monitoring:KubernetesScrape",
    "glm:k8s_front:KubernetesFront",
    "glm:k8s_probe:KubernetesSemanticProbe",
    "glm:k8s_teardown:PodsGone",  # issue 49: destroy waits for the pods
}


@pytest.fixture(scope="module")
def now() -> dict[str, dict[str, set[str]]]:
    """Each kind of stack run by this code: its resources' URNs → every URN each answers to."""
    found = {}
    for kind, run in KINDS.items():
        with recorded() as seen:
            run()
        found[kind] = answers_to(seen)
    return found


@pytest.mark.parametrize("kind", KINDS)
def test_every_object_a_stack_had_before_the_components_is_kept(
    now: dict[str, dict[str, set[str]]], kind: str
) -> None:
    before = json.loads(BEFORE_COMPONENTS.read_text())[kind]
    kept = {old: [new for new, names in now[kind].items() if old in names] for old in before}
    assert {old: new for old, new in kept.items() if len(new) != 1} == {}


@pytest.mark.parametrize("kind", KINDS)
def test_the_cluster_objects_are_children_of_one_component_per_concern(
    now: dict[str, dict[str, set[str]]], kind: str
) -> None:
    """Only the providers and the namespace stay at the stack's root: a URN's type is its parent's
    chain of types, then its own."""
    chains = [urn.split("::")[2].split("$") for urn in now[kind]]
    at_root = sorted(chain[0] for chain in chains if len(chain) == 1 and not chain[0].startswith("glm:"))
    assert at_root == [
        "kubernetes:core/v1:Namespace",
        "pulumi-python:dynamic:Resource",  # the gate's API key
        "pulumi-python:dynamic:Resource",  # the probe's key
        "pulumi-python:dynamic:Resource",  # the gate's metrics key
        "pulumi:providers:docker",
        "pulumi:providers:kubernetes",
    ]
    components = {chain[0] for chain in chains if chain[0].startswith("glm:k8s")}
    assert components == COMPONENTS
