"""LlamaIndex: its `OpenAI` LLM (reads OPENAI_API_BASE), and `OpenAILike` for a server of another model,
each in a `FunctionAgent` with a tool."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.openai import OpenAI
from llama_index.llms.openai_like import OpenAILike
from tools import get_weather


def _run(llm: Any, question: str) -> str:
    async def run() -> str:  # a workflow is made and run inside its event loop
        agent = FunctionAgent(tools=[get_weather], llm=llm, system_prompt="Be concise.")
        return str(await agent.run(user_msg=question))

    return asyncio.run(run())


def openai_agent(question: str) -> str:
    return _run(OpenAI(model="gpt-4o-mini"), question)


def openai_like_agent(question: str) -> str:
    llm = OpenAILike(
        model="policy",
        api_base=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ["OPENAI_API_KEY"],
        is_chat_model=True,
        is_function_calling_model=True,
    )
    return _run(llm, question)
