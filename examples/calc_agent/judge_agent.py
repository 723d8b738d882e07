"""The calc judge as an agent: it grades one calc rollout (its judge task's `graded` field, made by
judge_tasks.py) with the very conversation `--reward judge:examples/calc_agent/judge.md` sends, and prints
the judge's reply. Run under `tether rollout` it records judge demonstrations (a scripted judge upstream)
or measures a judge model's agreement with the evaluator (judge_reward.py); `tether train --algorithm sft`
on those demonstrations makes a judge of a small model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from openai import OpenAI

from tether.rewards.judge import Endpoint, judge_messages

RUBRIC = Path(__file__).resolve().parent / "judge.md"


def main() -> None:
    task = json.loads(os.environ.get("TETHER_TASK") or "{}")
    graded = task.get("graded")
    if not isinstance(graded, dict):
        raise SystemExit("no rollout to grade: $TETHER_TASK has no 'graded' object (judge_tasks.py)")
    rubric = RUBRIC.read_text()
    trace, reported = graded.get("trace", ""), graded.get("reported", "")
    messages = judge_messages(rubric, graded["task"], graded.get("output"), trace, reported=reported)
    client = OpenAI()
    reply = client.chat.completions.create(
        model=os.environ.get("TETHER_JUDGE_MODEL", "judge"),
        messages=messages,  # type: ignore[arg-type]
        temperature=0.0,
        max_tokens=Endpoint.max_tokens,
    )
    print(reply.choices[0].message.content or "")


if __name__ == "__main__":
    main()
