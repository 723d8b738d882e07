"""Semantic Kernel: a `ChatCompletionAgent` on `OpenAIChatCompletion` (settings from the environment),
with a plugin."""

from __future__ import annotations

import asyncio

from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
from semantic_kernel.functions import kernel_function


class Weather:
    @kernel_function(description="The weather in a city.")
    def get_weather(self, city: str) -> str:
        return f"Sunny in {city}, 21 C."


def agent(question: str) -> str:
    service = OpenAIChatCompletion(ai_model_id="gpt-4o")
    chat = ChatCompletionAgent(
        service=service, name="helper", instructions="Be concise.", plugins=[Weather()]
    )
    return str(asyncio.run(chat.get_response(messages=question)))
