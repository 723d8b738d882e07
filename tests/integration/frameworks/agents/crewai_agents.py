"""CrewAI: one agent, one task, one crew, on `LLM("openai/...")` (reads the OpenAI variables)."""

from __future__ import annotations

from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool


@tool("get_weather")
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}, 21 C."


def crew(question: str) -> str:
    helper = Agent(
        role="Helper",
        goal="Answer the user's question",
        backstory="You answer questions briefly.",
        llm=LLM(model="openai/gpt-4o"),
        tools=[get_weather],
        max_iter=2,
    )
    task = Task(description=question, expected_output="A short answer.", agent=helper)
    return str(Crew(agents=[helper], tasks=[task]).kickoff())
