"""The judge agent's evaluator: 1 when the judge's verdict (its `SCORE:` line, passing at 0.5) is the calc
evaluator's (the judge task's private `label`), else 0; a reply out of format scores 0."""

from __future__ import annotations

from tether.rewards.judge import parse_score


def agrees(task: dict, output: str | None) -> float:
    score = parse_score(output or "")
    if score is None:
        return 0.0
    return float((score >= 0.5) == (task["reference"]["label"] >= 0.5))
