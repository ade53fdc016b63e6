"""Validation before anything is created: every rule has a failing case (no Pulumi engine needed)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from components.config import ConfigError, SecretInputs, StackConfig, build_stack_config, deep_merge
from components.profiles import PROFILES
from tests.conftest import TEST_HOST_KEY
from tests.stack_configs import HOST, PLAIN_HTTP_ACCEPTED, make


@pytest.mark.parametrize("hardware", list(PROFILES))
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
    with pytest.raises(ConfigError, match="publishes vLLM's port 8077 on every interface"):
        make("ascend", container={"networkMode": "host"}, front={"port": 9443})


def test_unknown_key_is_named() -> None:
    with pytest.raises(
        ConfigError,
        match=r"glm:serving.maxModelLength is not a known key; did you mean glm:serving.maxModelLen\?",
    ):
        make("a800", serving={"maxModelLength": 4096})


def test_wrong_type_is_named_with_the_value() -> None:
    with pytest.raises(ConfigError, match=r"glm:serving.maxNumSeqs: .* \(got \"many\"\)"):
        make("a800", serving={"maxNumSeqs": "many"})


def test_download_needs_a_repo() -> None:
    with pytest.raises(ConfigError, match=r"download\.enabled=true without glm:model\.download\.repo"):
        make("rtx5090", model={"download": {"enabled": True}})


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ({"download": {"enabled": True, "repo": "--local-dir=/root/.ssh"}}, "model.download.repo"),
        ({"download": {"enabled": True, "repo": "GLM-5.3-Flash"}}, "model.download.repo"),
        ({"download": {"enabled": True, "repo": "zai-org/../../etc"}}, "model.download.repo"),
        ({"revision": "-h"}, "model.revision"),
        ({"revision": "--local-dir=/root/.ssh"}, "model.revision"),
        ({"revision": "main\n--help"}, "model.revision"),
    ],
)
def test_download_values_that_read_as_options_are_refused(model: dict[str, object], key: str) -> None:
    """Issue 33 finding 6: each value once rendered ``huggingface-cli download --local-dir=… ``."""
    with pytest.raises(ConfigError, match=rf"glm:{re.escape(key)}=.*Fix:"):
        make("a800", model=model)


def test_the_seeds_hub_ids_and_a_commit_revision_are_accepted() -> None:
    for hardware, repo in (("a800", "zai-org/GLM-5.3-Flash"), ("ascend", "Eco-Tech/GLM-5.3-Flash-w8a8")):
        config = make(hardware, model={"revision": "0a1b2c3d" * 5, "download": {"enabled": True}})
        assert (config.model.download.repo, config.model.revision) == (repo, "0a1b2c3d" * 5)


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


def test_missing_shm_with_tensor_parallel_is_refused() -> None:
    """An error, as in the policy pack (shm-for-tensor-parallel): the workers crash, at random."""
    with pytest.raises(ConfigError) as err:
        make("rtx5090", container={"shmSize": "64m"})  # the seed: Docker's default
    assert "glm:container.shmSize=64m" in str(err.value) and "64 MB" in str(err.value)
    assert "tensorParallelSize=8" in str(err.value) and "Fix: set glm:container.shmSize" in str(err.value)
    assert make("rtx5090", container={"shmSize": "64m", "ipcMode": "host"}).container.ipc_mode == "host"
    assert make("local", container={"shmSize": "64m"}).serving.tensor_parallel_size == 1


@pytest.mark.parametrize(
    ("overrides", "key", "reason"),
    [
        ({"image": {"reference": "vllm/vllm-openai:latest"}}, "image.reference", "uses the :latest tag"),
        ({"image": {"reference": "vllm/vllm-openai:nightly"}}, "image.reference", "floating :nightly tag"),
        ({"front": {"image": "openresty/openresty"}}, "front.image", "has no tag"),
        ({"monitoring": {"image": "prom/prometheus:latest"}}, "monitoring.image", ":latest"),
        ({"image": {"build": {"baseImage": "vllm/vllm-openai:latest"}}}, "image.build.baseImage", ":latest"),
    ],
)
def test_floating_images_are_refused_as_by_the_policy_pack(
    overrides: dict[str, Any], key: str, reason: str
) -> None:
    """An error on a production stack, an advisory on the stacks the pack relaxes (images-pinned)."""
    hardware = "a800" if key == "image.build.baseImage" else "rtx5090"
    raw = {"hardware": hardware, "target": HOST, **deep_merge(PLAIN_HTTP_ACCEPTED, overrides)}
    for production in (None, hardware):
        with pytest.raises(ConfigError, match=rf"glm:{key}=\S+ .*{re.escape(reason)}.*Fix: pin"):
            build_stack_config(raw, stack=production)
    for relaxed in ("local", f"{hardware}-staging", f"{hardware}-dev"):
        [warning] = [w for w in build_stack_config(raw, stack=relaxed).advisories() if f"glm:{key}=" in w]
        assert reason in warning


def test_pinned_images_pass_everywhere() -> None:
    pinned = {
        "image": {"reference": "vllm/vllm-openai:nightly-385dce36b"},
        "front": {"image": "openresty/openresty:1.27.1.2-bookworm"},
    }
    assert not [w for w in make("rtx5090", **pinned).advisories() if "pin a version tag" in w]


@pytest.mark.parametrize("image", ["nginx:1.27", "nginx", "docker.io/library/nginx:1.27-alpine"])
def test_an_official_nginx_image_is_refused_while_the_meter_runs_in_it(image: str) -> None:
    """Issue 46: the meter is Lua inside nginx; the official nginx image ships njs, not Lua, and
    `nginx -t` would refuse the release on the host. Said at preview, with both ways out."""
    with pytest.raises(ConfigError, match=rf"glm:front.image={re.escape(image)} has no Lua module") as err:
        make("rtx5090", front={"image": image})
    assert "glm:front.usageMeter.enabled false" in str(err.value)
    assert "openresty/openresty:1.27.1.2-bookworm" in str(err.value)
    if ":" in image:  # an image without a tag is refused for that alone (images-pinned)
        make("rtx5090", front={"image": image, "usageMeter": {"enabled": False}})


def test_deep_merge_replaces_lists_merges_dicts_and_deletes_on_null() -> None:
    base = {"a": {"x": 1, "y": 2}, "l": [1, 2], "k": "v"}
    assert deep_merge(base, {"a": {"y": 3, "x": None}, "l": [9], "k": None}) == {"a": {"y": 3}, "l": [9]}
    assert base == {"a": {"x": 1, "y": 2}, "l": [1, 2], "k": "v"}


# ---- numbers refused before anything is created (issues 11 item 3, 12 item 3) -------------------


@pytest.mark.parametrize(
    ("overrides", "key", "fix"),
    [
        ({"container": {"shmSize": "64x"}}, "glm:container.shmSize", "64g"),
        ({"container": {"shmSize": "lots"}}, "glm:container.shmSize", "64g"),
        ({"serving": {"maxModelLen": -5}}, "glm:serving.maxModelLen", "greater than 0"),
        ({"serving": {"maxNumSeqs": 0}}, "glm:serving.maxNumSeqs", "greater than 0"),
        ({"front": {"keepalive": 0}}, "glm:front.keepalive", "greater than 0"),
        ({"front": {"rateLimit": {"requestsPerSecond": 0}}}, "glm:front.rateLimit.requestsPerSecond", "greater than 0"),
        ({"front": {"rateLimit": {"burst": -1}}}, "glm:front.rateLimit.burst", "greater than 0"),
        ({"front": {"readTimeoutSeconds": 0}}, "glm:front.readTimeoutSeconds", "at least 1"),
        ({"front": {"sendTimeoutSeconds": 0}}, "glm:front.sendTimeoutSeconds", "at least 1"),
        ({"front": {"maxBodySize": "1k; include /etc/passwd"}}, "glm:front.maxBodySize", "20m"),
        ({"front": {"maxBodySize": "20 MB"}}, "glm:front.maxBodySize", "20m"),
        ({"monitoring": {"scrapeInterval": "15"}}, "glm:monitoring.scrapeInterval", "15s"),
        ({"monitoring": {"scrapeInterval": "0s"}}, "glm:monitoring.scrapeInterval", "15s"),
        ({"monitoring": {"thresholds": {"capacityWaitFor": "2 minutes"}}}, "glm:monitoring.thresholds.capacityWaitFor", "2m"),
    ],
)  # fmt: skip
def test_bad_numbers_are_refused_naming_the_key_value_and_fix(
    overrides: dict[str, Any], key: str, fix: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        make("a800", **overrides)
    message = str(raised.value)
    assert key in message and fix in message, message


def test_every_bad_number_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as raised:
        make(
            "a800",
            container={"shmSize": "64x"},
            front={"keepalive": 0, "maxBodySize": "big"},
            monitoring={"scrapeInterval": "15"},
        )
    message = str(raised.value)
    for key in ("shmSize", "keepalive", "maxBodySize", "scrapeInterval"):
        assert f".{key}" in message, message


@pytest.mark.parametrize("duration", ["15s", "1m30s", "2h", "500ms", "1d", "1w"])
def test_prometheus_durations_that_promtool_accepts_are_accepted(duration: str) -> None:
    config = make(
        "a800", monitoring={"scrapeInterval": duration, "thresholds": {"capacityWaitFor": duration}}
    )
    assert config.monitoring.scrape_interval == duration


# ---- secrets, checked before anything is created (issues 11 item 3, 13 items 1, 5, 9) ---------

GOOD_KEYS = {"ops": "sk-test-ops-cca224104c7a268a"}


def with_secrets(
    hardware: str = "a800", secrets: SecretInputs | None = None, **overrides: Any
) -> StackConfig:
    return build_stack_config(
        {"hardware": hardware, "target": HOST, **deep_merge(PLAIN_HTTP_ACCEPTED, overrides)},
        secrets or SecretInputs(api_keys=GOOD_KEYS),
    )


def test_missing_api_keys_are_refused_with_the_command_that_sets_them() -> None:
    with pytest.raises(
        ConfigError, match=r"glm:apiKeys is not set.*`scripts/pulumi\.sh config set --secret --path"
    ):
        with_secrets(secrets=SecretInputs())


@pytest.mark.parametrize("key", ["aaaaaaaaaaaaaaaa", "abababababababababab", "sk-aaaaaaaaaaaaaaaaaaaa"])
def test_api_keys_that_are_not_random_are_refused_without_echoing_them(key: str) -> None:
    with pytest.raises(ConfigError, match=r"glm:apiKeys\.ops is not random enough") as raised:
        with_secrets(secrets=SecretInputs(api_keys={"ops": key}))
    assert key not in str(raised.value)


def test_generated_api_keys_are_accepted() -> None:
    import secrets as stdlib_secrets

    # As the README says to make one (`sk-$(openssl rand -hex 24)`). Only 8 bytes (16 hex digits,
    # 10^19) were drawn here before, and zxcvbn put the odd one at 10^12 (CI, 2026-12-03): a
    # strength estimate is not a count of random bits.
    for _ in range(200):
        with_secrets(secrets=SecretInputs(api_keys={"ops": "sk-" + stdlib_secrets.token_hex(24)}))


def test_a_usage_meter_weight_must_name_an_api_key() -> None:
    """A typo would weigh nothing: refused, naming the key, the names there are and the fix."""
    weights = {"usageMeter": {"weights": {"opps": 2}}}
    with pytest.raises(
        ConfigError, match=r"glm:front\.usageMeter\.weights\.opps names no API key \(the keys are ops\)"
    ):
        with_secrets(front=weights)
    assert with_secrets(
        front={"usageMeter": {"weights": {"ops": 2, "semantic-probe": 0.5}}}
    ).front.usage_meter.weights


def test_tls_without_certificate_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match=r"glm:front\.tls=true but no certificate"):
        with_secrets(front={"tls": True})
    assert with_secrets(
        front={"tls": True}, secrets=SecretInputs(api_keys=GOOD_KEYS, tls_certificate=True, tls_key=True)
    ).front.tls


def test_config_and_secret_problems_are_reported_together() -> None:
    with pytest.raises(ConfigError) as raised:
        with_secrets(secrets=SecretInputs(api_keys={"ops": "short"}), front={"keepalive": 0})
    assert "glm:front.keepalive" in str(raised.value) and "glm:apiKeys.ops is 5 characters" in str(
        raised.value
    )


def test_docker_host_override_goes_through_the_models() -> None:
    config = build_stack_config(
        {"hardware": "a800", "target": HOST, **PLAIN_HTTP_ACCEPTED}, docker_host="unix:///var/run/docker.sock"
    )
    assert config.target.host.docker_host == "unix:///var/run/docker.sock"
    assert config.target.host.name == "gpu01"
    assert config.target.host.is_local  # preflight, downloads and the endpoint follow the engine
    assert build_stack_config(
        {"hardware": "a800", "target": HOST, **PLAIN_HTTP_ACCEPTED}
    ).target.host.docker_host.startswith("ssh://")


@pytest.mark.parametrize("name", ["VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_SERVER_DEV_MODE"])
def test_env_that_opens_non_inference_routes_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"glm:serving.env/extraEnv.{name}='1'.*Fix: remove it"):
        make("a800", serving={"extraEnv": {name: "1"}})
    with pytest.raises(ConfigError, match=rf"glm:servingSecretEnv.{name}"):
        with_secrets(secrets=SecretInputs(api_keys=GOOD_KEYS, serving_env={name: "True"}))
    assert make("a800", serving={"extraEnv": {name: "0"}})


def test_profiler_env_warns() -> None:
    config = make("a800", serving={"extraEnv": {"VLLM_TORCH_PROFILER_DIR": "/tmp/prof"}})
    assert any("VLLM_TORCH_PROFILER_DIR opens /start_profile" in w for w in config.advisories())


# ---- host network: vLLM must listen where the front reaches it and the world does not (13.2) ---


@pytest.mark.parametrize("host", [None, "0.0.0.0", "::", "[::]", "", "0", "0.0.0.0/0", "*"])
def test_host_network_refuses_every_all_interfaces_spelling(host: str | None) -> None:
    with pytest.raises(ConfigError) as raised:
        make("ascend", container={"networkMode": "host"}, serving={"host": host, "port": 8000})
    message = str(raised.value)
    assert "publishes vLLM's port 8000" in message and "172.17.0.1" in message


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_host_network_refuses_loopback_the_front_cannot_reach(host: str) -> None:
    with pytest.raises(ConfigError, match=r"the front .* cannot reach it.*172\.17\.0\.1"):
        make("ascend", container={"networkMode": "host"}, serving={"host": host, "port": 8000})


def test_host_network_on_the_bridge_gateway_is_accepted() -> None:
    config = make("ascend", container={"networkMode": "host"}, serving={"host": "172.17.0.1", "port": 8000})
    assert config.serving.host == "172.17.0.1"


def test_the_ascend_stack_files_host_network_line_is_true() -> None:
    """Pulumi.ascend.yaml says the seed's --privileged --net=host is a few lines away: those lines load."""
    import yaml

    from tests.conftest import PROJECT

    text = (PROJECT / "Pulumi.ascend.yaml").read_text()
    lines = [line.removeprefix("#   ") for line in text.splitlines() if line.startswith("#   glm:")]
    assert lines, "Pulumi.ascend.yaml lost its host-network lines"
    overrides = {k.removeprefix("glm:"): v for k, v in yaml.safe_load("\n".join(lines)).items()}
    config = make("ascend", **overrides)
    assert config.container.network_mode == "host" and config.container.privileged


