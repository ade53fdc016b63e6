#!/usr/bin/env python3
"""The usage meter's per-key token counts against the engine's own counters, one request shape at a time.

    # here, in the project's virtualenv: the front's nginx.conf as the stack renders it (a800, the meter on)
    PYTHONPATH=. .venv/bin/python scripts/h200/meter_exactness.py render .h200/part2/front.conf
    # wherever the engine runs (here against the simulator, there against vLLM 0.25.0):
    python3 scripts/h200/meter_exactness.py run --engine vllm|sim --spec .h200/serve.json \\
        --conf .h200/part2/front.conf --nginx-root .h200/part2/nginx "$OUT"
    # the front alone, from its folder (no engine): the recipe's check
    python3 scripts/h200/meter_exactness.py check --conf .h200/part2/front.conf --nginx-root .h200/part2/nginx "$OUT"

``run`` starts the engine with the argv ``render_argv.py`` rendered (``.h200/serve.json``; ``--engine
sim``: ``images/vllm-sim`` behind a ``vllm.entrypoints.cli.main`` shim, started exactly as vLLM
is), then the front: Debian's nginx and its Lua module unpacked into ``--nginx-root`` (``dpkg -x``,
never into /), with the rendered config and, added here only, where that folder's modules and Lua
libraries lie. Then, for the keys alice and bob in turn, one request of each shape in ``SHAPES``:
what the client got (its usage, if any), the engine's ``vllm:prompt_tokens_total`` and
``vllm:generation_tokens_total`` deltas and the meter's per-key deltas (``/metrics/usage``), each
read once both have settled. ``OUT``: ``meter-exactness.json`` (everything, with each answer's
raw bytes, trimmed), ``meter-exactness.md`` (the table), ``serve.log``, ``front.log``.

The front's config is rendered here, not there: the GPU host lacks the config's own requirements
(``zxcvbn``, ``yaml``); the file it runs is the one ``render`` wrote, byte for byte, but for the
three lines ``from_folder`` adds.

Past 400 lines, kept whole: it travels alone to the GPU host (the device payload), which has none of
this repository's modules, so its render, run and check steps cannot live elsewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "h200"))

from components.gate.metrics import parse_samples, total  # noqa: E402

KEYS = {"alice": "sk-alice-1403f1510d19d5295321", "bob": "sk-bob-0d08fac0336e7974aa11"}
PLACES = {"front_port": 18080, "status_port": 19146, "engine_port": None, "runtime": "/tmp/h200-meter-front"}
"""Where the front listens, its status port (the meter's counters), the engine's port (None: the
profile's) and nginx's prefix (its temporary files and the meter's counters file, readable by
``nobody``); ``render`` writes them beside the config (``<conf>.json``) for ``run``."""
MODULES_INCLUDE = "include /etc/nginx/modules-enabled/*.conf;"
"""The rendered config's way to Debian's Lua module (components/render/nginx_conf.py
``LUA_MODULES_INCLUDE``); a folder's nginx loads the same modules by their own paths instead."""
SETTLE_SECONDS = 1.5
"""Both counters unchanged this long (and nothing running in the engine): a shape's reading is final."""
PROMPT = "Count the tokens of this sentence, then write a long story about a lighthouse."


def render(path: Path, places: dict[str, Any]) -> None:
    """The front's ``nginx.conf`` as the stack renders it for the a800 profile, the meter on,
    upstream the engine's port on the loopback; ``places`` beside it."""
    from render_argv import TARGET, fitted

    from components.config import build_stack_config
    from components.render.nginx_conf import render_nginx_conf
    from components.render.nginx_meter import MeterRoute

    spec = fitted("a800")
    places = {**places, "engine_port": places["engine_port"] or spec["port"]}
    config = build_stack_config({"hardware": "a800", "target": TARGET, "front": {"allowPlainHttp": True}})
    runtime = places["runtime"]
    route = MeterRoute(int(str(spec["max_num_seqs"])), 1, f"{runtime}/usage/counters.json")
    conf = render_nginx_conf(
        config.front, f"127.0.0.1:{places['engine_port']}", KEYS, listen=f"127.0.0.1:{places['front_port']}",
        runtime_dir=runtime, meter=route, status_listen=f"127.0.0.1:{places['status_port']}",
    )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(conf)
    Path(f"{path}.json").write_text(json.dumps(places, indent=1) + "\n")


def from_folder(conf: str, folder: Path) -> str:
    """``conf`` for an nginx unpacked into ``folder``: its two modules by path (ndk first, as
    Debian's snippets order them) and its Lua libraries (resty.core, cjson) ahead of the defaults."""
    if conf.count(MODULES_INCLUDE) != 1:
        raise SystemExit(
            f"the rendered config has {conf.count(MODULES_INCLUDE)} '{MODULES_INCLUDE}' lines, not 1"
        )
    modules = folder / "usr/lib/nginx/modules"
    load = f"load_module {modules}/ndk_http_module.so;\nload_module {modules}/ngx_http_lua_module.so;"
    lua = (
        f'    lua_package_path "{folder}/usr/share/lua/5.1/?.lua;{folder}/usr/share/lua/5.1/?/init.lua;;";\n'
        f'    lua_package_cpath "{folder}/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;;";\n'
    )
    conf = conf.replace(MODULES_INCLUDE, load)
    head, http, rest = conf.partition("\nhttp {\n")
    if not http:
        raise SystemExit("the rendered config has no 'http {' block")
    return head + http + lua + rest


# ---- the engine and the front ----------------------------------------------------------------------

SIM_SHIM = """import os, sys
sim = os.environ["GLM_VLLM_SIM"]
os.execv(sys.executable, [sys.executable, sim, *sys.argv[1:]])
"""


@contextlib.contextmanager
def engine(kind: str, spec: dict[str, Any], out: Path) -> Iterator[subprocess.Popen]:
    """``python -m vllm.entrypoints.cli.main serve <argv>`` (the simulator answers for it with ``sim``)."""
    from rehearse import SAFE_ENV

    env = {**os.environ, **spec["env"], **SAFE_ENV}
    shim = None
    if kind == "sim":
        shim = Path(tempfile.mkdtemp(prefix="vllm-shim-"))
        cli = shim / "vllm" / "entrypoints" / "cli"
        cli.mkdir(parents=True)
        for package in (shim / "vllm", shim / "vllm" / "entrypoints", cli):
            (package / "__init__.py").write_text("")
        (cli / "main.py").write_text(SIM_SHIM)
        env.update(PYTHONPATH=f"{shim}:{env.get('PYTHONPATH', '')}", GLM_VLLM_SIM=str(ROOT / "images/vllm-sim/vllm_sim.py"),
                   VLLM_SIM_DECODE_TOKEN_SECONDS="0.005", VLLM_SIM_QUIET="1")  # fmt: skip
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", *spec["argv"]]
    with (out / "serve.log").open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        if shim:
            shutil.rmtree(shim, ignore_errors=True)


def wait_ready(url: str, proc: subprocess.Popen, seconds: float, log: Path) -> float:
    t0 = time.time()
    while time.time() - t0 < seconds:
        if proc.poll() is not None:
            raise SystemExit(
                f"{str(proc.args)[:160]} exited with {proc.returncode}:\n{log.read_text()[-4000:]}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return time.time() - t0
        time.sleep(0.5)
    raise SystemExit(f"{url} not ready in {seconds} s:\n{log.read_text()[-4000:]}")


@contextlib.contextmanager
def front(conf_path: Path, places: dict[str, Any], folder: Path, out: Path) -> Iterator[subprocess.Popen]:
    runtime = Path(places["runtime"])
    shutil.rmtree(runtime, ignore_errors=True)
    runtime.mkdir(parents=True)
    runtime.chmod(0o755)
    folder = folder.resolve()
    conf = runtime / "nginx.conf"
    conf.write_text(from_folder(conf_path.read_text(), folder))
    libs = [folder / "usr/lib/x86_64-linux-gnu", folder / "lib/x86_64-linux-gnu"]
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(map(str, libs))}
    nginx = str(folder / "usr/sbin/nginx")
    argv = [nginx, "-c", str(conf), "-p", str(runtime), "-e", "stderr", "-g", "daemon off;"]
    checked = subprocess.run([*argv[:-2], "-t"], env=env, capture_output=True, text=True)
    if checked.returncode != 0:
        raise SystemExit(f"nginx -t: {checked.stderr}")
    with (out / "front.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{places['status_port']}/metrics/usage", proc, 15, out / "front.log")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


# ---- the readings ----------------------------------------------------------------------------------------


def engine_counts(base: str) -> dict[str, float]:
    samples = parse_samples(httpx.get(f"{base}/metrics", timeout=10).text)
    return {
        "prompt": total(samples, "vllm:prompt_tokens_total") or 0.0,
        "generation": total(samples, "vllm:generation_tokens_total") or 0.0,
        "busy": (total(samples, "vllm:num_requests_running") or 0.0)
        + (total(samples, "vllm:num_requests_waiting") or 0.0),
    }


def meter_counts(places: dict[str, Any], key: str) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{places['status_port']}/metrics/usage", timeout=10).text
    samples = parse_samples(text)
    return {
        "prompt": total(samples, "glm_key_prompt_tokens_total", client=key) or 0.0,
        "completion": total(samples, "glm_key_completion_tokens_total", client=key) or 0.0,
        "in_flight": total(samples, "glm_key_in_flight", client=key) or 0.0,
        "requests": total(samples, "glm_key_requests_total", client=key) or 0.0,
        "unmetered": total(samples, "glm_key_unmetered_total", client=key) or 0.0,
    }


def settled(base: str, places: dict[str, Any], key: str) -> tuple[dict[str, float], dict[str, float], float]:
    """Both readings once unchanged for ``SETTLE_SECONDS`` with nothing running (at most 30 s)."""
    t0 = time.time()
    last, since = None, time.time()
    while True:
        now = (engine_counts(base), meter_counts(places, key))
        quiet = now[0]["busy"] == 0 and now[1]["in_flight"] == 0
        if now != last or not quiet:
            last, since = now, time.time()
        elif time.time() - since >= SETTLE_SECONDS or time.time() - t0 > 30:
            return now[0], now[1], round(time.time() - t0, 2)
        time.sleep(0.25)


def sse_events(raw: bytes) -> list[str]:
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n")
    return [e for e in text.split("\n\n") if e.strip()]


def usage_in(obj: Any) -> dict[str, Any] | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("usage"), dict):
        return obj["usage"]
    if isinstance(obj.get("response"), dict) and isinstance(obj["response"].get("usage"), dict):
        return obj["response"]["usage"]
    return None


def has_text(event: Any) -> bool:
    """An event that carries generated text: one token each, as vLLM streams (chat, completions, responses)."""
    if not isinstance(event, dict):
        return False
    if str(event.get("type", "")).endswith(".delta"):
        return bool(event.get("delta"))
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        if (
            choice.get("text")
            or delta.get("content")
            or delta.get("reasoning")
            or delta.get("reasoning_content")
        ):
            return True
    return False


def client_usage(raw: bytes, streamed: bool) -> dict[str, Any]:
    """What the client saw: its usage (the last, for a stream), and for a stream the events."""
    if not streamed:
        try:
            body = json.loads(raw)
        except ValueError:
            return {"usage": None}
        return {"usage": usage_in(body)}
    events, usages, done, texts = sse_events(raw), [], False, 0
    for event in events:
        for line in event.splitlines():
            data = line.removeprefix("data:").strip() if line.startswith("data:") else None
            if data == "[DONE]":
                done = True
            elif data:
                with contextlib.suppress(ValueError):
                    decoded = json.loads(data)
                    texts += has_text(decoded)
                    found = usage_in(decoded)
                    if found:
                        usages.append(found)
    return {"usage": usages[-1] if usages else None, "events": len(events), "usage_events": len(usages),
            "text_events": texts, "done": done}  # fmt: skip


def tokens_of(usage: dict[str, Any] | None) -> tuple[int, int] | None:
    if not usage:
        return None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    return int(prompt or 0), int(completion or 0)


def shapes(model: str) -> list[dict[str, Any]]:
    """One request of each shape; ``hang_up_after``: the client closes after that many events."""
    messages = [{"role": "user", "content": PROMPT}]
    chat = {"model": model, "messages": messages, "max_tokens": 24, "ignore_eos": True}
    prompts = [PROMPT, "Name four rivers.", "Once upon a time", "Describe the sea at night in detail."]
    completions = {"model": model, "prompt": prompts, "max_tokens": 16, "ignore_eos": True}
    responses = {"model": model, "input": PROMPT, "max_output_tokens": 24}
    chat_url, completions_url, responses_url = "/v1/chat/completions", "/v1/completions", "/v1/responses"
    return [
        {"shape": "chat", "url": chat_url, "body": chat},
        {"shape": "chat stream (no stream_options)", "url": chat_url, "body": {**chat, "stream": True}},
        {"shape": "chat stream include_usage", "url": chat_url,
         "body": {**chat, "stream": True, "stream_options": {"include_usage": True}}},
        {"shape": 'chat "stream": 1', "url": chat_url, "body": {**chat, "stream": 1}},
        {"shape": 'chat "stream": "true"', "url": chat_url, "body": {**chat, "stream": "true"}},
        {"shape": "chat n=3", "url": chat_url, "body": {**chat, "n": 3}},
        {"shape": "completions 4 prompts", "url": completions_url, "body": completions},
        {"shape": "completions 4 prompts stream", "url": completions_url, "body": {**completions, "stream": True}},
        {"shape": "responses", "url": responses_url, "body": responses},
        {"shape": "responses stream", "url": responses_url, "body": {**responses, "stream": True}},
        {"shape": "chat stream, client hangs up after 10 events", "url": chat_url,
         "body": {**chat, "stream": True, "max_tokens": 300}, "hang_up_after": 10},
        {"shape": "refused: max_tokens past max-model-len", "url": chat_url, "body": {**chat, "max_tokens": 10**6}},
    ]  # fmt: skip


def send(shape: dict[str, Any], front_port: int, key: str) -> dict[str, Any]:
    """The request as raw JSON bytes (``"stream": 1`` included), the answer as raw bytes."""
    headers = {"Authorization": f"Bearer {KEYS[key]}", "Content-Type": "application/json"}
    data = json.dumps(shape["body"]).encode()
    url = f"http://127.0.0.1:{front_port}{shape['url']}"
    chunks: list[bytes] = []
    status, content_type, error = None, "", None
    t0 = time.time()
    try:
        with (
            httpx.Client(timeout=120) as client,
            client.stream("POST", url, content=data, headers=headers) as r,
        ):
            status, content_type = r.status_code, r.headers.get("content-type", "")
            if "hang_up_after" in shape:
                events = 0
                for chunk in r.iter_raw():
                    chunks.append(chunk)
                    events = len(sse_events(b"".join(chunks)))
                    if events >= shape["hang_up_after"]:
                        break  # leaving the block closes the connection mid-stream
            else:
                chunks.extend(r.iter_raw())
    except httpx.HTTPError as e:
        error = f"{type(e).__name__}: {e}"
    raw = b"".join(chunks)
    streamed = "text/event-stream" in content_type
    if "hang_up_after" in shape:
        # Keep exactly the events the client read before it hung up.
        raw = ("\n\n".join(sse_events(raw)[: shape["hang_up_after"]]) + "\n\n").encode()
    return {"status": status, "content_type": content_type, "seconds": round(time.time() - t0, 2),
            "error": error, "raw": raw, "streamed": streamed}  # fmt: skip


def trimmed(raw: bytes, limit: int = 6000) -> str:
    text = raw.decode("utf-8", "replace")
    return (
        text
        if len(text) <= limit
        else f"{text[: limit // 2]}\n…[{len(text) - limit} chars]…\n{text[-limit // 2 :]}"
    )


def measure(base: str, places: dict[str, Any], model: str) -> list[dict[str, Any]]:
    rows = []
    for shape in shapes(model):
        for key in KEYS:
            engine_before, meter_before, _ = settled(base, places, key)
            other = next(k for k in KEYS if k != key)
            other_before = meter_counts(places, other)
            answer = send(shape, places["front_port"], key)
            engine_after, meter_after, waited = settled(base, places, key)
            other_after = meter_counts(places, other)
            seen = client_usage(answer["raw"], answer["streamed"])
            client = tokens_of(seen["usage"])
            engine_delta = (round(engine_after["prompt"] - engine_before["prompt"]),
                            round(engine_after["generation"] - engine_before["generation"]))  # fmt: skip
            meter_delta = (round(meter_after["prompt"] - meter_before["prompt"]),
                           round(meter_after["completion"] - meter_before["completion"]))  # fmt: skip
            row = {
                "shape": shape["shape"], "key": key, "url": shape["url"], "request": shape["body"],
                "status": answer["status"], "error": answer["error"], "seconds": answer["seconds"],
                "client": {**seen, "tokens": client}, "engine": engine_delta, "meter": meter_delta,
                "meter_equals_engine": meter_delta == engine_delta,
                "verdict": verdict(shape, meter_delta, engine_delta),
                "meter_equals_client": None if client is None else meter_delta == client,
                "other_key_moved": other_after["prompt"] != other_before["prompt"]
                or other_after["completion"] != other_before["completion"],
                "meter_requests": meter_after["requests"] - meter_before["requests"],
                "unmetered": meter_after["unmetered"] - meter_before["unmetered"],
                "settled_after_s": waited, "raw": trimmed(answer["raw"]),
            }  # fmt: skip
            rows.append(row)
            print(table_row(row), flush=True)
    return rows


def verdict(shape: dict[str, Any], meter: tuple[int, int], engine: tuple[int, int]) -> str:
    """``exact``: the meter counted what the engine did. A hang-up is charged what the client was
    sent (meter_answer.lua), so there ``sent``: the prompt exact, 0 < completion <= the engine's."""
    if meter == engine:
        return "exact"
    if "hang_up_after" in shape and meter[0] == engine[0] and 0 < meter[1] <= engine[1]:
        return "sent"
    return "MISCOUNT"


HEADER = ("| shape | key | HTTP | client usage (prompt/completion) | engine Δprompt/Δgen | "
          "meter Δprompt/Δcompletion | meter = engine? | meter = client? | verdict |\n"
          "|---|---|---|---|---|---|---|---|---|")  # fmt: skip


def table_row(row: dict[str, Any]) -> str:
    client = row["client"]
    usage = "/".join(map(str, client["tokens"])) if client["tokens"] else "none"
    if row["client"].get("events") is not None:
        usage += (f" ({client['events']} events, {client['text_events']} with text, {client['usage_events']} with usage"
                  f"{', [DONE]' if client['done'] else ''})")  # fmt: skip
    yes = {True: "yes", False: "**no**", None: "–"}
    return (f"| {row['shape']} | {row['key']} | {row['status']} | {usage} | {row['engine'][0]}/{row['engine'][1]} | "
            f"{row['meter'][0]}/{row['meter'][1]} | {yes[row['meter_equals_engine']]} | "
            f"{yes[row['meter_equals_client']]} | {row['verdict']} |")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = json.loads(Path(args.spec).read_text())
    places = json.loads(Path(f"{args.conf}.json").read_text())
    # The engine listens where the front was rendered to find it.
    spec["argv"] = [t for t in spec["argv"] if not t.startswith("--port=")] + [
        f"--port={places['engine_port']}"
    ]
    base = f"http://127.0.0.1:{places['engine_port']}"
    summary: dict[str, Any] = {
        "engine_kind": args.engine,
        "argv": spec["argv"],
        "served_name": spec["served_name"],
    }
    with engine(args.engine, spec, out) as proc:
        summary["ready_after_s"] = round(
            wait_ready(f"{base}/health", proc, args.ready_seconds, out / "serve.log"), 1
        )
        with contextlib.suppress(httpx.HTTPError):
            summary["version"] = httpx.get(f"{base}/version", timeout=5).json()
        print(f"engine ready after {summary['ready_after_s']} s: {summary.get('version')}", flush=True)
        with front(Path(args.conf), places, Path(args.nginx_root), out):
            print(HEADER, flush=True)
            summary["rows"] = measure(base, places, spec["served_name"])
            status = f"http://127.0.0.1:{places['status_port']}/metrics/usage"
            summary["meter_metrics"] = httpx.get(status, timeout=10).text
        with contextlib.suppress(OSError):
            for line in (out / "front.log").read_text().splitlines():
                if "usage meter" in line or "[error]" in line or "[alert]" in line:
                    summary.setdefault("front_errors", []).append(line[-600:])
    rows = summary["rows"]
    summary["all_meter_equals_engine"] = all(r["meter_equals_engine"] for r in rows)
    summary["miscounts"] = [f"{r['shape']} ({r['key']})" for r in rows if r["verdict"] == "MISCOUNT"]
    (out / "meter-exactness.json").write_text(json.dumps(summary, indent=1))
    title = f"# Usage meter vs {args.engine} {(summary.get('version') or {}).get('version', '')}\n\n"
    (out / "meter-exactness.md").write_text(
        title + HEADER + "\n" + "\n".join(table_row(r) for r in rows) + "\n"
    )
    print(f"meter = engine on every shape: {summary['all_meter_equals_engine']}; "
          f"miscounts: {summary['miscounts'] or 'none'}", flush=True)  # fmt: skip
    return 0


def check(args: argparse.Namespace) -> int:
    """The front alone, from its folder: ``nginx -t``, then its counters page answers."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    places = json.loads(Path(f"{args.conf}.json").read_text())
    with front(Path(args.conf), places, Path(args.nginx_root), out):
        page = httpx.get(f"http://127.0.0.1:{places['status_port']}/metrics/usage", timeout=10)
        print(
            f"front from {args.nginx_root}: /metrics/usage {page.status_code}\n{page.text[:400]}", flush=True
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rendering = sub.add_parser("render", help="write the front's nginx.conf (run here)")
    rendering.add_argument("path")
    for place, value in PLACES.items():
        rendering.add_argument(
            f"--{place.replace('_', '-')}", type=type(value) if value else int, default=value
        )
    checking = sub.add_parser("check", help="start the front alone from its folder (no engine)")
    checking.add_argument("--conf", required=True, help="render's nginx.conf")
    checking.add_argument(
        "--nginx-root", required=True, help="the folder Debian's nginx .debs were unpacked into"
    )
    checking.add_argument("out")
    running = sub.add_parser("run", help="start the engine and the front, measure every shape")
    running.add_argument("--engine", choices=("vllm", "sim"), required=True)
    running.add_argument("--spec", required=True, help="render_argv.py's JSON (.h200/serve.json)")
    running.add_argument("--conf", required=True, help="render's nginx.conf")
    running.add_argument(
        "--nginx-root", required=True, help="the folder Debian's nginx .debs were unpacked into"
    )
    running.add_argument("--ready-seconds", type=float, default=300)
    running.add_argument("out")
    args = parser.parse_args()
    if args.command == "render":
        render(Path(args.path), {place: getattr(args, place) for place in PLACES})
        return 0
    return check(args) if args.command == "check" else run(args)


if __name__ == "__main__":
    sys.exit(main())
