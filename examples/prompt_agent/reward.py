"""The evaluator: 1 when the agent's answer is the expected word (case and punctuation aside). The expected
word is the task's `reference.answer`, which the agent never sees."""


def correct(task: dict, output: str | None) -> float:
    words = (output or "").strip().strip(".!").lower().split()
    return float(bool(words) and words[-1] == str(task["reference"]["answer"]).lower())
