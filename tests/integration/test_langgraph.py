"""LangGraph with langchain-openai's ChatOpenAI against the gateway: a tool-using graph."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from tests.integration.support import MODEL, Scripted, Session, assert_engine_span, assert_weather_round_trip
from tests.integration.tools import FINAL_ANSWER, QUESTION, TOOL_RESULT, WEATHER_TOOL_SCRIPT, get_weather

pytestmark = pytest.mark.integration


def chat_model(session: Session, **options: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model=MODEL, base_url=session.base_url, api_key=session.api_key, max_retries=0, **options
    )


def agent_graph(model: BaseChatModel, tools: list[Any]) -> Any:
    """The classic ReAct loop: the model node, and a tool node while the model asks for tools."""
    bound = model.bind_tools(tools) if tools else model

    def call_model(state: MessagesState) -> dict[str, list[Any]]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_edge(START, "model")
    if tools:
        graph.add_node("tools", ToolNode(tools))
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
    else:
        graph.add_edge("model", END)
    return graph.compile()


def test_tool_using_graph(scripted: Scripted) -> None:
    scripted.script.turns.extend(WEATHER_TOOL_SCRIPT)
    graph = agent_graph(chat_model(scripted.session), [get_weather])
    messages = graph.invoke({"messages": [("user", QUESTION)]})["messages"]

    assert isinstance(messages[-1], AIMessage) and messages[-1].content == FINAL_ANSWER
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.content for m in tool_messages] == [TOOL_RESULT]
    assert_weather_round_trip(scripted)


def test_engine_answers_plain_graph(engine_session: Session) -> None:
    graph = agent_graph(chat_model(engine_session, max_tokens=8), [])
    answer = graph.invoke({"messages": [("user", "Hi")]})["messages"][-1]
    assert isinstance(answer, AIMessage)
    assert_engine_span(engine_session, answer.content)
