"""A GSM8K solver on AutoGen: an AssistantAgent with a calculator tool. Nothing here knows Tether.

    OPENAI_BASE_URL=... OPENAI_API_KEY=... python agent.py "Tom has 3 apples and buys 4 more. How many?"

The model may call `calculator` as often as --max-tool-iterations allows; its final reply should end
with 'Answer: NUMBER'. The last line this script prints is that line (or the reply on one line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import BaseChatMessage
from autogen_core.models import ModelFamily, ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient
from calculator import calculator

SYSTEM = (
    "You solve math word problems step by step. Use the calculator tool for every computation. "
    "When you are done, end your reply with a line 'Answer: NUMBER'."
)
ANSWER_LINE = re.compile(r"^\s*\**answer\**\s*:\**\s*(.*\S)", re.IGNORECASE | re.MULTILINE)
# The policy's name means nothing to AutoGen, so it must be told what the model can do.
MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family=ModelFamily.UNKNOWN,
    structured_output=False,
)


def model_client(args: argparse.Namespace) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(
        model=os.environ.get("OPENAI_MODEL", "policy"),
        base_url=os.environ.get("OPENAI_BASE_URL"),
        api_key=os.environ.get("OPENAI_API_KEY", ""),
        model_info=MODEL_INFO,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        max_retries=2,
    )


def final_reply(result: TaskResult) -> str:
    """The last message the assistant said, as text (a tool summary if tools were the last word)."""
    for message in reversed(result.messages):
        if isinstance(message, BaseChatMessage) and message.source == "assistant":
            return message.to_text()
    return ""


async def solve(question: str, args: argparse.Namespace) -> str:
    client = model_client(args)
    agent = AssistantAgent(
        "assistant",
        model_client=client,
        tools=[calculator],
        system_message=SYSTEM,
        reflect_on_tool_use=True,
        max_tool_iterations=args.max_tool_iterations,
    )
    try:
        result = await agent.run(task=question)
    finally:
        await client.close()
    reply = final_reply(result)
    print(reply, file=sys.stderr)
    return final_line(reply)


def final_line(reply: str) -> str:
    """The last `Answer:` line if the reply has one, else the whole reply on one line."""
    answers = ANSWER_LINE.findall(reply)
    return f"Answer: {answers[-1].strip()}" if answers else " ".join(reply.split())


def argument_parser(description: str | None = __doc__) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("question", nargs="*", help="the problem (default: 'question' of $TETHER_TASK)")
    parser.add_argument("--max-tool-iterations", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    return parser


def main(
    solver: Callable[[str, argparse.Namespace], Awaitable[str]] = solve,
    parser: argparse.ArgumentParser | None = None,
) -> None:
    """Read the question (argument or $TETHER_TASK), solve it, print the answer line last."""
    args = (parser or argument_parser()).parse_args()
    task = json.loads(os.environ.get("TETHER_TASK") or "{}")
    question = " ".join(args.question) or str(task.get("question") or "")
    if not question:
        raise SystemExit("no question: pass one as an argument or in $TETHER_TASK")
    print(asyncio.run(solver(question, args)))


if __name__ == "__main__":
    main()
