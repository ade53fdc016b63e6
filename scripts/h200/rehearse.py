#!/usr/bin/env python3
"""The real vLLM under the project's own code, on the GPU host (run by ``scripts/h200/rehearse.sh``).

    python3 scripts/h200/rehearse.py .h200/serve.json "$OUT"

vLLM is started with the argv ``render_argv.py`` rendered for a profile; its log goes through the
gate's start-up watcher (``ContainerWatch.read_line``, each line stamped as ``docker logs
--timestamps`` would); then the gate itself (``python -m components.gate``), the probe's saturation
reading under a burst past ``--max-num-seqs``, tokens/s at 1 and at ``--max-num-seqs`` streams,
every ``vllm:`` name the project reads against the real ``/metrics``, a SIGTERM with streams in
flight under ``--shutdown-timeout``, and a bad flag value diagnosed. Everything lands in ``OUT``;
``summary.json`` holds the figures.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from components.gate.container import ContainerWatch  # noqa: E402
from components.gate.metrics import parse_samples, total  # noqa: E402
from components.gate.startup import diagnose  # noqa: E402
from components.semantic_probe.saturation import saturation  # noqa: E402

BASE = "http://127.0.0.1:8000"
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",  # the host's rule: no NVLink multicast
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "PYTHONUNBUFFERED": "1",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",  # flashinfer does not travel
}
METRIC_USERS = ["dashboards", "components/render/dashboard.py", "components/render/prometheus_rules.py", "components/gate",
                "components/semantic_probe", "capacity_probe"]  # fmt: skip


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Engine:
    """``vllm serve`` with the rendered argv; its output to ``serve.log`` and the watcher."""

    def __init__(self, spec: dict[str, Any], out: Path, argv: list[str], name: str) -> None:
        self.timeline: list[tuple[float, str]] = []
        self.t0 = time.time()
        self.watch = ContainerWatch(
            {"name": name, **spec["known"]},
            lambda line: self.timeline.append((time.time() - self.t0, line)),
            set(),
        )
        self.watch.started_at = self.t0
        env = {**os.environ, **spec["env"], **SAFE_ENV}
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *argv]
        self.log = (out / f"{name}.log").open("wb")
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:  # bytes, split at \n only, as Docker stamps them
            self.log.write(raw)
            self.log.flush()
            text = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(text)
            first, *redraws = text.split("\r")  # the gate reads text mode: \r ends a line, unstamped
            for part in [f"{stamp()} {first}", *redraws]:
                self.watch.read_line(part)

    def wait(self, timeout: float) -> float | None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self.reader.join(5)
        return time.time() - self.t0


def gate(spec: dict[str, Any], steps: str, out: Path) -> dict[str, Any]:
    """``python -m components.gate`` as the stack runs it, against the engine's own port."""
    cmd = [sys.executable, "-m", "components.gate", "--endpoint", f"{BASE}/v1", "--api-key-env", "GLM_K",
           "--metrics-url", f"{BASE}/metrics", "--served-name", spec["served_name"], "--steps", steps,
           "--deadline-seconds", "420"]  # fmt: skip
    t = time.time()
    done = subprocess.run(
        cmd, cwd=ROOT, env={**os.environ, "GLM_K": "sk-anything"}, capture_output=True, text=True
    )
    with (out / "gate.err").open("a") as err:
        err.write(f"== python -m components.gate --steps {steps}: rc {done.returncode}\n{done.stderr}")
    try:
        report = json.loads(done.stdout)
    except ValueError:
        report = done.stdout[-2000:]
    return {"steps": steps, "rc": done.returncode, "seconds": round(time.time() - t, 1),
            "said": done.stderr.strip().splitlines()[-3:], "report": report}  # fmt: skip


def stream(max_tokens: int, results: list[dict[str, Any]], prompt: str = "Tell a long story.") -> None:
    body = {"model": SPEC["served_name"], "stream": True, "ignore_eos": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}]}  # fmt: skip
    got: dict[str, Any] = {"chunks": 0, "done": False, "error": None}
    try:
        with (
            httpx.Client(timeout=120) as client,
            client.stream("POST", f"{BASE}/v1/chat/completions", json=body) as r,
        ):
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    got["chunks"] += 1
                elif line.strip() == "data: [DONE]":
                    got["done"] = True
    except httpx.HTTPError as e:
        got["error"] = f"{type(e).__name__}: {e}"
    results.append(got)


