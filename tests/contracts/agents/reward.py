"""The evaluator of the pool kit: the task's own `reward` for an answer that echoes its question."""


def promised(task: dict, output: str | None) -> float:
    return float(task["reward"]) if output == task["q"] else -1.0
