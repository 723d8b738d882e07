"""The evaluator: `format` (is there an `Answer:` line), token `f1` of the answer against the gold answer
(SQuAD-style normalisation), and `reward` = 0.2 * format + 0.8 * f1, the primary reward. The gold answer
is the task's `reference.answer`, which the agent never sees.

    tether rollout ... --reward examples/rag_agent/reward.py:score
"""

from __future__ import annotations

import re
import string
from collections import Counter

ANSWER_LINE = re.compile(r"^\s*\**answer\**\s*:\**\s*(.*)$", re.IGNORECASE | re.MULTILINE)
ARTICLES = re.compile(r"\b(a|an|the)\b")
PUNCTUATION = str.maketrans(dict.fromkeys(string.punctuation, " "))


def normalize(text: str) -> list[str]:
    """Lowercase, drop punctuation and articles, split on whitespace."""
    return ARTICLES.sub(" ", text.lower().translate(PUNCTUATION)).split()


def token_f1(prediction: str, gold: str) -> float:
    predicted, expected = normalize(prediction), normalize(gold)
    if not predicted or not expected:
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def extract_answer(output: str | None) -> str | None:
    """The text of the last `Answer:` line, or None when there is none."""
    answers = ANSWER_LINE.findall(output or "")
    return answers[-1].strip() if answers else None


def score(task: dict, output: str | None) -> dict[str, float]:
    answer = extract_answer(output)
    has_format = float(answer is not None)
    # Without an Answer line the whole output is scored, so a right but unformatted reply still counts a bit.
    f1 = token_f1(answer if answer is not None else output or "", str(task["reference"]["answer"]))
    return {"reward": 0.2 * has_format + 0.8 * f1, "format": has_format, "f1": f1}
