"""A retrieval agent on the OpenAI Agents SDK. It is an ordinary SDK program: nothing here knows Tether.

The agent has one tool, `search`, over the passages in corpus.jsonl (all-MiniLM-L6-v2 embeddings, cosine
top-k), and ends its reply with a line `Answer: ...`; that line is the last thing this script prints.

    OPENAI_BASE_URL=... OPENAI_API_KEY=... python agent.py "Who discovered penicillin?"

Options: --api responses uses the Responses API instead of chat completions (or RAG_AGENT_API=responses);
--prefetch K also puts the top K passages into the first message, which gives small models that never call
tools something to read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from typing import Any

from agents import (
    Agent,
    MaxTurnsExceeded,
    Model,
    ModelBehaviorError,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    Tool,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

INSTRUCTIONS = (
    "You answer questions with facts from an encyclopedia. Use the search tool to find the passages you "
    "need, then reply with a single line of the form 'Answer: <short answer>', a few words at most."
)
ANSWER_LINE = re.compile(r"^\s*\**answer\**\s*:\**\s*(.*\S)", re.IGNORECASE | re.MULTILINE)
_retriever: Any = None


def retriever() -> Any:
    """Loaded on the first search: the agent pays for the embedding model only if it retrieves."""
    global _retriever
    if _retriever is None:
        from retrieval import Retriever

        _retriever = Retriever()
    return _retriever


def search_tool(k: int) -> Tool:
    @function_tool
    def search(query: str) -> str:
        """Search the encyclopedia and return the passages that best match the query.

        Args:
            query: what to look for, for example a person, place or event.
        """
        from retrieval import format_hits

        return format_hits(retriever().search(query, k))

    return search


def final_line(reply: str) -> str:
    """The `Answer:` line if the reply has one (the last one), else the whole reply on one line."""
    answers = ANSWER_LINE.findall(reply)
    if answers:
        return f"Answer: {answers[-1].strip()}"
    return " ".join(reply.split())


def make_model(api: str) -> Model:
    client = AsyncOpenAI(
        base_url=os.environ.get("OPENAI_BASE_URL"), api_key=os.environ.get("OPENAI_API_KEY"), max_retries=2
    )
    name = os.environ.get("OPENAI_MODEL", "policy")
    if api == "responses":
        return OpenAIResponsesModel(model=name, openai_client=client)
    return OpenAIChatCompletionsModel(model=name, openai_client=client)


def first_message(question: str, prefetch: int) -> str:
    if prefetch <= 0:
        return question
    from retrieval import format_hits

    passages = format_hits(retriever().search(question, prefetch))
    return f"Passages:\n{passages}\n\nQuestion: {question}"


async def answer(question: str, args: argparse.Namespace) -> str:
    agent = Agent(
        name="rag_agent",
        instructions=INSTRUCTIONS,
        tools=[search_tool(args.top_k)],
        model=make_model(args.api),
        model_settings=ModelSettings(temperature=args.temperature, max_tokens=args.max_tokens),
    )
    try:
        result = await Runner.run(agent, first_message(question, args.prefetch), max_turns=args.max_turns)
    except (MaxTurnsExceeded, ModelBehaviorError) as exc:
        # The policy's failure (endless tool calls, a malformed call): no answer, reward 0, not a crash.
        print(f"no answer: {type(exc).__name__}: {exc}", file=sys.stderr)
        return "no answer"
    reply = str(result.final_output or "")
    print(reply, file=sys.stderr)
    return final_line(reply)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("question", nargs="*", help="the question (default: 'question' of $TETHER_TASK)")
    parser.add_argument(
        "--api",
        choices=["chat", "responses"],
        default=os.environ.get("RAG_AGENT_API", "chat"),
        help="chat completions (default) or the Responses API",
    )
    parser.add_argument("--top-k", type=int, default=3, help="passages per search")
    parser.add_argument("--prefetch", type=int, default=0, help="passages put into the first message")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.7)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    task = json.loads(os.environ.get("TETHER_TASK") or "{}")
    question = " ".join(args.question) or str(task.get("question") or "")
    if not question:
        raise SystemExit("no question: pass one as an argument or in $TETHER_TASK")
    set_tracing_disabled(True)
    print(asyncio.run(answer(question, args)))


if __name__ == "__main__":
    main()
