"""pydantic-ai: `Agent("openai:...")` and `Agent("anthropic:...")`, each with a tool."""

from __future__ import annotations

from pydantic_ai import Agent
from tools import get_weather


def _run(model: str, question: str) -> str:
    agent = Agent(model, instructions="Be concise.", tools=[get_weather])
    return str(agent.run_sync(question).output)


def openai_agent(question: str) -> str:
    return _run("openai:gpt-4o", question)


def anthropic_agent(question: str) -> str:
    return _run("anthropic:claude-sonnet-4-5", question)


def openai_responses_agent(question: str) -> str:
    return _run("openai-responses:gpt-4o", question)
