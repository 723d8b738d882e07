"""A scripted teacher for the SQL agent: an OpenAI-compatible server that plays the LangGraph agent's three
roles with the reference answers of the training tasks.

    python examples/sql_agent/teacher.py --tasks sql-project/data/train.jsonl [--port 8102]

It knows only the tasks in --tasks (give it the train split: validation tasks must never be
demonstrated). The role is read from the system prompt, the task from the `Question:` line:
- writer and rewriter: the task's gold query, in a ```sql block;
- checker: the verdict of execution match (reward.py) between the query it is shown and the gold
  query on the task's database: `CORRECT`, or `WRONG: ...` with the reason.
A question it does not know gets an error the agent sees, so that rollout fails and is no demonstration.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tether.teacher import NoReference, Reply, last_user_text, teacher_main

HERE = Path(__file__).resolve().parent
QUESTION = re.compile(r"^Question: (.*)$", re.MULTILINE)
QUERY = re.compile(r"^Query: (.*)$", re.MULTILINE)


def reward_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sql_agent_reward", HERE / "reward.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def role_of(request: dict[str, Any]) -> str:
    system = next((m for m in request.get("messages") or [] if m.get("role") == "system"), {})
    text = str(system.get("content") or "")
    for role, opening in (("writer", "You write"), ("checker", "You check"), ("rewriter", "You fix")):
        if text.startswith(opening):
            return role
    raise NoReference("the teacher does not know this agent role (no writer, checker or rewriter prompt)")


class SQLTeacher:
    def __init__(self, tasks: list[dict[str, Any]]) -> None:
        self.by_question = {" ".join(str(task["question"]).split()): task for task in tasks}
        self.reward = reward_module()

    def task_of(self, text: str) -> dict[str, Any]:
        found = QUESTION.search(text)
        question = " ".join(found.group(1).split()) if found else ""
        task = self.by_question.get(question)
        if task is None:
            raise NoReference(f"the teacher has no reference query for this question: {question[:80]!r}")
        return task

    def __call__(self, request: dict[str, Any]) -> Reply:
        role = role_of(request)
        text = last_user_text(request)
        task = self.task_of(text)
        if role != "checker":
            return Reply(content=f"```sql\n{task['reference']['gold_sql']}\n```")
        shown = QUERY.search(text)
        query = shown.group(1).strip() if shown else ""
        if self.reward.execution_match(task, query) == 1.0:
            return Reply(content="CORRECT")
        return Reply(content="WRONG: the query does not return the rows the question asks for.")


def main() -> None:
    teacher_main(SQLTeacher, __doc__)


if __name__ == "__main__":
    main()
