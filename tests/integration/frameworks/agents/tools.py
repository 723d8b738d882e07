"""The one tool every tool-using agent of the survey is given."""


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}, 21 C."
