#!/usr/bin/env python3
"""Agent clients against folio's Responses API
(pip install openai-agents).

1. openai-agents: an `Agent` with one `@function_tool`, over the Responses API
   (`OpenAIResponsesModel` on an `AsyncOpenAI` pointed at folio), completes a tool round
   trip: the first turn is forced to call the tool (`tool_choice="required"`), the tool
   runs, and a second model call answers with the tool's output in its input (the tool is
   then disabled: SmolLM2 would call it again whenever it is offered).
2. The raw `openai` client: `previous_response_id` continues a stored response (the
   second prompt holds the first turn), `retrieve`, `input_items.list`, `delete`.
(litellm's context-window fallback is scripts/litellm_overflow_check.py.)

Usage: agents_check.py [BASE_URL]   (default: $FOLIO_BASE_URL or http://127.0.0.1:8000/v1)
"""
import asyncio
import os
import sys


from openai import AsyncOpenAI, NotFoundError, OpenAI  # noqa: E402

API_KEY = os.environ.get("OPENAI_API_KEY", "folio")


def agent_round_trip(base_url: str, model: str) -> None:
    from agents import (Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool,
                        set_default_openai_client, set_tracing_disabled)
    from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY)
    set_default_openai_client(client, use_for_tracing=False)
    cities = []

    # SmolLM2 calls the tool again whenever it is offered, so once it has run it is
    # switched off (`is_enabled`) and the second turn must answer in text.
    @function_tool(is_enabled=lambda ctx, agent: not cities)
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        cities.append(city)
        return f"It is 22 degrees and sunny in {city}."

    agent = Agent(
        name="weather",
        instructions="Answer questions about the weather. Use the tool, then answer in one sentence.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=64),
    )
    result = asyncio.run(Runner.run(agent, "What is the weather in Paris?", max_turns=4))
    kinds = [type(i).__name__ for i in result.new_items]
    print(f"agent: items {kinds}; tool called with {cities}; final output {result.final_output!r}")
    assert cities, "the tool was never called"
    assert any(isinstance(i, ToolCallItem) for i in result.new_items), kinds
    assert any(isinstance(i, ToolCallOutputItem) for i in result.new_items), kinds
    assert isinstance(result.new_items[-1], MessageOutputItem), kinds
    assert isinstance(result.final_output, str) and result.final_output.strip(), result.final_output
    assert len(result.raw_responses) == 2, len(result.raw_responses)

    # The same round trip streamed: the SDK reads folio's function-call events.
    cities.clear()

    async def streamed():
        run = Runner.run_streamed(agent, "What is the weather in Paris?", max_turns=4)
        kinds = [e.item.type async for e in run.stream_events() if e.type == "run_item_stream_event"]
        return run, kinds

    run, kinds = asyncio.run(streamed())
    print(f"agent streamed: items {kinds}; final output {run.final_output!r}")
    assert cities and kinds[:2] == ["tool_call_item", "tool_call_output_item"], kinds
    assert kinds[-1] == "message_output_item" and run.final_output.strip(), kinds


def previous_response(base_url: str, model: str) -> None:
    client = OpenAI(base_url=base_url, api_key=API_KEY)
    first = client.responses.create(model=model, input="My name is Ada. Say hello.",
                                    max_output_tokens=16, temperature=0)
    second = client.responses.create(model=model, input="What is my name?",
                                     previous_response_id=first.id, max_output_tokens=16, temperature=0)
    print(f"previous_response_id: {first.output_text!r} -> {second.output_text!r}; "
          f"input tokens {first.usage.input_tokens} then {second.usage.input_tokens}")
    assert first.store is True and second.previous_response_id == first.id, second
    # The second prompt holds the first turn: its question and its answer.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens, (
        first.usage, second.usage)
    again = client.responses.retrieve(second.id)
    assert again.id == second.id and again.output_text == second.output_text, again
    items = client.responses.input_items.list(second.id, order="asc")
    roles = [getattr(i, "role", None) for i in items.data]
    assert roles == ["user", "assistant", "user"], roles
    client.responses.delete(first.id)
    try:
        client.responses.create(model=model, input="x", previous_response_id=first.id)
        raise AssertionError("a deleted response must not continue")
    except NotFoundError as e:
        assert e.body["code"] == "previous_response_not_found", e.body
    print(f"stored responses: retrieve, input_items {roles}, delete ok")


def main() -> int:
    base_url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FOLIO_BASE_URL", "http://127.0.0.1:8000/v1")
    model = OpenAI(base_url=base_url, api_key=API_KEY).models.list().data[0].id
    agent_round_trip(base_url, model)
    previous_response(base_url, model)
    print("agents check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
