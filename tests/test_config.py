"""Validation before anything is created: every rule has a failing case (no Pulumi engine needed)."""

from __future__ import annotations

from typing import Any

import pytest

from components.config import ConfigError, build_stack_config, deep_merge
from tests.conftest import TEST_HOST_KEY

HOST = {
    "hosts": [
        {"name": "gpu01", "dockerHost": "ssh://deploy@gpu01.example.internal", "hostKey": TEST_HOST_KEY}
    ]
}


def make(hardware: str, **overrides: Any):
    return build_stack_config({"hardware": hardware, "target": HOST, **overrides})


@pytest.mark.parametrize("hardware", ["a800", "ascend", "rtx5090", "local"])
def test_profiles_are_valid_as_shipped(hardware: str) -> None:
    assert make(hardware).hardware == hardware


def test_unknown_hardware_names_the_key_and_choices() -> None:
    with pytest.raises(ConfigError, match=r"glm:hardware='h100'.*a800, ascend, local, rtx5090"):
        build_stack_config({"hardware": "h100", "target": HOST})


def test_a800_on_four_cards_does_not_fit() -> None:
    """Seed arithmetic: 306 GiB / 4 = 76.5 GiB per card > 80 GiB x 0.95 = 76 GiB."""
    with pytest.raises(ConfigError) as err:
        make("a800", serving={"tensorParallelSize": 4}, container={"accelerators": [0, 1, 2, 3]})
    message = str(err.value)
    assert "glm:serving.tensorParallelSize=4" in message
    assert "76.5 GiB per card" in message
    assert "76.0 GiB per card" in message
    assert "needs at least 8" in message


def test_a800_on_eight_cards_fits() -> None:
    config = make("a800")
    assert config.model.weights_gib / config.serving.tensor_parallel_size == pytest.approx(38.25)


def test_tensor_parallel_must_match_accelerators() -> None:
    with pytest.raises(ConfigError, match=r"tensorParallelSize=8 but glm:container.accelerators lists 6"):
        make("rtx5090", container={"accelerators": [0, 1, 2, 3, 4, 5]})


def test_cudagraph_capture_sizes_above_max_num_seqs() -> None:
    with pytest.raises(ConfigError, match=r"cudagraph_capture_sizes has \[32\] above maxNumSeqs=16"):
        make(
            "ascend",
            serving={"compilationConfig": {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32]}},
        )


def test_auto_tool_choice_needs_a_parser() -> None:
    with pytest.raises(ConfigError, match=r"enableAutoToolChoice=true without glm:serving\.toolCallParser"):
        make("a800", serving={"toolCallParser": None})


def test_max_model_len_above_the_model_limit() -> None:
    with pytest.raises(ConfigError, match=r"maxModelLen=262144 exceeds .*maxContextLength=131072"):
        make("rtx5090", serving={"maxModelLen": 262144})


def test_engine_ready_timeout_shorter_than_the_rtx5090_load() -> None:
    """The seed's lesson: 600 s (vLLM's default) kills a 632.8 s weights load."""
    with pytest.raises(ConfigError, match=r"VLLM_ENGINE_READY_TIMEOUT_S=600 s .* 632.8 s"):
        make("rtx5090", serving={"env": {"VLLM_ENGINE_READY_TIMEOUT_S": None}})


def test_smoke_deadline_shorter_than_the_known_start() -> None:
    with pytest.raises(ConfigError, match=r"glm:smoke.deadlineSeconds=600 .* 720 s"):
        make("rtx5090", smoke={"deadlineSeconds": 600})


def test_port_clash_between_front_and_prometheus() -> None:
    with pytest.raises(ConfigError, match=r"glm:monitoring.port=8008 clashes with glm:front.port=8008"):
        make("a800", monitoring={"port": 8008})


def test_port_clash_with_vllm_on_host_network() -> None:
    with pytest.raises(
        ConfigError, match=r"serving.port \(network host\)=8077 clashes with glm:front.port=8077"
    ):
        make("ascend", container={"networkMode": "host"}, serving={"host": "127.0.0.1"})


def test_host_network_with_vllm_on_all_interfaces_is_refused() -> None:
    with pytest.raises(ConfigError, match="publishes vLLM's port 8077 to the world"):
        make("ascend", container={"networkMode": "host"}, front={"port": 9443})


def test_unknown_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"glm:serving.maxModelLength: Extra inputs are not permitted"):
        make("a800", serving={"maxModelLength": 4096})


def test_wrong_type_is_named_with_the_value() -> None:
    with pytest.raises(ConfigError, match=r"glm:serving.maxNumSeqs: .* \(got \"many\"\)"):
        make("a800", serving={"maxNumSeqs": "many"})


def test_more_than_one_host_is_refused_for_now() -> None:
    two = {
        "hosts": [
            {"name": "a", "dockerHost": "ssh://u@a", "hostKey": TEST_HOST_KEY},
            {"name": "b", "dockerHost": "ssh://u@b", "hostKey": TEST_HOST_KEY},
        ]
    }
    with pytest.raises(ConfigError, match="lists 2 hosts; exactly one is supported"):
        build_stack_config({"hardware": "a800", "target": two})


def test_download_needs_a_repo() -> None:
    with pytest.raises(ConfigError, match=r"download\.enabled=true without glm:model\.download\.repo"):
        make("rtx5090", model={"download": {"enabled": True}})


def test_mtp_on_ascend_warns_with_the_seed_numbers() -> None:
    config = make("ascend", serving={"numSpeculativeTokens": 3})
    [warning] = [w for w in config.advisories() if "numSpeculativeTokens" in w]
    assert "12.2 %" in warning and "8,956" in warning


def test_mtp_on_a800_does_not_warn() -> None:
    assert not [w for w in make("a800").advisories() if "numSpeculativeTokens" in w]


def test_vllm_rpc_timeout_is_dead_on_ascend_vllm_0_23() -> None:
    assert any("VLLM_RPC_TIMEOUT does nothing on vLLM 0.23.0" in w for w in make("ascend").advisories())


def test_vllm_rpc_timeout_is_live_before_0_23() -> None:
    config = make("ascend", image={"vllmVersion": "0.22.1"})
    assert not any("VLLM_RPC_TIMEOUT" in w for w in config.advisories())


def test_missing_shm_with_tensor_parallel_warns() -> None:
    config = make("rtx5090", container={"shmSize": "64m"})  # the seed: Docker's default
    assert any("64 MB" in w and "shmSize" in w for w in config.advisories())


def test_floating_image_warns() -> None:
    config = make("rtx5090", image={"reference": "vllm/vllm-openai:latest"})
    assert any("floats" in w for w in config.advisories())


def test_deep_merge_replaces_lists_merges_dicts_and_deletes_on_null() -> None:
    base = {"a": {"x": 1, "y": 2}, "l": [1, 2], "k": "v"}
    assert deep_merge(base, {"a": {"y": 3, "x": None}, "l": [9], "k": None}) == {"a": {"y": 3}, "l": [9]}
    assert base == {"a": {"x": 1, "y": 2}, "l": [1, 2], "k": "v"}
