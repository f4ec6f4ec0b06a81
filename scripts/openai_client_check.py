#!/usr/bin/env python3
"""Checks folio against the official `openai` Python client (pip install openai).

Streams a chat completion with stream_options.include_usage and asserts that content and a
final usage chunk arrive; also runs a non-streaming completion, and a chat completion with
response_format json_schema whose content must parse and follow the schema; tool calls;
the Responses API (create, stream, history, an unknown previous_response_id); embeddings (width, norm,
batched equal to single, base64).

Usage: openai_client_check.py [BASE_URL]   (default: $FOLIO_BASE_URL or http://127.0.0.1:8000/v1)
"""
import json
import os
import sys

from openai import NotFoundError, OpenAI


def main() -> int:
    base_url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FOLIO_BASE_URL", "http://127.0.0.1:8000/v1")
    client = OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "folio"))

    models = client.models.list()
    model = models.data[0].id
    print(f"models: {[m.id for m in models.data]}")

    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello in five words."}],
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, roles, finish = [], None, [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                text.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    content = "".join(text)
    print(f"stream: content={content!r} roles={roles} finish_reason={finish} usage={usage}")
    assert roles[:1] == ["assistant"], f"first delta must carry role assistant, got {roles}"
    assert content, "no content streamed"
    assert finish in ("stop", "length"), f"finish_reason {finish!r}"
    assert usage is not None, "no usage chunk although stream_options.include_usage was set"
    assert usage.completion_tokens > 0 and usage.prompt_tokens > 0, usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage

    comp = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
    print(f"completion: text={comp.choices[0].text!r} usage={comp.usage}")
    assert comp.choices[0].finish_reason in ("stop", "length") and comp.usage.completion_tokens > 0, comp

    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "population": {"type": "integer", "minimum": 0, "maximum": 100000000},
            "coastal": {"type": "boolean"},
        },
        "required": ["city", "population", "coastal"],
        "additionalProperties": False,
    }
    structured = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Describe a city as JSON."}],
        max_tokens=96,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}},
    )
    content = structured.choices[0].message.content
    print(f"json_schema: content={content!r} finish_reason={structured.choices[0].finish_reason}")
    record = json.loads(content)
    assert set(record) == {"city", "population", "coastal"}, record
    assert isinstance(record["city"], str) and len(record["city"]) <= 20, record
    assert isinstance(record["population"], int) and 0 <= record["population"] <= 100000000, record
    assert isinstance(record["coastal"], bool), record

    # Tools: tool_choice="required" gives a call whose arguments validate against the
    # function's parameters; the streamed deltas reassemble into the same call; a follow-up
    # turn with the tool's result is accepted.
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                       "required": ["city"], "additionalProperties": False}}}]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=model, messages=ask, tools=tools, tool_choice="required",
                                       max_tokens=48, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    args = json.loads(call.function.arguments)
    assert call.function.name == "get_weather" and set(args) == {"city"} and isinstance(args["city"], str), call
    print(f"tool call: {call.function.name}({call.function.arguments})")
    name, arguments = "", ""
    for chunk in client.chat.completions.create(model=model, messages=ask, tools=tools, tool_choice="required",
                                                max_tokens=48, temperature=0, stream=True):
        for c in chunk.choices:
            for tc in c.delta.tool_calls or []:
                name += tc.function.name or ""
                arguments += tc.function.arguments or ""
    assert (name, arguments) == (call.function.name, call.function.arguments), (name, arguments)
    follow = client.chat.completions.create(
        model=model,
        messages=ask + [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "22 degrees and sunny"},
        ],
        tools=tools, max_tokens=24, temperature=0)
    assert follow.choices[0].finish_reason in ("stop", "length", "tool_calls"), follow
    print(f"follow-up turn: {follow.choices[0].message.content!r}")

    # Responses API: a non-streaming response, then the same request streamed through
    # the SDK's event accumulator (responses.stream) and as raw events (stream=True).
    ask = dict(model=model, instructions="Answer briefly.", input="Name three colours.",
               max_output_tokens=400, temperature=0)
    resp = client.responses.create(**ask)
    print(f"responses: status={resp.status} output_text={resp.output_text!r} usage={resp.usage}")
    assert resp.object == "response" and resp.status == "completed", resp
    assert resp.output_text, "no output text"
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens, resp.usage
    with client.responses.stream(**ask) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == resp.output_text, (deltas, final.output_text)
    kinds, seqs = [], []
    for event in client.responses.create(**ask, stream=True):
        kinds.append(event.type)
        seqs.append(event.sequence_number)
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    assert seqs == list(range(len(seqs))), seqs
    print(f"responses stream: {len(deltas)} deltas, events {sorted(set(kinds))}")
    history = client.responses.create(model=model, max_output_tokens=16, temperature=0, input=[
        {"role": "user", "content": "Name three colours."},
        {"role": "assistant", "content": [{"type": "output_text", "text": resp.output_text}]},
        {"role": "user", "content": [{"type": "input_text", "text": "And one more?"}]},
    ])
    assert history.status in ("completed", "incomplete") and history.output_text, history
    try:
        client.responses.create(model=model, input="x", previous_response_id="resp_0")
        raise AssertionError("an unknown previous_response_id must be a 404")
    except NotFoundError as e:
        assert e.body["code"] == "previous_response_not_found", e.body

    # Embeddings: the model's width, norm 1, identical input -> identical vector, and a
    # batch equal to its inputs embedded one by one (each input is its own engine request).
    texts = ["The cat sat on the mat.", "Paris is the capital of France.", "The cat sat on the mat."]
    batch = client.embeddings.create(model=model, input=texts, encoding_format="float")
    vecs = [d.embedding for d in batch.data]
    width = len(vecs[0])
    assert width > 0 and all(len(v) == width for v in vecs), [len(v) for v in vecs]
    assert all(abs(sum(x * x for x in v) - 1.0) < 1e-4 for v in vecs)
    assert vecs[0] == vecs[2] and vecs[0] != vecs[1]
    for text, v in zip(texts, vecs):
        single = client.embeddings.create(model=model, input=text, encoding_format="float").data[0].embedding
        assert max(abs(a - b) for a, b in zip(single, v)) <= 1e-6, text
    # Without encoding_format the SDK asks for base64 and decodes it itself.
    b64 = client.embeddings.create(model=model, input=texts[1]).data[0].embedding
    assert len(b64) == width and max(abs(a - b) for a, b in zip(b64, vecs[1])) <= 1e-6
    assert batch.usage.prompt_tokens > 0 and batch.usage.total_tokens == batch.usage.prompt_tokens
    print(f"embeddings: {len(vecs)} vectors of width {width}, usage {batch.usage}")

    print("openai client check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
