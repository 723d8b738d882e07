"""LiteLLM: `completion(model="openai/...")`, plain and streamed, reading the OpenAI variables."""

from __future__ import annotations

import litellm


def completion(question: str) -> str:
    reply = litellm.completion(model="openai/gpt-4o", messages=[{"role": "user", "content": question}])
    return str(reply.choices[0].message.content)


def streamed(question: str) -> str:
    chunks = litellm.completion(
        model="openai/gpt-4o", messages=[{"role": "user", "content": question}], stream=True
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