def test_gpus_other_than_all_are_refused_naming_accelerators() -> None:
    with pytest.raises(ConfigError, match=r"glm:container\.gpus='device=4,5,6,7'.*only `all`.*accelerators"):
        make("a800", container={"gpus": "device=4,5,6,7"})
    assert make("a800", container={"gpus": "all"}).container.gpus == "all"


# ---- plain HTTP on a public bind (13.7) ----------------------------------------------------------


def test_plain_http_on_a_public_bind_is_refused_naming_tls_and_the_opt_in() -> None:
    with pytest.raises(ConfigError) as raised:
        make("a800", front={"bindAddress": "0.0.0.0", "allowPlainHttp": False})
    message = str(raised.value)
    assert "glm:front.bindAddress=0.0.0.0" in message and "plain HTTP" in message
    assert "glm:front.tls" in message and "glm:front.allowPlainHttp" in message


def test_plain_http_opt_in_deploys_with_an_advisory() -> None:
    config = make("a800", front={"allowPlainHttp": True})
    assert any("plain HTTP" in w and "0.0.0.0:8008" in w for w in config.advisories())


def test_tls_or_loopback_needs_no_opt_in() -> None:
    assert not make(
        "a800", front={"bindAddress": "127.0.0.1", "allowPlainHttp": False}
    ).front.allow_plain_http
    config = with_secrets(
        front={"tls": True}, secrets=SecretInputs(api_keys=GOOD_KEYS, tls_certificate=True, tls_key=True)
    )
    assert not any("plain HTTP" in w for w in config.advisories())


