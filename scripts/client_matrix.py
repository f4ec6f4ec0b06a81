#!/usr/bin/env python3
"""Runs the clients people point at a local server against a running `folio serve` and
prints a client x feature table (markdown): which work, and the first error of those that
do not.

Clients (each skipped with a printed reason when its package is missing): the `openai`
Python SDK, the `openai` npm SDK (node + a temporary `npm install openai`), `anthropic`,
litellm, langchain-openai, instructor, pydantic-ai, openai-agents. lm-eval has its own
runner (scripts/lm_eval/run.sh).

Usage: client_matrix.py [BASE_URL]   (default http://127.0.0.1:8080; no /v1)
Environment: FOLIO_API_KEY (default "folio"), MATRIX_MODEL (default: the first /v1/models id).
"""
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

BASE = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080").rstrip("/")
V1 = BASE + "/v1"
KEY = os.environ.get("FOLIO_API_KEY", "folio")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Say hello in five words."}]
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
ASK_PERSON = [{"role": "user", "content": "Invent a person: give a name and an age as JSON."}]


def model_id():
    from openai import OpenAI

    return os.environ.get("MATRIX_MODEL") or OpenAI(base_url=V1, api_key=KEY).models.list().data[0].id


def check_person(obj):
    assert set(obj) == {"name", "age"}, f"keys {sorted(obj)}"
    assert isinstance(obj["name"], str) and isinstance(obj["age"], int), obj


# --- openai (Python) ------------------------------------------------------------------
def openai_py(m):
    from openai import OpenAI

    c = OpenAI(base_url=V1, api_key=KEY)

    def chat():
        r = c.chat.completions.create(model=m, messages=ASK, max_tokens=16, temperature=0)
        assert r.choices[0].message.content

    def stream():
        parts = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model=m, messages=ASK, max_tokens=16, temperature=0, stream=True) if ch.choices]
        assert len([p for p in parts if p]) > 1, parts

    def tools():
        r = c.chat.completions.create(model=m, messages=ASK_WEATHER, tools=[WEATHER],
                                      tool_choice="required", max_tokens=64, temperature=0)
        call = r.choices[0].message.tool_calls[0]
        assert call.function.name == "get_weather"
        assert set(json.loads(call.function.arguments)) == {"city"}

    def schema():
        r = c.chat.completions.create(
            model=m, messages=ASK_PERSON, max_tokens=64, temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON, "strict": True}})
        check_person(json.loads(r.choices[0].message.content))

    def responses():
        r = c.responses.create(model=m, input="Say hello.", max_output_tokens=16)
        assert r.output_text

    def embeddings():
        r = c.embeddings.create(model=m, input=["hello", "world"])
        assert len(r.data) == 2 and len(r.data[0].embedding) > 0

    return {"chat": chat, "stream": stream, "tools": tools, "json schema": schema,
            "responses": responses, "embeddings": embeddings}


# --- openai (npm) ---------------------------------------------------------------------
NPM_SCRIPT = r"""
import OpenAI from "openai";
const c = new OpenAI({ baseURL: process.env.V1, apiKey: process.env.KEY });
const m = process.env.MODEL;
const which = process.argv[2];
const ask = [{ role: "user", content: "Say hello in five words." }];
if (which === "chat") {
  const r = await c.chat.completions.create({ model: m, messages: ask, max_tokens: 16, temperature: 0 });
  if (!r.choices[0].message.content) throw new Error("empty");
} else if (which === "stream") {
  const s = await c.chat.completions.create({ model: m, messages: ask, max_tokens: 16, temperature: 0, stream: true });
  let n = 0; for await (const ch of s) if (ch.choices[0]?.delta?.content) n++;
  if (n < 2) throw new Error("chunks " + n);
} else if (which === "tools") {
  const r = await c.chat.completions.create({ model: m, messages: [{ role: "user", content: "What is the weather in Paris?" }],
    tools: [JSON.parse(process.env.TOOL)], tool_choice: "required", max_tokens: 64, temperature: 0 });
  const call = r.choices[0].message.tool_calls[0];
  if (call.function.name !== "get_weather") throw new Error(call.function.name);
  JSON.parse(call.function.arguments);
} else if (which === "json schema") {
  const r = await c.chat.completions.create({ model: m, messages: [{ role: "user", content: "Invent a person as JSON." }],
    max_tokens: 64, temperature: 0,
    response_format: { type: "json_schema", json_schema: { name: "p", schema: JSON.parse(process.env.PERSON), strict: true } } });
  const o = JSON.parse(r.choices[0].message.content);
  if (Object.keys(o).sort().join() !== "age,name") throw new Error(JSON.stringify(o));
} else if (which === "responses") {
  const r = await c.responses.create({ model: m, input: "Say hello.", max_output_tokens: 16 });
  if (!r.output_text) throw new Error("empty");
}
"""


