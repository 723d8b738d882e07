"""The evaluator: 1 if the final number in the agent's output equals the gold answer (the task's
`reference`, which the agent never sees), else 0.

Numbers may carry thousands separators, a currency sign or decimals ("$1,250.00" is 1250).

    tether rollout ... --reward examples/calc_agent/reward.py:correct
"""

from __future__ import annotations

import re

# A comma only counts as a thousands separator before exactly three digits: "5,6" is two numbers.
NUMBER = re.compile(r"(-?)\$?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)")
TOLERANCE = 1e-6


def final_number(output: str | None) -> float | None:
    """The last number in the text, or None when there is none."""
    matches = NUMBER.findall(output or "")
    if not matches:
        return None
    sign, digits = matches[-1]
    value = float(digits.replace(",", ""))
    return -value if sign else value


def correct(task: dict, output: str | None) -> float:
    predicted = final_number(output)
    gold = final_number(str(task["reference"]["answer"]))
    if predicted is None or gold is None:
        return 0.0
    return float(abs(predicted - gold) <= TOLERANCE * max(1.0, abs(gold)))