# ---- hardening round 2 (issue 26) -------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "0123456789abcdef0123456789abcdef",
        "passwordpassword1234",
        "qwertyuiopasdfghjkl",
        "sk-test-ci-0123456789abcdef",  # the tests' own key before issue 26
    ],
)
def test_api_keys_that_an_estimator_guesses_are_refused(key: str) -> None:
    """Each uses many distinct characters (the old frequency check passed them) and is a sequence,
    a repeated word or a keyboard walk."""
    with pytest.raises(ConfigError, match=r"glm:apiKeys\.ops is not random enough.*zxcvbn") as raised:
        with_secrets(secrets=SecretInputs(api_keys={"ops": key}))
    assert key not in str(raised.value)


def test_keys_the_readme_command_makes_are_accepted() -> None:
    import secrets as stdlib_secrets

    for _ in range(50):  # `echo sk-$(openssl rand -hex 24)`
        with_secrets(secrets=SecretInputs(api_keys={"ops": "sk-" + stdlib_secrets.token_hex(24)}))


@pytest.mark.parametrize("docker_host", ["SSH://deploy@gpu01:2222", "Ssh://deploy@gpu01", "sSh://gpu01"])
def test_ssh_in_any_case_needs_the_host_key_and_is_normalised(docker_host: str) -> None:
    host = {"name": "gpu01", "dockerHost": docker_host}
    with pytest.raises(ConfigError, match=r"glm:target\.hosts\[gpu01\]\.hostKey is not set"):
        make("a800", target={"hosts": [host]})
    config = make("a800", target={"hosts": [{**host, "hostKey": TEST_HOST_KEY}]})
    assert config.target.host.docker_host.startswith("ssh://")
    assert config.target.host.host_key_line == TEST_HOST_KEY


