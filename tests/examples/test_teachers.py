"""The examples' scripted teachers, served by `tether.teacher` on loopback and called with the `openai`
client as the agents call them: each recognises its training task from the prompt and answers in the
agent's format; a task it has no reference for (a validation task) is an error the client sees."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.examples.support import Example
from tests.helpers import serve_app
from tether.teacher import Policy, teacher_app

CALC, SQL, RAG = Example("calc_agent"), Example("sql_agent"), Example("rag_agent")


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[Any] = []

    def start(policy: Policy) -> openai.OpenAI:
        context = serve_app(teacher_app(policy))
        servers.append(context)
        return openai.OpenAI(base_url=f"{context.__enter__()}/v1", api_key="unused", max_retries=0)

    yield start
    for context in servers:
        context.__exit__(None, None, None)


def ask(
    client: openai.OpenAI, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> Any:
    extra = {"tools": tools} if tools else {}
    return client.chat.completions.create(model="teacher", messages=messages, **extra).choices[0].message  # type: ignore[arg-type]


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def test_calc_teacher_calls_the_calculator_step_by_step_then_answers(serve: Any) -> None:
    task = {"id": "t", "question": "Tom has 3 bags of 4 apples and eats 2. How many?"}
    task["reference"] = {"answer": 10, "calculations": ["3*4=12", "12-2=10"]}
    client = serve(CALC.load("teacher").CalcTeacher([task]))
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": "You solve math word problems."},
        {"role": "user", "content": task["question"]},
    ]
    first = ask(client, conversation, [tool("calculator")])
    assert calls(first) == [("calculator", {"expression": "3*4"})]
    conversation += [
        first.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "1", "content": "12"},
    ]
    second = ask(client, conversation, [tool("calculator")])
    assert calls(second) == [("calculator", {"expression": "12-2"})]
    conversation += [
        second.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "2", "content": "10"},
    ]
    assert ask(client, conversation, [tool("calculator")]).content == "Answer: 10"


def test_a_teacher_refuses_a_task_it_was_not_given(serve: Any) -> None:
    client = serve(CALC.load("teacher").CalcTeacher([]))
    with pytest.raises(openai.BadRequestError, match="no reference solution for this question"):
        ask(client, [{"role": "user", "content": "A validation question?"}], [tool("calculator")])


def test_sql_teacher_writes_the_gold_query_and_checks_by_execution(serve: Any) -> None:
    db = SQL.load("chinook").database_path(None)
    task = {
        "question": "How many artists are there?",
        "reference": {"gold_sql": "SELECT COUNT(*) FROM artist"},
        "db": str(db),
    }
    agent = SQL.load("agent")
    client = serve(SQL.load("teacher").SQLTeacher([task]))
    user = f"Schema:\nartist(id, name)\n\nQuestion: {task['question']}"
    written = ask(client, [{"role": "system", "content": agent.WRITER}, {"role": "user", "content": user}])
    assert agent.extract_sql(written.content) == task["reference"]["gold_sql"]

    def verdict(query: str) -> str:
        shown = f"{user}\n\nQuery: {query}\n\nResult: {agent.run_sql(str(db), query)}"
        return ask(
            client, [{"role": "system", "content": agent.CHECKER}, {"role": "user", "content": shown}]
        ).content

    assert agent.is_correct(verdict("SELECT COUNT(id) FROM artist"))
    assert not agent.is_correct(verdict("SELECT COUNT(*) FROM album"))


def test_rag_teacher_searches_then_answers_and_streams_like_a_server(serve: Any) -> None:
    task = {
        "id": "q",
        "question": "In which city do the White Nile and the Blue Nile meet?",
        "reference": {"answer": "Khartoum"},
    }
    client = serve(RAG.load("teacher").RAGTeacher([task]))
    prefetched = f"Passages:\n[p02] Nile: ...\n\nQuestion: {task['question']}"
    first = ask(client, [{"role": "user", "content": prefetched}], [tool("search")])
    assert calls(first) == [("search", {"query": task["question"]})]
    stream = client.chat.completions.create(
        model="teacher",
        messages=[
            {"role": "user", "content": task["question"]},
            first.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": "1", "content": "[p02] Nile: ... meet at Khartoum"},
        ],
        tools=[tool("search")],  # type: ignore[list-item]
        stream=True,
    )
    assert (
        "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        == "Answer: Khartoum"
    )
