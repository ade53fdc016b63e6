"""The capacity probe (capacity_probe/) against the vLLM-protocol simulator, plus its pure parts.

Every simulator runs as a subprocess on a free 127.0.0.1 port with the knobs of its test
(images/vllm-sim/README.md). Deadlines are short (1 s) so that a hang costs a second, not a minute.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from capacity_probe import seeds
from capacity_probe.client import Budget, ProbeClient, Progress
from capacity_probe.measure import Probe, Settings, Target, percentile
from capacity_probe.prompts import SENTENCES, TokenModel, UniqueText
from capacity_probe.pulumi_stack import federate_url, max_num_seqs_from
from capacity_probe.vllm_metrics import Snapshot
from tests.engine import free_port

ROOT = Path(__file__).resolve().parent.parent
SIM = ROOT / "images" / "vllm-sim" / "vllm_sim.py"
MODEL = "zai-org/GLM-5.3-Flash"
API_KEY = "sk-probe-test-fcf6d883f2be7843"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# Fast requests: a hang costs ~1 s; prefill at 1M tokens/s never looks like one.
FAST = {"request_timeout": 1.0, "min_prefill_tps": 1_000_000.0}


SimFactory = Callable[..., str]


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimFactory]:
    """``sim(max_model_len=..., env={...}, args=[...])`` starts a simulator; returns its base URL."""
    procs: list[subprocess.Popen] = []

    def start(max_model_len: int = 32768, env: dict[str, str] | None = None, args: list[str] = ()) -> str:
        port = free_port()
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_SIM_")}
        full_env.update({"VLLM_SIM_QUIET": "1", "VLLM_SIM_DECODE_TOKEN_SECONDS": "0.002", **(env or {})})
        argv = [sys.executable, "-I", "-S", str(SIM), "serve", "/models/GLM-5.3-Flash", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--served-model-name", MODEL, "--max-model-len", str(max_model_len)]
        argv += ["--api-key", API_KEY, *args]
        log = (tmp_path / f"sim-{port}.log").open("wb")
        procs.append(subprocess.Popen(argv, env=full_env, stdout=log, stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}"
        for _ in range(500):
            try:
                if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                    return url
            except httpx.TransportError:
                time.sleep(0.01)
        raise AssertionError(f"simulator on {port} never got ready")

    yield start
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


def probe(url: str, phases: tuple[str, ...], metrics: bool = True, **settings: object) -> dict:
    """One in-process run of the probe against ``url``; returns probe-result.json's content."""
    client = ProbeClient(
        f"{url}/v1", API_KEY, Budget(60.0, 200), metrics_url=f"{url}/metrics" if metrics else None
    )
    target = Target(endpoint=f"{url}/v1", metrics_url=client.metrics_url)
    try:
        return Probe(
            client, target, Settings(phases=phases, **{**FAST, **settings}), Progress(quiet=True)
        ).run()
    finally:
        client.close()


# ---- against the simulator -----------------------------------------------------------------


def test_context_cliff_is_found_within_the_final_step_and_hangs_are_cut(sim: SimFactory) -> None:
    pool, max_len, resolution = 20_000, 32_768, 512
    url = sim(max_len, env={"VLLM_SIM_KV_POOL_TOKENS": str(pool)})
    started = time.monotonic()
    result = probe(url, ("over_limit", "context"), context_resolution=resolution)
    elapsed = time.monotonic() - started

    assert result["kv_pool"]["tokens"] == pool
    assert result["kv_pool"]["num_gpu_blocks"] * result["kv_pool"]["block_size"] == pool
    ctx = result["context"]
    # The simulator admits prompt + max_tokens (1) <= pool: 19,999 passes, 20,000 waits forever.
    assert pool - resolution <= ctx["ceiling_tokens"] < pool
    assert pool <= ctx["cliff_tokens"] <= pool + resolution
    assert 0 < ctx["bracket_tokens"] <= resolution
    hangs = [a for a in ctx["attempts"] if a["outcome"] == "hang"]
    assert hangs, ctx["attempts"]
    for attempt in hangs:
        # Detected and cut at its own deadline, not waited out; and the engine is free again after.
        assert attempt["seconds"] <= attempt["deadline_s"] + 0.5
        assert attempt["scheduler_during"]["waiting_capacity"] == 1
        assert attempt["scheduler_during"]["running"] == 0
        assert attempt["recovered"] is True
    assert elapsed < 20
    assert any(f.startswith("Context cliff") for f in result["findings"])
    assert any(f.startswith("KV pool 20,000 tokens < max_model_len") for f in result["findings"])

    over = result["over_limit"]
    assert over["http_status"] == 400 and over["fast_400"] and over["mentions_max_context"]
    assert over["seconds"] < 2.0


