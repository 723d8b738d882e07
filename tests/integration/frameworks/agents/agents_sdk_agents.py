"""OpenAI Agents SDK: an `Agent` with a function tool, run by `Runner` on the SDK's default model (the
Responses API)."""

from __future__ import annotations

from agents import Agent, Runner, function_tool
from tools import get_weather


def agent(question: str) -> str:
    helper = Agent(name="helper", instructions="Be concise.", tools=[function_tool(get_weather)])
    return str(Runner.run_sync(helper, question, max_turns=3).final_output)
