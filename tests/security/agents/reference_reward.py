"""The evaluator of the private-fields tests: 1 when the agent's output holds the task's answer, wherever
the task keeps it (under `reference`, or as a plain field); `whole_task` says it got the public fields and
the answer together."""


def finds(task: dict, output: str | None) -> dict[str, float]:
    answer = str((task.get("reference") or {}).get("answer") or task.get("answer") or "")
    whole = bool(answer) and "question" in task
    return {"reward": float(bool(answer) and answer in (output or "")), "whole_task": float(whole)}


def only_output(output: str | None) -> float:
    """An evaluator that does not take the task: it cannot read a reference."""
    return float(bool(output))
