"""A scripted teacher for the RAG agent: an OpenAI-compatible server that answers the Agents SDK agent's
calls with the reference answers of the training tasks, through its real tool-call format.

    python examples/rag_agent/teacher.py --tasks rag-project/data/train.jsonl [--port 8103]

It knows only the tasks in --tasks (give it the train split: validation tasks must never be
demonstrated). A call is recognised by its question (the first user message, or its `Question:` line
when passages were prefetched). With no search result yet it calls `search` with the question; once the
conversation holds one, it answers `Answer: <gold answer>`. A question it does not know gets an error
the agent sees, so that rollout fails and is no demonstration.
"""

from __future__ import annotations

import re
from typing import Any

from tether.teacher import (
    NoReference,
    Reply,
    ToolCall,
    first_user_text,
    normalize,
    offers_tool,
    teacher_main,
    tool_results,
)

PREFETCHED_QUESTION = re.compile(r"\n\nQuestion: (.*)$", re.DOTALL)


def question_of(text: str) -> str:
    found = PREFETCHED_QUESTION.search(text)
    return normalize(found.group(1) if found else text)


class RAGTeacher:
    def __init__(self, tasks: list[dict[str, Any]]) -> None:
        self.by_question = {normalize(str(task["question"])): task for task in tasks}

    def __call__(self, request: dict[str, Any]) -> Reply:
        question = question_of(first_user_text(request))
        task = self.by_question.get(question)
        if task is None:
            raise NoReference(f"the teacher has no reference answer for this question: {question[:80]!r}")
        if not tool_results(request) and offers_tool(request, "search"):
            return Reply(tool_calls=[ToolCall("search", {"query": task["question"]})])
        return Reply(content=f"Answer: {task['reference']['answer']}")


def main() -> None:
    teacher_main(RAGTeacher, __doc__)


if __name__ == "__main__":
    main()