def openai_npm(m):
    if not shutil.which("node") or not shutil.which("npm"):
        raise SkipClient("node/npm not installed")
    d = tempfile.mkdtemp(prefix="folio-npm-")
    r = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "openai"], cwd=d,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SkipClient("npm install openai failed: " + r.stderr[-200:])
    with open(os.path.join(d, "t.mjs"), "w") as f:
        f.write(NPM_SCRIPT)
    env = dict(os.environ, V1=V1, KEY=KEY, MODEL=m, TOOL=json.dumps(WEATHER), PERSON=json.dumps(PERSON))

    def run(which):
        def f():
            p = subprocess.run(["node", "t.mjs", which], cwd=d, env=env, capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, (p.stderr or p.stdout).strip().splitlines()[-1:]
        return f

    return {k: run(k) for k in ["chat", "stream", "tools", "json schema", "responses"]}


# --- anthropic ------------------------------------------------------------------------
def anthropic_sdk(m):
    import anthropic

    c = anthropic.Anthropic(base_url=BASE, api_key=KEY)
    # The SDK's `temperature` argument is gone from recent versions; the field is not.
    GREEDY = {"temperature": 0}
    tool = {"name": "get_weather", "description": "The current weather of a city.",
            "input_schema": WEATHER["function"]["parameters"]}

    def chat():
        r = c.messages.create(model=m, max_tokens=16, messages=ASK)
        assert r.content[0].text

    def stream():
        with c.messages.stream(model=m, max_tokens=16, messages=ASK) as s:
            parts = list(s.text_stream)
        assert len([p for p in parts if p]) > 1, parts

    def tools():
        r = c.messages.create(model=m, max_tokens=64, messages=ASK_WEATHER, tools=[tool],
                              tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY)
        use = [b for b in r.content if b.type == "tool_use"][0]
        assert use.name == "get_weather" and set(use.input) == {"city"}, use
        r2 = c.messages.create(model=m, max_tokens=32, tools=[tool], messages=ASK_WEATHER + [
            {"role": "assistant", "content": [use.model_dump()]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"}]}],
            extra_body=GREEDY)
        # The model may answer or call again: either is a valid turn after a tool result.
        assert r2.content and r2.stop_reason in ("end_turn", "max_tokens", "tool_use"), r2

    def count():
        r = c.messages.count_tokens(model=m, messages=ASK)
        assert r.input_tokens > 0

    return {"chat": chat, "stream": stream, "tools": tools, "count tokens": count}


# --- litellm --------------------------------------------------------------------------
def litellm_sdk(m):
    import litellm

    kw = dict(model="openai/" + m, api_base=V1, api_key=KEY)

    def chat():
        r = litellm.completion(messages=ASK, max_tokens=16, temperature=0, **kw)
        assert r.choices[0].message.content

    def stream():
        parts = [ch.choices[0].delta.content or "" for ch in litellm.completion(
            messages=ASK, max_tokens=16, temperature=0, stream=True, **kw)]
        assert len([p for p in parts if p]) > 1, parts

    def tools():
        r = litellm.completion(messages=ASK_WEATHER, tools=[WEATHER], tool_choice="required", max_tokens=64, **kw)
        assert r.choices[0].message.tool_calls[0].function.name == "get_weather"

    def schema():
        r = litellm.completion(messages=ASK_PERSON, max_tokens=64, temperature=0, **kw,
                               response_format={"type": "json_schema",
                                                "json_schema": {"name": "p", "schema": PERSON, "strict": True}})
        check_person(json.loads(r.choices[0].message.content))

    def reasoning_effort():
        r = litellm.completion(messages=ASK, max_tokens=16, reasoning_effort="low", **kw)
        assert r.choices[0].message.content is not None

    def fallback():
        router = litellm.Router(model_list=[
            {"model_name": "small", "litellm_params": dict(kw)},
            {"model_name": "big", "litellm_params": dict(kw)},
        ], context_window_fallbacks=[{"small": ["big"]}], num_retries=0)
        try:
            router.completion(model="small", messages=[{"role": "user", "content": "word " * 200000}], max_tokens=4)
        except litellm.ContextWindowExceededError:
            return  # both entries overflow: raised as a context-window error after the fallback
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"not a ContextWindowExceededError: {type(e).__name__}: {str(e)[:200]}")

    return {"chat": chat, "stream": stream, "tools": tools, "json schema": schema,
            "reasoning_effort": reasoning_effort, "context fallback": fallback}


# --- langchain-openai -----------------------------------------------------------------
def langchain(m):
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    llm = ChatOpenAI(base_url=V1, api_key=KEY, model=m, temperature=0, max_tokens=64)

    class Person(BaseModel):
        name: str
        age: int

    def chat():
        assert llm.invoke("Say hello in five words.").content

    def stream():
        parts = [c.content for c in llm.stream("Say hello in five words.")]
        assert len([p for p in parts if p]) > 1, parts

    def tools():
        r = llm.bind_tools([WEATHER], tool_choice="get_weather").invoke("What is the weather in Paris?")
        assert r.tool_calls and r.tool_calls[0]["name"] == "get_weather", r

    def schema():
        p = llm.with_structured_output(Person, method="json_schema").invoke("Invent a person.")
        assert isinstance(p, Person)

    def reasoning_effort():
        ChatOpenAI(base_url=V1, api_key=KEY, model=m, reasoning_effort="low", max_tokens=16).invoke("Hi")

    return {"chat": chat, "stream": stream, "tools": tools, "json schema": schema,
            "reasoning_effort": reasoning_effort}


# --- instructor -----------------------------------------------------------------------
def instructor_sdk(m):
    import instructor
    from openai import OpenAI
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int

    def tools_mode():
        c = instructor.from_openai(OpenAI(base_url=V1, api_key=KEY), mode=instructor.Mode.TOOLS)
        p = c.chat.completions.create(model=m, response_model=Person, messages=ASK_PERSON, max_tokens=64, max_retries=0)
        assert isinstance(p, Person)

    def json_schema_mode():
        c = instructor.from_openai(OpenAI(base_url=V1, api_key=KEY), mode=instructor.Mode.JSON_SCHEMA)
        p = c.chat.completions.create(model=m, response_model=Person, messages=ASK_PERSON, max_tokens=64, max_retries=0)
        assert isinstance(p, Person)

    def partial():
        c = instructor.from_openai(OpenAI(base_url=V1, api_key=KEY), mode=instructor.Mode.TOOLS)
        parts = list(c.chat.completions.create_partial(model=m, response_model=Person, messages=ASK_PERSON,
                                                       max_tokens=64, max_retries=0))
        assert len(parts) > 1, f"{len(parts)} partial(s)"

    return {"tools": tools_mode, "json schema": json_schema_mode, "stream": partial}


# --- pydantic-ai ----------------------------------------------------------------------
def pydantic_ai_sdk(m):
    from pydantic import BaseModel
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    class Person(BaseModel):
        name: str
        age: int

    model = OpenAIChatModel(m, provider=OpenAIProvider(base_url=V1, api_key=KEY))

    def chat():
        r = Agent(model).run_sync("Say hello in five words.", model_settings={"max_tokens": 16})
        assert r.output

    def schema():
        r = Agent(model, output_type=Person).run_sync("Invent a person.", model_settings={"max_tokens": 64})
        assert isinstance(r.output, Person)

    def stream():
        async def go():
            async with Agent(model).run_stream("Say hello in five words.", model_settings={"max_tokens": 16}) as s:
                return [t async for t in s.stream_text(delta=True, debounce_by=None)]
        parts = asyncio.run(go())
        assert len([p for p in parts if p]) > 1, parts

    return {"chat": chat, "stream": stream, "json schema": schema}


# --- openai-agents --------------------------------------------------------------------
def openai_agents(m):
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                        function_tool, set_tracing_disabled)
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=V1, api_key=KEY)
    seen = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather of a city."""
        seen.append(city)
        return f"Sunny, 21 C in {city}"

    def run(model):
        def f():
            seen.clear()
            a = Agent(name="w", instructions="Answer with the tool.", model=model, tools=[get_weather],
                      model_settings=ModelSettings(tool_choice="required", max_tokens=64),
                      tool_use_behavior="stop_on_first_tool")
            r = Runner.run_sync(a, "What is the weather in Paris?")
            assert seen and r.final_output, (seen, r.final_output)
        return f

    return {"responses tool": run(OpenAIResponsesModel(m, client)),
            "tools": run(OpenAIChatCompletionsModel(m, client))}


class SkipClient(Exception):
    pass


CLIENTS = [
    ("openai (Python)", openai_py),
    ("openai (npm)", openai_npm),
    ("anthropic", anthropic_sdk),
    ("litellm", litellm_sdk),
    ("langchain-openai", langchain),
    ("instructor", instructor_sdk),
    ("pydantic-ai", pydantic_ai_sdk),
    ("openai-agents", openai_agents),
]


def main():
    m = model_id()
    print(f"model: {m} at {BASE}", flush=True)
    rows, columns = [], []
    for name, make in CLIENTS:
        try:
            checks = make(m)
        except (ImportError, SkipClient) as e:
            print(f"{name}: skipped ({e})", flush=True)
            rows.append((name, None, str(e)))
            continue
        cells = {}
        for feature, f in checks.items():
            if feature not in columns:
                columns.append(feature)
            try:
                f()
                cells[feature] = "works"
            except Exception as e:  # noqa: BLE001
                msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:110]
                cells[feature] = "FAILS: " + msg.replace("|", "/")
                if os.environ.get("MATRIX_TRACE"):
                    traceback.print_exc()
            print(f"{name} / {feature}: {cells[feature]}", flush=True)
        rows.append((name, cells, None))
    print()
    print("| client | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    failed = 0
    for name, cells, skip in rows:
        if cells is None:
            print(f"| {name} | skipped: {skip} |" + " |" * (len(columns) - 1))
            continue
        failed += sum(1 for v in cells.values() if v.startswith("FAILS"))
        print(f"| {name} | " + " | ".join(cells.get(c, "n/a") for c in columns) + " |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
