#!/usr/bin/env python3
"""Checks folio's /v1/messages against the official `anthropic` Python SDK (pip install anthropic).

A plain message (and count_tokens agreeing with its usage), a streamed one (every event
type, ping included, and usage), a tool round trip (tool_use forced with tool_choice
{"type": "tool"}, then tool_result -> answer), `thinking` (a thinking block when the
model's template thinks; skipped with the reason otherwise), and the SDK's exception
classes for folio's errors.

Usage: anthropic_client_check.py [BASE_URL]   (the server root, default: $FOLIO_ANTHROPIC_URL
or http://127.0.0.1:8000; the SDK adds /v1/messages)
"""
import json
import os
import sys
import urllib.request

import anthropic

# Current SDKs have no sampling arguments (Anthropic's newest models fix them); folio reads
# temperature, top_p and top_k from the body as Anthropic's API did.
GREEDY = {"temperature": 0}

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city name"}},
        "required": ["city"],
    },
}


def served_model(base_url: str, key: str) -> str:
    req = urllib.request.Request(f"{base_url}/v1/models", headers={"x-api-key": key})
    with urllib.request.urlopen(req) as r:
        return json.load(r)["data"][0]["id"]


def text_of(msg) -> str:
    return "".join(b.text for b in msg.content if b.type == "text")


def main() -> int:
    base_url = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FOLIO_ANTHROPIC_URL", "http://127.0.0.1:8000")).rstrip("/")
    key = os.environ.get("ANTHROPIC_API_KEY", "folio")
    client = anthropic.Anthropic(base_url=base_url, api_key=key)
    model = served_model(base_url, key)
    print(f"anthropic {anthropic.__version__}, model {model}")

    # A plain message; count_tokens agrees with its usage.
    system = "You are a concise assistant."
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    msg = client.messages.create(model=model, max_tokens=48, extra_body=GREEDY, system=system, messages=messages,
                                 metadata={"user_id": "folio-check"})
    print(f"message: id={msg.id} stop_reason={msg.stop_reason} usage={msg.usage} text={text_of(msg)!r}")
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_"), msg
    assert msg.content and msg.content[0].type == "text" and text_of(msg), msg
    assert msg.stop_reason in ("end_turn", "max_tokens"), msg.stop_reason
    assert msg.usage.output_tokens > 0 and msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) > 0
    count = client.messages.count_tokens(model=model, system=system, messages=messages)
    prompt = msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)
    print(f"count_tokens: {count.input_tokens} (message prompt {prompt})")
    assert count.input_tokens == prompt, (count, msg.usage)

    # Streamed: the SDK's accumulated message equals the plain one; raw events in order.
    with client.messages.stream(model=model, max_tokens=48, extra_body=GREEDY, system=system, messages=messages) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    print(f"stream: events={sorted(set(kinds))} stop_reason={final.stop_reason} usage={final.usage}")
    assert text_of(final) == text_of(msg), (text_of(final), text_of(msg))
    assert final.stop_reason == msg.stop_reason and final.usage.output_tokens == msg.usage.output_tokens, final
    want = {"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
    assert want <= set(kinds), kinds
    # The SDK swallows ping: read the raw SSE for the whole sequence.
    body = {"model": model, "max_tokens": 16, "temperature": 0, "stream": True, "messages": messages}
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    req = urllib.request.Request(f"{base_url}/v1/messages", data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=120) as resp:
        raw = resp.read().decode()
    names = [line[len("event: "):] for line in raw.splitlines() if line.startswith("event: ")]
    collapsed = [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]]
    print(f"raw events: {collapsed}")
    assert collapsed == ["message_start", "content_block_start", "ping", "content_block_delta",
                         "content_block_stop", "message_delta", "message_stop"], names

    # Tool round trip: forced tool_use, then the tool_result and an answer.
    ask = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
    call_msg = client.messages.create(model=model, max_tokens=128, extra_body=GREEDY, tools=[WEATHER],
                                      tool_choice={"type": "tool", "name": "get_weather"}, messages=ask)
    calls = [b for b in call_msg.content if b.type == "tool_use"]
    print(f"tool_use: stop_reason={call_msg.stop_reason} calls={[(c.id, c.name, c.input) for c in calls]}")
    assert call_msg.stop_reason == "tool_use" and len(calls) == 1, call_msg
    assert calls[0].name == "get_weather" and isinstance(calls[0].input, dict) and "city" in calls[0].input, calls
    with client.messages.stream(model=model, max_tokens=128, extra_body=GREEDY, tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather"}, messages=ask) as s:
        streamed = s.get_final_message()
    scalls = [b for b in streamed.content if b.type == "tool_use"]
    assert streamed.stop_reason == "tool_use" and [c.input for c in scalls] == [calls[0].input], streamed
    history = ask + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in call_msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                      "content": "Sunny, 24 degrees Celsius, light wind."}]},
    ]
    answer = client.messages.create(model=model, max_tokens=96, extra_body=GREEDY, tools=[WEATHER], messages=history)
    if answer.stop_reason == "tool_use":
        print(f"answer under tool_choice auto called a tool again ({answer.content}); asking with tool_choice none")
        answer = client.messages.create(model=model, max_tokens=96, extra_body=GREEDY, tools=[WEATHER],
                                        tool_choice={"type": "none"}, messages=history)
    print(f"tool answer: stop_reason={answer.stop_reason} text={text_of(answer)!r}")
    assert answer.stop_reason in ("end_turn", "max_tokens") and text_of(answer), answer

    # Structured output: output_config.format constrains the text to the schema.
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    shaped = client.messages.create(model=model, max_tokens=96, extra_body=GREEDY, messages=ask,
                                    output_config={"format": {"type": "json_schema", "schema": schema}})
    data = json.loads(text_of(shaped))
    print(f"output_config.format: {data}")
    assert set(data) == {"city", "country"} and all(isinstance(v, str) for v in data.values()), data

    # Thinking: a thinking block where the template thinks.
    think = client.messages.create(model=model, max_tokens=512, extra_body=GREEDY,
                                   thinking={"type": "enabled", "budget_tokens": 1024},
                                   messages=[{"role": "user", "content": "Is 17 a prime number?"}])
    thoughts = [b for b in think.content if b.type == "thinking"]
    if thoughts:
        print(f"thinking: {thoughts[0].thinking[:120]!r}... answer={text_of(think)[:120]!r}")
        assert isinstance(thoughts[0].signature, str) and thoughts[0].thinking, thoughts
    else:
        print(f"thinking: skipped, {model} wrote no <think> block (its chat template does not reason); "
              f"answer={text_of(think)[:80]!r}")

    # Errors arrive as the SDK's exception classes.
    try:
        client.messages.create(model="claude-no-such-model", max_tokens=4, messages=ask)
        raise AssertionError("an unknown model must fail")
    except anthropic.NotFoundError as e:
        print(f"unknown model: {e.status_code} {e.body}")
    try:
        client.messages.create(model=model, max_tokens=4, messages=ask, extra_body={"temperature": 7})
        raise AssertionError("temperature 7 must fail")
    except anthropic.BadRequestError as e:
        print(f"bad temperature: {e.status_code} {e.body}")
        assert e.body["error"]["type"] == "invalid_request_error", e.body
    print("anthropic client check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
