"""smolagents: a CodeAgent and a ToolCallingAgent on `OpenAIServerModel` (reads the OpenAI variables)."""

from __future__ import annotations

from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent, tool


@tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: the city's name.
    """
    return f"Sunny in {city}, 21 C."


def code_agent(question: str) -> str:
    agent = CodeAgent(tools=[get_weather], model=OpenAIServerModel(model_id="gpt-4o"), max_steps=2)
    return str(agent.run(question))


def tool_calling_agent(question: str) -> str:
    agent = ToolCallingAgent(tools=[get_weather], model=OpenAIServerModel(model_id="gpt-4o"), max_steps=2)
    return str(agent.run(question))
