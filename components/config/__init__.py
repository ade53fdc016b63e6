"""The stack configuration as typed models: the one source of truth.

``load_stack_config`` takes the ``glm:*`` keys of a stack, deep-merges them over the selected
hardware profile's defaults (``components.profiles``) and validates the result. Every rule that can
be checked before anything is created is checked here, with a message that names the config key,
the value, the limit and the fix; a bad stack fails ``pulumi preview`` and nothing is deployed.

Pulumi.yaml's ``config:`` block and README's config table are checked against these models by
``tests/test_config_docs.py``.

The modules, each importing only those above it: ``values`` (value types, ``ConfigError``),
``target``, ``replica`` (image, model, serving, container), ``certificate`` (the front's, read with
openssl), ``edge`` (front, monitoring, preflight, semantic probe, rehearsal), ``sections`` (the
stack's sections together), ``rules`` and ``advisories`` (across sections), ``stack``
(``StackConfig``), ``secret_inputs``, ``loading``.
"""

from components.config.edge import (
    SEMANTIC_PROBE_CHAT_STEPS,
    FrontConfig,
    MonitoringConfig,
    PreflightConfig,
    SemanticProbeConfig,
)
from components.config.loading import build_stack_config, deep_merge, load_stack_config, parse_overrides
from components.config.replica import (
    REPLICA_KEYS,
    SHUTDOWN_MARGIN_SECONDS,
    VISIBILITY_ENV,
    ContainerConfig,
    ImageConfig,
    ModelConfig,
    MountConfig,
    ServingConfig,
)
from components.config.secret_inputs import (
    GATE_METRICS_CLIENT,
    SECRET_KEYS,
    SecretInputs,
    check_api_keys,
    check_metrics_keys,
)
from components.config.sections import CACHE_MOUNT_PATH, StackSections, semantic_probe_runs, usage_meter_runs
from components.config.stack import StackConfig
from components.config.target import HostConfig, KubernetesTargetConfig
from components.config.values import ConfigError, hardware_description
from components.gate.settings import SmokeConfig
from policy.glm_policies import binds_all_interfaces

__all__ = [
    "CACHE_MOUNT_PATH",
    "GATE_METRICS_CLIENT",
    "REPLICA_KEYS",
    "SECRET_KEYS",
    "SEMANTIC_PROBE_CHAT_STEPS",
    "SHUTDOWN_MARGIN_SECONDS",
    "VISIBILITY_ENV",
    "ConfigError",
    "ContainerConfig",
    "FrontConfig",
    "HostConfig",
    "ImageConfig",
    "KubernetesTargetConfig",
    "ModelConfig",
    "MonitoringConfig",
    "MountConfig",
    "PreflightConfig",
    "SecretInputs",
    "SemanticProbeConfig",
    "ServingConfig",
    "SmokeConfig",
    "StackConfig",
    "StackSections",
    "binds_all_interfaces",
    "build_stack_config",
    "check_api_keys",
    "check_metrics_keys",
    "deep_merge",
    "hardware_description",
    "load_stack_config",
    "parse_overrides",
    "semantic_probe_runs",
    "usage_meter_runs",
]
