"""The tool every framework test gives its agent, and the script that makes the model use it."""

from __future__ import annotations

from tests.integration.scripted_upstream import Turn, call_tool, say

CITY = "Paris"
FORECAST = "sunny, 21 degrees"
FINAL_ANSWER = f"The weather in {CITY} is {FORECAST}."
QUESTION = f"What is the weather in {CITY}?"
TOOL_RESULT = f"{CITY}: {FORECAST}"  # what get_weather(CITY) returns


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"{city}: {FORECAST}"


WEATHER_TOOL_SCRIPT: list[Turn] = [call_tool("get_weather", city=CITY), say(FINAL_ANSWER)]
