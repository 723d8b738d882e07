"""The openai-agents SDK against the gateway: an Agent with a function tool, in both of its model APIs."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from agents import (
    Agent,
    Model,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

from tests.integration.support import MODEL, Scripted, Session, assert_engine_span, assert_weather_round_trip
from tests.integration.tools import FINAL_ANSWER, QUESTION, TOOL_RESULT, WEATHER_TOOL_SCRIPT, get_weather

pytestmark = pytest.mark.integration

INSTRUCTIONS = "You answer weather questions with the get_weather tool."


@pytest.fixture(autouse=True)
def no_trace_export() -> Iterator[None]:
    set_tracing_disabled(True)  # the SDK would otherwise export its traces to the hosted platform
    yield
    set_tracing_disabled(False)


def client(session: Session) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=session.base_url, api_key=session.api_key, max_retries=0)


def chat_model(session: Session) -> Model:
    return OpenAIChatCompletionsModel(model=MODEL, openai_client=client(session))


def responses_model(session: Session) -> Model:
    return OpenAIResponsesModel(model=MODEL, openai_client=client(session))


def weather_agent(model: Model) -> Agent:
    return Agent(name="weather", instructions=INSTRUCTIONS, model=model, tools=[function_tool(get_weather)])


async def test_agent_with_tool_in_chat_completions_mode(scripted: Scripted) -> None:
    scripted.script.turns.extend(WEATHER_TOOL_SCRIPT)
    result = await Runner.run(weather_agent(chat_model(scripted.session)), QUESTION)
    assert result.final_output == FINAL_ANSWER

    assert_weather_round_trip(scripted)
    assert all(span.attributes["call"] == "chat" for span in scripted.session.spans())


async def test_agent_with_tool_in_responses_mode(scripted: Scripted) -> None:
    scripted.script.turns.extend(WEATHER_TOOL_SCRIPT)
    result = await Runner.run(weather_agent(responses_model(scripted.session)), QUESTION)
    assert result.final_output == FINAL_ANSWER

    tool_span, answer_span = assert_weather_round_trip(scripted)
    assert [span.attributes.get("api") for span in (tool_span, answer_span)] == ["responses", "responses"]
    # The span keeps the request as the agent sent it, in the Responses shape.
    sent = answer_span.attributes["request"]["input"]
    outputs = [item["output"] for item in sent if item.get("type") == "function_call_output"]
    assert outputs == [TOOL_RESULT]


async def test_engine_answers_plain_agent(engine_session: Session) -> None:
    # Chat mode only: the tiny random model never stops on its own, and in Responses mode the SDK
    # raises on a response cut at max_output_tokens (status "incomplete"), as it should.
    agent = Agent(
        name="plain",
        instructions="Answer briefly.",
        model=chat_model(engine_session),
        model_settings=ModelSettings(max_tokens=8),
    )
    result = await Runner.run(agent, "Hi")
    assert_engine_span(engine_session, result.final_output)
