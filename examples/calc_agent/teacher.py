"""A scripted teacher for the calc agent: an OpenAI-compatible server that solves the training tasks
with the reference solution's own steps, through the AutoGen agent's real tool-call format.

    python examples/calc_agent/teacher.py --tasks calc-project/data/train.jsonl [--port 8101]

It knows only the tasks in --tasks (give it the train split: validation tasks must never be
demonstrated). A call is recognised by its question (the agent's first user message). While the
reference has calculations left (GSM8K's <<expression=result>> steps, one per calculator result the
conversation holds so far), it calls `calculator` with the next expression; then it answers
`Answer: N`. A question it does not know gets an error the agent sees, so that rollout fails and is
no demonstration.
"""

from __future__ import annotations

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


class CalcTeacher:
    def __init__(self, tasks: list[dict[str, Any]]) -> None:
        self.by_question = {normalize(str(task["question"])): task for task in tasks}

    def __call__(self, request: dict[str, Any]) -> Reply:
        question = normalize(first_user_text(request))
        task = self.by_question.get(question)
        if task is None:
            raise NoReference(f"the teacher has no reference solution for this question: {question[:80]!r}")
        reference = task["reference"]
        steps = [str(step).rpartition("=")[0] for step in reference.get("calculations") or []]
        done = len(tool_results(request))
        if done < len(steps) and offers_tool(request, "calculator"):
            return Reply(tool_calls=[ToolCall("calculator", {"expression": steps[done]})])
        return Reply(content=f"Answer: {reference['answer']}")


def main() -> None:
    teacher_main(CalcTeacher, __doc__)


if __name__ == "__main__":
    main()
