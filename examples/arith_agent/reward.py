"""The evaluator: 1 for the right number, 0 otherwise. The answer is in the task's `reference`, which the
agent never sees."""


def correct(task: dict, output: str | None) -> float:
    try:
        return float(abs(float(output or "") - float(task["reference"]["answer"])) < 1e-6)
    except ValueError:
        return 0.0
