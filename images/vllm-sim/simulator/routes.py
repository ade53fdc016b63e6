"""One function per endpoint, each given the request's handler; ``ROUTES`` maps method and path to it.

Chat and (legacy) completions share one flow (``_complete``): the preamble (the 'http-500' fault,
the JSON body, refused fields, the model, ``max_tokens``), the stream's shape and ``n``, their own
fields, prompts and plans (with the context-length checks), the 'silent' fault, then
:func:`~simulator.generation.generate` runs the request's sequences through the engine and answers.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

from simulator import responses, tokenizer
from simulator.config import FAULTS
from simulator.errors import HTTPError, bad_request, engine_failure
from simulator.generation import Prompt, generate
from simulator.plan import completion_plan, make_plan
from simulator.request_fields import cache_salt, choices_n, completion_prompts, output_budget, stream_shape
from simulator.server import FAULTS_PATH, Handler
from simulator.startup import log


# ---- the simulator's own endpoint ---------------------------------------------------------
def sim_faults(http: Handler) -> None:
    """The runtime fault switch (``VLLM_SIM_RUNTIME_FAULTS=1``): ``PUT {"faults": [...]}`` replaces
    the faults of the running simulator (``[]`` heals it); ``GET`` shows them."""
    cfg = http.server.cfg
    if http.command == "PUT":
        body = http.read_json()
        wanted = body.get("faults")
        if not isinstance(wanted, list) or not all(isinstance(f, str) for f in wanted):
            raise bad_request('faults must be a list of fault names, e.g. {"faults": ["wrong-answer"]}')
        unknown = set(wanted) - FAULTS
        if unknown:
            raise bad_request(f"unknown fault(s) {sorted(unknown)}; known: {sorted(FAULTS)}")
        # One assignment of an immutable set: a request in flight sees the old or the new faults.
        cfg.faults = frozenset(wanted)
        log(f"faults switched at runtime: {sorted(cfg.faults)}", cfg.quiet)
    http.send_json(200, {"faults": sorted(cfg.faults)})


# ---- simple endpoints ------------------------------------------------------------------------
def health(http: Handler) -> None:
    http.send_body(200, b"", None)


def version(http: Handler) -> None:
    http.send_json(200, {"version": http.server.cfg.version})


def _trickle(http: Handler, body: bytes) -> None:
    """The 'models-trickle' fault: headers at once, then the body one byte a second."""
    http.send_response(200)
    http.send_header("content-type", "application/json")
    http.send_header("content-length", str(len(body)))
    http.end_headers()
    for i in range(len(body)):
        if not http.alive() or http.server.stop.wait(0 if i == 0 else 1.0):
            break
        http.wfile.write(body[i : i + 1])
        http.wfile.flush()
    http.close_connection = True


def models(http: Handler) -> None:
    cfg = http.server.cfg
    created = int(time.time())
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": cfg.model,
            "parent": None,
            "max_model_len": cfg.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        for name in cfg.served_names
    ]
    if "models-trickle" in cfg.faults:
        _trickle(http, json.dumps({"object": "list", "data": data}).encode())
        return
    http.send_json(200, {"object": "list", "data": data})


def metrics(http: Handler) -> None:
    body = http.server.engine.render_metrics().encode()
    http.send_body(200, body, "text/plain; version=0.0.4; charset=utf-8")


def _check_model(http: Handler, body: dict) -> None:
    model = body.get("model")
    if model not in (None, "") and model not in http.server.cfg.served_names:
        raise HTTPError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")


def tokenize(http: Handler) -> None:
    body = http.read_json()
    _check_model(http, body)
    if "messages" in body:
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise bad_request("messages must be a list")
        text = tokenizer.render_chat(messages, body.get("tools"))
    elif "prompt" in body:
        text = str(body.get("prompt"))
    else:
        raise bad_request("Either prompt or messages is required")
    pieces = tokenizer.tokenize(text)
    ids = [tokenizer.token_id(p) for p in pieces]
    with http.server.vocab_lock:
        if len(http.server.vocab) < 1_000_000:
            http.server.vocab.update({tokenizer.token_id(p): p for p in pieces})
    http.send_json(
        200,
        {
            "count": len(pieces),
            "max_model_len": http.server.cfg.max_model_len,
            "tokens": ids,
            "token_strs": pieces if body.get("return_token_strs") else None,
        },
    )


def detokenize(http: Handler) -> None:
    body = http.read_json()
    _check_model(http, body)
    tokens = body.get("tokens")
    if not isinstance(tokens, list):
        raise bad_request("tokens must be a list of integers")
    with http.server.vocab_lock:
        text = "".join(http.server.vocab.get(t, "<unk>") for t in tokens)
    http.send_json(200, {"prompt": text})


# ---- generation ------------------------------------------------------------------------------
def chat(http: Handler) -> None:
    _complete(http, _chat_request, chat=True)


def completions(http: Handler) -> None:
    _complete(http, _completion_request, chat=False)


def _complete(
    http: Handler,
    read: Callable[[Handler, dict, int | None], list],
    chat: bool,
) -> None:
    """What chat and completions share: the preamble, the stream's shape and ``n`` (read as
    vLLM's pydantic models read them), the request's own fields (``read`` checks them and gives
    its prompts, each with its plan and output budget), the 'silent' fault, then the run."""
    preamble = _read_generation(http)
    if preamble is None:
        return
    body, max_tokens = preamble
    shape = stream_shape(body, http.server.cfg.force_include_usage)
    n = choices_n(body, chat)
    prompts = read(http, body, max_tokens)
    if _answered(http):
        generate(http, prompts, n, chat, shape)


def responses_api(http: Handler) -> None:
    preamble = _read_generation(http)
    if preamble is not None:
        responses.answer(http, preamble[0])


def _chat_request(http: Handler, body: dict, max_tokens: int | None) -> list:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages: Field required (a non-empty list)", "messages")
    if not all(isinstance(m, dict) for m in messages):
        raise bad_request("messages: every message must be an object", "messages")
    tools = body.get("tools") or None
    if tools is not None and not isinstance(tools, list):
        raise bad_request("tools must be a list", "tools")
    tool_choice = _tool_choice(http, body, tools)
    pieces = tokenizer.tokenize(tokenizer.render_chat(messages, tools))
    param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = output_budget(http.server.cfg, len(pieces), max_tokens, param)
    body = dict(body, tool_choice=tool_choice) if tools else body
    plan = make_plan(http.server.cfg, body, messages, max_tokens)
    return [Prompt(pieces, plan, max_tokens, cache_salt(body))]


def _completion_request(http: Handler, body: dict, max_tokens: int | None) -> list:
    """A prompt per string or token-id list in ``prompt``, each checked against the context."""
    cfg = http.server.cfg
    if max_tokens is None:
        max_tokens = cfg.default_max_tokens
    prompts = []
    for prompt in completion_prompts(body):
        if isinstance(prompt, str):
            pieces, text = tokenizer.tokenize(prompt), prompt
        else:
            pieces, text = [f"<{t}>" for t in prompt], ""
        budget = output_budget(cfg, len(pieces), max_tokens, "max_tokens")
        prompts.append(Prompt(pieces, completion_plan(cfg, text, budget), budget, cache_salt(body)))
    return prompts


def _read_generation(http: Handler) -> tuple[dict, int | None] | None:
    """The preamble of chat and completions: the body and its ``max_tokens`` (None: no limit asked),
    after the 'http-500' fault, the refused fields and the model; None when already answered."""
    if "http-500" in http.server.cfg.faults:
        http.read_body()
        http.send_json(500, engine_failure())
        return None
    body = http.read_json()
    for name in sorted(http.server.cfg.reject_fields & set(body)):
        detail = [
            {
                "type": "extra_forbidden",
                "loc": ("body", name),
                "msg": "Extra inputs are not permitted",
                "input": body[name],
            }
        ]
        raise bad_request(str(detail), name)
    _check_model(http, body)
    max_tokens = body.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    return body, max_tokens


def _tool_choice(http: Handler, body: dict, tools: list | None) -> object:
    """The request's tool choice ("auto" when tools come without one), refused as vLLM refuses it."""
    tool_choice = body.get("tool_choice")
    if tools and tool_choice is None:
        tool_choice = "auto"
    if tool_choice == "auto" and tools and not http.server.cfg.auto_tool_choice:
        raise bad_request(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
            "tool_choice",
        )
    if tool_choice not in (None, "auto", "none", "required") and not isinstance(tool_choice, dict):
        raise bad_request(f"Invalid tool_choice: {tool_choice!r}", "tool_choice")
    if tool_choice not in (None, "none") and not tools:
        raise bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice")
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        names = [(t.get("function") or {}).get("name") for t in tools or []]
        if wanted not in names:
            raise bad_request(f"Tool '{wanted}' has not been passed in `tools`.", "tool_choice")
    return tool_choice


def _answered(http: Handler) -> bool:
    """False when the 'silent' fault holds the request unanswered (read, never answered)."""
    if "silent" not in http.server.cfg.faults:
        return True
    while http.alive():
        if http.server.stop.wait(0.1):
            break
    http.close_connection = True
    return False


ROUTES: dict[tuple[str, str], Callable[[Handler], None]] = {
    ("GET", "/health"): health,
    ("GET", "/ping"): health,
    ("POST", "/ping"): health,
    ("GET", "/version"): version,
    ("GET", "/v1/models"): models,
    ("GET", "/metrics"): metrics,
    ("POST", "/tokenize"): tokenize,
    ("POST", "/detokenize"): detokenize,
    ("POST", "/v1/chat/completions"): chat,
    ("POST", "/v1/completions"): completions,
    ("POST", "/v1/responses"): responses_api,
    ("GET", FAULTS_PATH): sim_faults,
    ("PUT", FAULTS_PATH): sim_faults,
}
