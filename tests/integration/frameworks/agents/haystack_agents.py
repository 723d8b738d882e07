"""Haystack: `OpenAIChatGenerator()` at its defaults, alone and in an `Agent` with a tool."""

from __future__ import annotations

from haystack.components.agents import Agent
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage
from haystack.tools import create_tool_from_function
from tools import get_weather


def generator(question: str) -> str:
    reply = OpenAIChatGenerator().run([ChatMessage.from_user(question)])
    return str(reply["replies"][0].text)


def agent(question: str) -> str:
    tool = create_tool_from_function(get_weather)
    runner = Agent(chat_generator=OpenAIChatGenerator(), tools=[tool], max_agent_steps=3)
    return str(runner.run([ChatMessage.from_user(question)])["messages"][-1].text)
