#!/usr/bin/env python3
"""Checks folio's Ollama API against the official `ollama` Python client (pip install ollama).

Chat (streamed and not), generate, tags, show, ps, embed, pull with progress (the catalogue
default, `smollm2-135m`: already cached, so quick), `format` as a JSON schema whose output
must parse and follow it, and a tool call (`arguments` an object) with a follow-up turn
carrying its result.

Usage: ollama_client_check.py [HOST]   (default: $OLLAMA_HOST or http://127.0.0.1:8000)
"""
import json
import os
import sys

import ollama


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")


def main() -> int:
    host = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OLLAMA_HOST", "http://127.0.0.1:8000")
    client = ollama.Client(host=host)

    tags = client.list()
    names = [m.model for m in tags.models]
    print(f"tags: {names}")
    check(len(names) >= 1, "tags lists the served model")
    model = names[0]
    details = tags.models[0].details
    check(details.format == "gguf" and details.family and details.quantization_level, f"tags details: {details}")

    shown = client.show(model)
    check("completion" in (shown.capabilities or []), f"show capabilities: {shown.capabilities}")
    check(shown.modelinfo.get("general.architecture") == details.family, "show model_info architecture")
    print(f"show: {shown.details.parameter_size} {shown.details.quantization_level}, capabilities {shown.capabilities}")

    ps = client.ps()
    check(any(m.model == model and m.context_length for m in ps.models), f"ps lists {model} loaded: {ps}")
    print(f"ps: {[(m.model, m.size, m.context_length) for m in ps.models]}")

    messages = [{"role": "user", "content": "Say hello in five words."}]
    opts = {"temperature": 0, "num_predict": 24}
    whole = client.chat(model=model, messages=messages, options=opts)
    check(whole.done and whole.done_reason in ("stop", "length"), f"chat done: {whole}")
    check(whole.message.role == "assistant" and whole.message.content, "chat content")
    check(whole.eval_count and whole.prompt_eval_count and whole.total_duration, "chat counts and durations")
    parts = list(client.chat(model=model, messages=messages, options=opts, stream=True))
    check(len(parts) > 2 and parts[-1].done and not any(p.done for p in parts[:-1]), "chat stream framing")
    streamed = "".join(p.message.content or "" for p in parts)
    check(streamed == whole.message.content, f"streamed {streamed!r} == whole {whole.message.content!r}")
    print(f"chat: {streamed!r} ({parts[-1].eval_count} tokens, {len(parts)} lines)")

    gen = client.generate(model=model, prompt="Say hello in five words.", options=opts)
    check(gen.response == whole.message.content, f"generate {gen.response!r} == chat {whole.message.content!r}")
    gparts = list(client.generate(model=model, prompt="Count to three:", options={"num_predict": 8}, stream=True))
    check(gparts[-1].done and gparts[-1].eval_count, "generate stream ends with done")
    print(f"generate: {gen.response!r}")

    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 24}, "country": {"type": "string", "maxLength": 24}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    r = client.chat(model=model, messages=[{"role": "user", "content": "Name a city and its country as JSON."}],
                    format=schema, options={"temperature": 0, "num_predict": 64})
    out = json.loads(r.message.content)
    check(set(out) == {"city", "country"} and all(isinstance(v, str) for v in out.values()), f"format schema: {out}")
    print(f"format: {out}")

    # SmolLM2-135M answers this with a Hermes `<tool_call>` (folio describes the tools in a
    # system message); stopping at `</tool_call>` ends the turn there, as a tool-calling
    # client would want.
    weather = {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    ask = [{"role": "user", "content": "Call the get_weather tool with city Paris."}]
    r = client.chat(model=model, messages=ask, tools=[weather],
                    options={"temperature": 0, "num_predict": 128, "stop": ["</tool_call>"]})
    calls = r.message.tool_calls or []
    check(len(calls) == 1, f"one tool call: {r.message}")
    check(calls[0].function.name == "get_weather" and isinstance(calls[0].function.arguments, dict),
          f"tool call shape: {calls[0]}")
    check(r.done_reason == "stop" and not r.message.content, f"a tool-call turn: {r}")
    print(f"tools: {calls[0].function.name}({dict(calls[0].function.arguments)})")
    follow = ask + [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "18 degrees and sunny", "tool_name": "get_weather"},
    ]
    r = client.chat(model=model, messages=follow, tools=[weather], options={"num_predict": 24})
    check(r.done and r.message.content is not None, "a follow-up turn with a tool result")

    e = client.embed(model=model, input=["The cat sat on the mat.", "Paris is the capital of France."])
    dims = len(e.embeddings[0])
    check(len(e.embeddings) == 2 and dims > 0 and len(e.embeddings[1]) == dims, "embed shapes")
    norm = sum(x * x for x in e.embeddings[0]) ** 0.5
    check(abs(norm - 1) < 1e-3, f"embed norm {norm}")
    print(f"embed: 2 x {dims}")

    progress = list(client.pull("smollm2-135m", stream=True))
    statuses = [p.status for p in progress]
    check(statuses[0] == "pulling manifest" and statuses[-1] == "success", f"pull statuses: {statuses}")
    layer = [p for p in progress if p.digest]
    check(layer and layer[-1].completed == layer[-1].total > 0, f"pull progress: {layer}")
    check(client.pull("smollm2-135m").status == "success", "pull without stream")
    print(f"pull: {statuses}")

    # A malformed Hub name is refused before any request to the Hub (CI has no Hub access).
    try:
        client.pull("hf:Qwen")
        raise SystemExit("FAIL: a malformed hf: name should be refused")
    except ollama.ResponseError as err:
        check(err.status_code == 400 and "hf:ORG/REPO" in err.error, f"malformed hf: name: {err}")
    try:
        client.chat(model="no-such-model", messages=messages)
        raise SystemExit("FAIL: unknown model should be 404")
    except ollama.ResponseError as err:
        check(err.status_code == 404 and "no-such-model" in err.error, f"unknown model: {err}")

    print("ollama client check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