@pytest.mark.parametrize("blocking", [True, False], ids=["hol-blocking", "chunked-prefill"])
def test_head_of_line_blocking_is_reported_only_when_the_engine_blocks(
    sim: SimFactory, blocking: bool
) -> None:
    env = {"VLLM_SIM_PREFILL_TOKENS_PER_S": "20000", "VLLM_SIM_HOL_BLOCKING": "1" if blocking else "0"}
    url = sim(32768, env=env)
    hol = probe(url, ("hol",), hol_prompt_tokens=16_000)["hol"]

    assert hol["status"] == "measured", hol
    assert hol["start_detected_by"] == "vllm:num_requests_running"
    assert hol["large_outcome"] == "ok" and hol["large_ttft_s"] > 0.6  # 16K tokens at 20K tokens/s
    assert hol["prefill_remaining_at_send_s"] > 0.3
    assert hol["blocked"] is blocking
    if blocking:
        assert hol["small_seconds"] >= 0.5 * hol["prefill_remaining_at_send_s"]
    else:
        assert hol["small_seconds"] < 0.25


@pytest.mark.parametrize("caching", [True, False], ids=["prefix-cache", "no-prefix-cache"])
def test_prefix_cache_effect_is_reported(sim: SimFactory, caching: bool) -> None:
    flag = "--enable-prefix-caching" if caching else "--no-enable-prefix-caching"
    url = sim(32768, env={"VLLM_SIM_PREFILL_TOKENS_PER_S": "20000"}, args=[flag])
    result = probe(url, ("prefix_cache",), prefix_tokens=6000)
    pc = result["prefix_cache"]

    assert pc["status"] == "measured", pc
    assert 5500 <= pc["prefix_tokens"] <= 6000
    assert pc["cold_ttft_s"] > 0.25  # 6K uncached tokens at 20K tokens/s
    assert pc["effective"] is caching
    if caching:
        assert pc["speedup"] > 3 and pc["metrics"]["hit_rate"] > 0.5
    else:
        assert pc["metrics"]["hit_tokens"] == 0
    assert result["kv_pool"]["prefix_caching"] == str(caching)


def test_the_load_budget_stops_the_probe_by_itself(sim: SimFactory) -> None:
    url = sim(8192)
    client = ProbeClient(f"{url}/v1", API_KEY, Budget(60.0, max_requests=4))
    settings = Settings(decode_tokens=8, sweep_tokens=8, **FAST)
    try:
        result = Probe(client, Target(endpoint=f"{url}/v1"), settings, Progress(quiet=True)).run()
    finally:
        client.close()

    # 3 single-stream requests, then the sweep's first request: the fifth is never sent.
    assert result["budget"]["requests_sent"] == 4
    assert result["budget"]["exhausted"] == "--max-requests 4 reached"
    assert result["single_stream"]["status"] == "measured"
    assert result["concurrency"]["status"] == "incomplete"
    assert result["concurrency"]["levels"][0]["requests"] == 1
    assert all(result[p]["status"] == "skipped" for p in ("prefix_cache", "over_limit", "context", "hol"))
    assert any("load budget ran out" in n for n in result["notes"])
    assert result["kv_pool"]["status"] == "skipped" and "no --metrics-url" in result["kv_pool"]["reason"]


