"""The evaluator of the forgery tests: 1.0 for the task's number, else 0.0; an answer that is no number
makes it raise, as a careless evaluator would (the rollout then fails, with no reward of its own)."""


def exact(task: dict, output: str | None) -> float:
    return float(int(output or "") == task["answer"])