def burst(n: int, max_tokens: int) -> tuple[list[dict[str, Any]], list[threading.Thread]]:
    results: list[dict[str, Any]] = []
    threads = [threading.Thread(target=stream, args=(max_tokens, results), daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return results, threads


def generated() -> float:
    return (
        total(parse_samples(httpx.get(f"{BASE}/metrics", timeout=10).text), "vllm:generation_tokens_total")
        or 0.0
    )


def tokens_per_second(n: int, max_tokens: int) -> dict[str, Any]:
    before, t = generated(), time.time()
    results, threads = burst(n, max_tokens)
    for th in threads:
        th.join()
    seconds = time.time() - t
    return {"streams": n, "tokens": generated() - before, "seconds": round(seconds, 2),
            "tokens_per_s": round((generated() - before) / seconds, 1),
            "finished": sum(r["done"] for r in results)}  # fmt: skip


def metric_names(text: str) -> dict[str, list[str]]:
    exported = set(re.findall(r"^(vllm:[a-z_]+)", text, re.M)) | set(
        re.findall(r"^# TYPE (vllm:[a-z_]+)", text, re.M)
    )
    used: set[str] = set()
    for rel in METRIC_USERS:
        path = ROOT / rel
        for f in [path] if path.is_file() else sorted(path.rglob("*")):
            if f.suffix in (".py", ".json"):
                used |= {
                    re.sub(r"_(bucket|sum|count)$", "", n) for n in re.findall(r"vllm:[a-z_]+", f.read_text())
                }
    found = sorted(
        n for n in used if n in exported or (n.endswith("_") and any(e.startswith(n) for e in exported))
    )
    return {"found": found, "missing": sorted(used - set(found))}


def fixtures(spec: dict[str, Any], out: Path) -> None:
    """An SSE stream as it came, byte for byte, and an error body (a request past max-model-len)."""
    body = {"model": spec["served_name"], "stream": True, "max_tokens": 24,
            "messages": [{"role": "user", "content": "What is 13*17?"}]}  # fmt: skip
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", f"{BASE}/v1/chat/completions", json=body) as r:
            (out / "chat-stream.sse").write_bytes(b"".join(r.iter_bytes()))
        bad = client.post(f"{BASE}/v1/chat/completions", json={**body, "stream": False, "max_tokens": 10**6})
        (out / "error-body.json").write_text(f"HTTP {bad.status_code}\n{bad.text}\n")


def main(spec_path: str, out_dir: str) -> int:
    global SPEC
    SPEC = spec = json.loads(Path(spec_path).read_text())
    out = Path(out_dir)
    summary: dict[str, Any] = {"argv": spec["argv"], "changed": spec["changed"]}
    engine = Engine(spec, out, spec["argv"], "serve")
    # The gate's command line follows no process: while it polls, watch vLLM ourselves, and stop
    # at once (with the watcher's diagnosis) if it exits instead of becoming ready.
    while engine.proc.poll() is None and time.time() - engine.t0 < 420:
        try:
            if httpx.get(f"{BASE}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    if engine.proc.poll() is not None:
        engine.wait(10)
        found = diagnose(engine.lines, {t.split("=")[0] for t in spec["argv"] if t.startswith("--")})
        summary["exited_before_ready"] = {"exit_code": engine.proc.returncode,
                                          "seconds": round(time.time() - engine.t0, 1),
                                          "diagnosis": found.describe(),
                                          "last_lines": engine.lines[-8:]}  # fmt: skip
        summary["startup"] = [f"+{at:6.1f}s {line}" for at, line in engine.timeline]
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps(summary["exited_before_ready"], indent=1))
        return 1
    summary["gate"] = [gate(spec, "models,kv_pool,streaming", out)]
    summary["ready_after_s"] = round(time.time() - engine.t0, 1)
    summary["gate"] += [gate(spec, step, out) for step in ("arithmetic", "tool_call")]
    fixtures(spec, out)
    text = httpx.get(f"{BASE}/metrics", timeout=10).text
    (out / "metrics.txt").write_text(text)
    summary["metrics"] = metric_names(text)
    summary["tokens_per_s"] = [tokens_per_second(1, 512), tokens_per_second(spec["max_num_seqs"], 512)]
    # The probe's saturation reading, once quiet and once under a burst past --max-num-seqs.
    settings = SimpleNamespace(max_num_seqs=spec["max_num_seqs"])
    target = SimpleNamespace(
        tls=None, metrics_url=f"{BASE}/metrics", host="h200", path="replica", endpoint=f"{BASE}/v1"
    )
    progress: dict[tuple[str, str], float] = {}
    quiet = saturation(settings, target, None, progress)  # type: ignore[arg-type]
    results, threads = burst(spec["max_num_seqs"] + 16, 1024)
    time.sleep(1.5)
    busy = saturation(settings, target, None, progress)  # type: ignore[arg-type]
    samples = parse_samples(httpx.get(f"{BASE}/metrics", timeout=10).text)
    summary["saturation"] = {"quiet": quiet, "burst": busy, "streams": len(threads),
                             "running": total(samples, "vllm:num_requests_running"),
                             "waiting": total(samples, "vllm:num_requests_waiting")}  # fmt: skip
    for th in threads:
        th.join()
    # Drain: streams in flight, then SIGTERM under --shutdown-timeout.
    results, threads = burst(8, 1500)
    time.sleep(1.0)
    t = time.time()
    engine.proc.send_signal(signal.SIGTERM)
    exited = engine.wait(spec["shutdown_timeout"] + 60)
    for th in threads:
        th.join(30)
    summary["drain"] = {"shutdown_timeout": spec["shutdown_timeout"], "streams": len(threads),
                        "finished": sum(r["done"] for r in results), "cut": sum(not r["done"] for r in results),
                        "chunks": sorted(r["chunks"] for r in results), "exit_seconds": round(time.time() - t, 2),
                        "exit_code": engine.proc.returncode, "exited": exited is not None}  # fmt: skip
    summary["startup"] = [f"+{at:6.1f}s {line}" for at, line in engine.timeline]
    # A bad flag value: vLLM's own words, and the gate's diagnosis of them.
    bad_argv = [t if not t.startswith("--max-num-seqs=") else "--max-num-seqs=abc" for t in spec["argv"]]
    bad = Engine(spec, out, bad_argv, "bad-flag")
    bad_seconds = bad.wait(300)
    found = diagnose(bad.lines, {t.split("=")[0] for t in spec["argv"] if t.startswith("--")})
    summary["bad_flag"] = {"exit_code": bad.proc.returncode, "seconds": bad_seconds and round(bad_seconds, 1),
                           "vllm_said": [line for line in bad.lines if "error" in line][-2:],
                           "diagnosis": found.describe()}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


SPEC: dict[str, Any] = {}

if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