@pytest.mark.parametrize("docker_host", ["tcp://10.0.0.5:2375", "gpu01", "http://gpu01:2375", "TCP://gpu01"])
def test_docker_hosts_other_than_ssh_and_unix_are_refused(docker_host: str) -> None:
    host = {"name": "gpu01", "dockerHost": docker_host, "hostKey": TEST_HOST_KEY}
    with pytest.raises(ConfigError, match=r"neither ssh:// nor unix://.*Fix: ssh://\[user@\]host"):
        make("a800", target={"hosts": [host]})
    with pytest.raises(ConfigError, match=r"neither ssh:// nor unix://"):
        build_stack_config(
            {"hardware": "a800", "target": HOST, **PLAIN_HTTP_ACCEPTED}, docker_host=docker_host
        )


SEED_HOST_NETWORK = {
    "container": {"privileged": True, "networkMode": "host"},
    "serving": {"host": "172.17.0.1", "port": 8000},
}


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        (["--host=0"], "glm:serving.host"),
        (["--host", "0"], "glm:serving.host"),
        (["--hos=*"], "glm:serving.host"),  # argparse expands an unambiguous prefix
        (["--port=8001"], "glm:serving.port"),
        (["--api-key", "sk-deliberately-in-argv"], "glm:apiKeys"),
        (["--served_model_name=gpt-4"], "glm:model.servedName"),
        (["--compilation-config.cudagraph_mode=NONE"], "glm:serving.compilationConfig"),
        (["-tp", "4"], "glm:serving.tensorParallelSize"),
        (["--no-enable-prefix-caching"], "glm:serving.enablePrefixCaching"),
        (["--allowed-media-domains", "169.254.169.254"], "glm:serving.allowedMediaDomains"),
    ],
)
def test_extra_args_cannot_override_a_rendered_flag(extra: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        make("ascend", **deep_merge(SEED_HOST_NETWORK, {"serving": {"extraArgs": extra}}))
    message = str(raised.value)
    assert "glm:serving.extraArgs[0]" in message and f"set {key}" in message
    assert "clashes" not in message  # the only problem is the extra argument
    assert "sk-deliberately-in-argv" not in message


def test_extra_args_the_config_does_not_render_pass() -> None:
    extra = ["--sparse-mla-force-mqa", "--enable-lora"]
    # The patch set's switch is the image's own, declared as such (the flag check, issue 25).
    added = {"addedFlags": ["--sparse-mla-force-mqa"]}
    assert make("a800", serving={"extraArgs": extra}, image=added).serving.extra_args == extra
    # vLLM's graceful stop is rendered now (stopGraceSeconds - 5): its own key, not extraArgs.
    with pytest.raises(ConfigError, match=r"set glm:serving.shutdownTimeout instead"):
        make("a800", serving={"extraArgs": ["--shutdown-timeout=20"]})


def test_config_and_policy_share_one_all_interfaces_rule() -> None:
    import components.config
    import policy.glm_policies

    assert components.config.binds_all_interfaces is policy.glm_policies.binds_all_interfaces
    assert [policy.glm_policies.binds_all_interfaces(h) for h in ("0", "*", " ", "[::]")] == [True] * 4


@pytest.mark.parametrize("where", ["env", "extraEnv"])
@pytest.mark.parametrize("name", ["NAME=VLLM_TORCH_PROFILER_DIR", "1ST", "HF TOKEN", "A-B", ""])
def test_env_names_that_are_not_posix_names_are_refused(where: str, name: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"glm:serving\.{where}\.{re.escape(repr(name))} is not an environment"
    ):
        make("a800", serving={where: {name: "/tmp"}})


@pytest.mark.parametrize("address", ["0.0.0.0", "10.0.0.5", "203.0.113.7", "::"])
def test_prometheus_beyond_loopback_is_refused_without_the_opt_in(address: str) -> None:
    with pytest.raises(ConfigError, match=r"glm:monitoring\.bindAddress=.*allowPublicBind: true"):
        make("a800", monitoring={"bindAddress": address})
    config = make("a800", monitoring={"bindAddress": address, "allowPublicBind": True})
    assert any("glm:monitoring.allowPublicBind=true" in w for w in config.advisories())


def test_prometheus_on_loopback_needs_no_opt_in() -> None:
    for address in ("127.0.0.1", "localhost", "::1"):
        assert not any(
            "allowPublicBind" in w for w in make("a800", monitoring={"bindAddress": address}).advisories()
        )


def test_image_input_needs_a_media_allow_list() -> None:
    """vLLM reads no (or an empty) --allowed-media-domains as `fetch any URL` (its docs: SSRF)."""
    for domains in (None, []):
        with pytest.raises(
            ConfigError, match=r"limitMmPerPrompt=\{'image': 1\} without glm:serving\.allowedMediaDomains"
        ):
            make("ascend", serving={"allowedMediaDomains": domains})
    with pytest.raises(ConfigError, match=r"'\*' is not a host name"):
        make("ascend", serving={"allowedMediaDomains": ["*"]})
    text_only = make(
        "ascend", serving={"allowedMediaDomains": None, "limitMmPerPrompt": {"image": 0, "video": 0}}
    )
    assert text_only.serving.allowed_media_domains is None


def test_image_input_on_a_vllm_older_than_the_allow_list_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"limitMmPerPrompt=\{'image': 1\} on vLLM 0.10.2"):
        make("ascend", image={"vllmVersion": "0.10.2"})


@pytest.mark.parametrize("where", ["env", "extraEnv"])
def test_an_env_boolean_is_refused_naming_the_key_and_the_quoting(where: str) -> None:
    """YAML's `true` is not text an engine reads the same way everywhere (vLLM parses many of its
    switches with int()): the user says which text they mean."""
    with pytest.raises(ConfigError) as refused:
        make("a800", serving={where: {"VLLM_SLEEP_WHEN_IDLE": True}})
    message = str(refused.value)
    assert f"glm:serving.{where}.VLLM_SLEEP_WHEN_IDLE" in message and "read as a boolean" in message
    # The CLI stores '"1"' with its quotes; --type string stores the text 1 (tests/test_printed_fixes.py).
    assert f"config set --path --type string 'glm:serving.{where}.VLLM_SLEEP_WHEN_IDLE' 1" in message
