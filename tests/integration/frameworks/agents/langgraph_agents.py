"""LangGraph: the prebuilt ReAct agent on a model named the LangChain way (`init_chat_model`)."""

from __future__ import annotations

from langgraph.prebuilt import create_react_agent
from tools import get_weather


def react_agent(question: str) -> str:
    agent = create_react_agent("openai:gpt-4o", tools=[get_weather])
    reply = agent.invoke({"messages": [{"role": "user", "content": question}]}, {"recursion_limit": 4})
    return str(reply["messages"][-1].content)


def anthropic_react_agent(question: str) -> str:
    agent = create_react_agent("anthropic:claude-sonnet-4-5", tools=[get_weather])
    reply = agent.invoke({"messages": [{"role": "user", "content": question}]}, {"recursion_limit": 4})
    return str(reply["messages"][-1].content)
