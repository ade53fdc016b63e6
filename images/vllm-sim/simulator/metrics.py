"""``/metrics``: vLLM's metric names, labels and histogram buckets, in prometheus_client's text."""

from __future__ import annotations

import math

from simulator.config import Config

ENGINE_ID = "0"


def fmt_float(value: float) -> str:
    """prometheus_client's floatToGoString."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


def _labels(pairs: list) -> str:
    """``{k="v",...}`` with prometheus_client's escapes; nothing for no labels."""
    if not pairs:
        return ""
    body = ",".join(
        '{}="{}"'.format(k, str(v).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\""))
        for k, v in pairs
    )
    return "{" + body + "}"


def _one_two_five(limit: int) -> list[float]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to ``limit``."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > limit:
                return out
            out.append(float(v))
        exp += 1


TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0]  # fmt: skip
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip


class Histogram:
    """A histogram with vLLM's buckets, rendered as prometheus_client does."""

    def __init__(self, buckets: list):
        self.buckets = list(buckets)
        self.counts = [0] * len(self.buckets)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
                break

    def lines(self, name: str, base: list) -> list:
        out, cum = [], 0
        for i, bound in enumerate(self.buckets):
            cum += self.counts[i]
            out.append(f"{name}_bucket{_labels([*base, ('le', fmt_float(bound))])} {cum}.0")
        out.append(f"{name}_bucket{_labels([*base, ('le', '+Inf')])} {self.count}.0")
        out.append(f"{name}_count{_labels(base)} {self.count}.0")
        out.append(f"{name}_sum{_labels(base)} {fmt_float(self.total)}")
        return out


# (name, help, Metrics attribute), in the order vLLM renders them.
COUNTERS = (
    (
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        "prefix_queries",
    ),
    (
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
        "prefix_hits",
    ),
    ("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", "preemptions"),
    ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", "prompt_tokens"),
    ("vllm:generation_tokens_total", "Number of generation tokens processed.", "generation_tokens"),
)
HISTOGRAMS = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "req_prompt"),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", "req_gen"),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "e2e"),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", "queue"),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", "prefill"),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", "decode"),
)
SPEC_COUNTERS = (
    ("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", "spec_drafts"),
    ("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", "spec_draft_tokens"),
    ("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", "spec_accepted"),
)


class Metrics:
    """The engine's counters and histograms (the engine updates them under its lock)."""

    FINISH_REASONS = ("stop", "length", "abort", "error")

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.preemptions = 0
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted = 0
        self.success = {r: 0 for r in self.FINISH_REASONS}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(LATENCY_BUCKETS)
        self.queue = Histogram(LATENCY_BUCKETS)
        self.prefill = Histogram(LATENCY_BUCKETS)
        self.decode = Histogram(LATENCY_BUCKETS)
        self.req_prompt = Histogram(_one_two_five(cfg.max_model_len))
        self.req_gen = Histogram(_one_two_five(cfg.max_model_len))

    def render(self, running: int, waiting: int, by_reason: dict, usage: float) -> str:
        """The text of ``/metrics``: the scheduler's state as given, then the counters, the
        histograms and the cache config, with the families the configured vLLM version has."""
        cfg = self.cfg
        base = [("engine", ENGINE_ID), ("model_name", cfg.name)]
        v = cfg.version_tuple
        out: list = []

        def family(name: str, typ: str, help_: str, samples: list) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {typ}")
            out.extend(samples)

        def simple(name: str, typ: str, help_: str, value: float) -> None:
            family(name, typ, help_, [f"{name}{_labels(base)} {fmt_float(value)}"])

        simple(
            "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", running
        )
        simple("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting)
        if v >= (0, 20, 0):
            family(
                "vllm:num_requests_waiting_by_reason",
                "gauge",
                "Number of requests waiting to be processed, by reason.",
                [
                    f"vllm:num_requests_waiting_by_reason{_labels([*base, ('reason', r)])} "
                    f"{fmt_float(by_reason.get(r, 0))}"
                    for r in ("capacity", "deferred")
                ],
            )
        simple("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage)
        if v < (0, 12, 0):
            simple(
                "vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.", usage
            )
        for name, help_, attr in COUNTERS:
            simple(name, "counter", help_, getattr(self, attr))
        family(
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            [
                f"vllm:request_success_total"
                f"{_labels([base[0], ('finished_reason', r), base[1]])} {fmt_float(n)}"
                for r, n in self.success.items()
            ],
        )
        for name, help_, attr in HISTOGRAMS:
            family(name, "histogram", help_, getattr(self, attr).lines(name, base))
        if cfg.spec_tokens:
            for name, help_, attr in SPEC_COUNTERS:
                simple(name, "counter", help_, getattr(self, attr))
        family(
            "vllm:cache_config_info",
            "gauge",
            "Information of the LLMEngine CacheConfig",
            [f"vllm:cache_config_info{_labels(sorted(_cache_config(cfg).items()))} 1.0"],
        )
        return "\n".join(out) + "\n"


def _cache_config(cfg: Config) -> dict:
    """The labels of ``vllm:cache_config_info``: what the gate and the probe read the KV pool from."""
    return {
        "block_size": str(cfg.block_size),
        "cache_dtype": cfg.kv_cache_dtype,
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": str(bool(cfg.prefix_caching)),
        "engine": ENGINE_ID,
        "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
        "is_attention_free": "False",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(cfg.num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256",
        "sliding_window": "None",
        "swap_space": "4",
    }
