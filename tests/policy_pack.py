"""The policy pack run over resources as the engine hands them over."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

POLICY_DIR = Path(__file__).resolve().parent.parent / "policy"
# The pack's modules import each other as top-level modules, as they do when the engine runs
# policy/ as a program; the tests see them the same way.
sys.path.insert(0, str(POLICY_DIR))

import glm_policies as gp  # noqa: E402 (needs the sys.path entry above)
from glm_policies import Resource  # noqa: E402

UNKNOWN_STRING = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def resource(type_: str, logical: str, /, stack: str = "a800", **props: Any) -> Resource:
    urn = f"urn:pulumi:{stack}::glm::{type_}::{logical}"
    return Resource(type_, logical, gp.normalize(props), urn=urn)


# --- the pulumi-policy wiring -------------------------------------------------------------------


@pytest.fixture
def analyze():
    """Run one resource through pulumi-policy's own analyzer servicer, as the engine's RPC would."""
    pytest.importorskip("pulumi_policy", reason="pip install -r policy/requirements.txt")
    from glm_analyzer import POLICIES
    from google.protobuf import struct_pb2
    from pulumi.runtime.proto import analyzer_pb2
    from pulumi_policy import EnforcementLevel
    from pulumi_policy.policy import _PolicyAnalyzerServicer  # private: pinned to 1.21.0

    servicer = _PolicyAnalyzerServicer("glm-serving", "0.0.1", POLICIES, EnforcementLevel.MANDATORY)

    def run(type_: str, name: str, props: dict[str, Any], stack: str = "a800", protect: bool = False):
        properties = struct_pb2.Struct()
        properties.update(props)
        request = analyzer_pb2.AnalyzeRequest(
            type=type_,
            name=name,
            urn=f"urn:pulumi:{stack}::glm::{type_}::{name}",
            properties=properties,
            options=analyzer_pb2.AnalyzerResourceOptions(protect=protect),
        )
        response = servicer.Analyze(request, None)
        diagnostics = {
            (d.policyName, analyzer_pb2.EnforcementLevel.Name(d.enforcementLevel)): d.message
            for d in response.diagnostics
        }
        return diagnostics, {n.policy_name: n.reason for n in response.not_applicable}

    return run
