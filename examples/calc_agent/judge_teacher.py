"""A scripted judge for calc: an OpenAI-compatible server that grades a calc rollout the way the evaluator
does (the output's last number against `reference.answer`) and says so in the judge's format, a short
reason and a last line `SCORE: 1` or `SCORE: 0`. Its answers, recorded through judge_agent.py, are the
demonstrations a small model imitates to become a judge.

    python examples/calc_agent/judge_teacher.py --tasks JUDGE_DIR/train.jsonl [--port 8102]

It grades only the rollouts of --tasks (the judge's train split): any other gets an error, so held-out
rollouts are never demonstrated.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reward import correct, final_number  # noqa: E402

from tether.teacher import NoReference, Reply, teacher_main  # noqa: E402

SECTION = re.compile(r"<(task|agent_output)>\n(.*?)\n</\1>", re.DOTALL)


def _sections(request: dict[str, Any]) -> dict[str, str]:
    user = next((m for m in request.get("messages", []) if m.get("role") == "user"), {})
    return {name: html.unescape(text) for name, text in SECTION.findall(str(user.get("content") or ""))}


class JudgeTeacher:
    def __init__(self, tasks: list[dict[str, Any]]) -> None:
        self.known = {json.dumps(t["graded"]["task"], sort_keys=True) for t in tasks}

    def __call__(self, request: dict[str, Any]) -> Reply:
        sections = _sections(request)
        try:
            task = json.loads(sections["task"])
        except (KeyError, ValueError):
            raise NoReference("the judge found no <task> section to grade") from None
        if json.dumps(task, sort_keys=True) not in self.known:
            raise NoReference("the judge grades only its train split's rollouts")
        output = sections.get("agent_output")
        found = final_number(output)
        answer = task["reference"]["answer"]
        shown = "no number" if found is None else f"{found:g}"
        if correct(task, output):
            return Reply(content=f"The final answer is {shown}, the reference is {answer}: equal.\nSCORE: 1")
        return Reply(content=f"The final answer is {shown}, the reference is {answer}: not equal.\nSCORE: 0")


def main() -> None:
    teacher_main(JudgeTeacher, __doc__)


if __name__ == "__main__":
    main()
