"""AutoGen AgentChat with autogen-ext's OpenAI client against the gateway: an assistant with a tool."""

from __future__ import annotations

from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import TextMessage, ToolCallExecutionEvent
from autogen_core.models import ModelFamily, ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient

from tests.integration.support import MODEL, Scripted, Session, assert_engine_span, assert_weather_round_trip
from tests.integration.tools import FINAL_ANSWER, QUESTION, TOOL_RESULT, WEATHER_TOOL_SCRIPT, get_weather

pytestmark = pytest.mark.integration

# AutoGen needs to be told what an unknown model can do.
MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    structured_output=False,
    family=ModelFamily.UNKNOWN,
)


def model_client(session: Session, **options: Any) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(
        model=MODEL,
        base_url=session.base_url,
        api_key=session.api_key,
        model_info=MODEL_INFO,
        max_retries=0,
        **options,
    )


async def test_assistant_with_tool(scripted: Scripted) -> None:
    scripted.script.turns.extend(WEATHER_TOOL_SCRIPT)
    client = model_client(scripted.session)
    agent = AssistantAgent("weather", model_client=client, tools=[get_weather], reflect_on_tool_use=True)
    try:
        result = await agent.run(task=QUESTION)
    finally:
        await client.close()

    final = result.messages[-1]
    assert isinstance(final, TextMessage) and final.content == FINAL_ANSWER
    [execution] = [m for m in result.messages if isinstance(m, ToolCallExecutionEvent)]
    assert [r.content for r in execution.content] == [TOOL_RESULT]
    assert_weather_round_trip(scripted)


async def test_engine_answers_plain_assistant(engine_session: Session) -> None:
    client = model_client(engine_session, max_tokens=8)
    try:
        result = await AssistantAgent("plain", model_client=client).run(task="Hi")
    finally:
        await client.close()
    final = result.messages[-1]
    assert isinstance(final, TextMessage)
    assert_engine_span(engine_session, final.content)