def fake_pulumi(tmp_path: Path, url: str) -> Path:
    """A `pulumi` that answers the three look-ups --stack makes, like the real CLI would."""
    outputs = {
        "endpoint": f"{url}/v1",
        "vllmFlags": {"--max-num-seqs": "4", "--port": "8000"},
    }
    script = tmp_path / "pulumi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "args = sys.argv[1:]\n"
        "assert args[-2:] == ['-s', 'ascend-test'], args\n"
        f"if args[:2] == ['stack', 'output']: print(json.dumps({outputs!r}))\n"
        "elif args[:3] == ['config', 'get', 'glm:hardware']: print('ascend')\n"
        f"elif args[:3] == ['config', 'get', 'glm:apiKeys']: print(json.dumps({{'ci': {API_KEY!r}}}))\n"
        "else: sys.exit(f'unexpected {args}')\n"
    )
    script.chmod(0o755)
    return script


def test_cli_with_a_stack_writes_the_result_report_and_plots(sim: SimFactory, tmp_path: Path) -> None:
    env = {"VLLM_SIM_PREFILL_TOKENS_PER_S": "100000", "VLLM_SIM_SPEC_ACCEPTANCE": "0.5"}
    url = sim(8192, env=env, args=["--speculative-config", '{"method":"mtp","num_speculative_tokens":3}'])
    out = tmp_path / "out"
    argv = [
        sys.executable,
        "-m",
        "capacity_probe",
        "--stack",
        "ascend-test",
        "--pulumi",
        str(fake_pulumi(tmp_path, url)),
    ]
    argv += ["--metrics-url", f"{url}/metrics", "--out", str(out), "--request-timeout", "1"]
    argv += ["--min-prefill-tps", "1000000", "--decode-tokens", "24", "--single-runs", "2"]
    argv += ["--sweep-tokens", "12", "--sweep-rounds", "1", "--context-steps", "4"]
    env_vars = {k: v for k, v in os.environ.items() if k != "GLM_API_KEY"}
    done = subprocess.run(argv, cwd=ROOT, env=env_vars, capture_output=True, text=True, timeout=60)

    # The pool (4 * max_model_len) holds every prompt: nothing to find, exit 0.
    assert done.returncode == 0, done.stderr
    assert "[probe" in done.stderr and "context 8,1" in done.stderr  # progress lines on stderr
    result = json.loads((out / "probe-result.json").read_text())
    for key in ("target", "budget", "kv_pool", "calibration", "single_stream", "concurrency", "prefix_cache",
                "over_limit", "context", "hol", "spec_decode", "seed_comparison", "findings", "plots"):  # fmt: skip
        assert key in result, key
    assert result["target"]["profile"] == "ascend" and result["target"]["is_simulator"] is True
    assert result["target"]["sources"]["api_key"] == "glm:apiKeys.ci of stack ascend-test"
    assert [lv["concurrency"] for lv in result["concurrency"]["levels"]] == [1, 2, 4]  # --max-num-seqs 4
    assert result["concurrency"]["max_num_seqs_source"] == "the stack's vllmFlags"
    assert result["context"]["no_cliff_up_to_max_model_len"] is True
    assert result["context"]["ceiling_tokens"] > 8192 - 64
    assert result["spec_decode"]["acceptance"] == pytest.approx(0.5, abs=0.1)
    assert result["findings"] == []
    ratios = {f["key"]: f for f in result["seed_comparison"]["figures"]}
    decode = ratios["single_stream.decode_tok_s"]
    assert decode["ratio"] == pytest.approx(decode["measured"] / 20.9, rel=1e-2)

    report = (out / "probe-report.md").read_text()
    assert "From the vLLM-protocol simulator, not a model" in report
    for section in ("Findings", "KV pool", "Context ceiling (unique text)", "Over-limit request",
                    "Head-of-line blocking", "Single stream", "Concurrency sweep", "Prefix cache",
                    "Speculative decoding (MTP)", "Against the seed's figures"):  # fmt: skip
        assert f"\n## {section}\n" in report, section
    for name in ("probe-context-sweep.png", "probe-concurrency.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR", name
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert width > 400 and height > 300
        assert f"]({name})" in report
    for path in [*out.iterdir()]:
        if path.suffix in (".json", ".md"):
            assert API_KEY not in path.read_text(), f"the API key leaked into {path.name}"
    assert API_KEY not in done.stderr


def test_cli_refuses_to_run_without_a_key_in_the_environment(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PROBE_TEST_UNSET_KEY"}
    argv = [sys.executable, "-m", "capacity_probe", "--endpoint", "http://127.0.0.1:9/v1", "--api-key-env"]
    done = subprocess.run(
        [*argv, "PROBE_TEST_UNSET_KEY", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "PROBE_TEST_UNSET_KEY" in done.stderr and "empty or unset" in done.stderr
    # There is no flag that takes the key itself.
    helptext = subprocess.run(
        [sys.executable, "-m", "capacity_probe", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert "--api-key-env" in helptext.stdout
    assert not re.search(r"--api-key(?!-env)", helptext.stdout)


# ---- pure parts ----------------------------------------------------------------------------


def test_unique_text_never_repeats_a_chunk_and_holds_no_arithmetic() -> None:
    text = UniqueText(nonce="abcd1234")
    a, b = text.prompt(50), text.prompt(50)
    chunks = re.findall(r"\[\d{8}\][^\[]*", a + b)
    assert len(chunks) == 100 and len(set(chunks)) == 100
    assert a.splitlines()[0] != b.splitlines()[0]  # differ from their first characters on
    for sentence in SENTENCES:  # the simulator would answer arithmetic instead of filler
        assert not re.search(r"[\d+*/^()=-]", sentence), sentence


def test_token_model_fits_two_points() -> None:
    model = TokenModel.fit([(7, 200), (42, 1110)])
    assert model.per_chunk == 26 and model.base == 18
    assert model.tokens_for(model.chunks_for(5000)) <= 5000 < model.tokens_for(model.chunks_for(5000) + 1)


def test_metrics_are_read_from_vllm_and_from_prometheus_federate() -> None:
    direct = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="128",engine="0",num_gpu_blocks="70",enable_prefix_caching="True"} 1.0\n'
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 1.0\n'
    )
    federated = (
        "# TYPE vllm:prefix_cache_hits_total untyped\n"
        'vllm:prefix_cache_hits_total{engine="0",instance="vllm:8000",job="vllm",model_name="m"} 42 1732900000000\n'
        'vllm:prefix_cache_hits_total{engine="1",instance="vllm:8000",job="vllm",model_name="m"} 8 1732900000000\n'
    )
    assert Snapshot(direct).kv_pools()[0]["tokens"] == 8960
    assert Snapshot(direct).scheduler()["waiting_capacity"] == 1.0
    assert Snapshot(federated).total("vllm:prefix_cache_hits_total") == 50
    assert Snapshot(federated).total("vllm:spec_decode_num_draft_tokens_total") is None


def test_seed_ratios_and_stack_helpers() -> None:
    result = {"kv_pool": {"tokens": 1_002_491}, "single_stream": {"decode_tok_s": 39.5}}
    figures = {f["key"]: f for f in seeds.compare("a800", result)["figures"]}
    assert figures["kv_pool.tokens"]["ratio"] == 0.5 and figures["single_stream.decode_tok_s"]["ratio"] == 0.5
    assert seeds.compare("local", result)["reason"] == "no seed figures for profile 'local'"
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([], 99) is None
    assert max_num_seqs_from({"--max-num-seqs": "32"}) == 32
    assert max_num_seqs_from({"--port": "8000"}) is None and max_num_seqs_from(None) is None
    assert federate_url("http://h:9090/").startswith("http://h:9090/federate?match[]=%7B__name__")
