"""How far two rewards of the same rollouts agree (`tether store agreement`): a judge against the evaluator
it stands in for, read from rollouts that carry both (`--reward judge:RUBRIC.md --reward evaluator.py:fn
--reward-weights judge=1` records the evaluator's score beside the judge's on every rollout).

Each reward is read as a verdict (at least `threshold`: pass) for the agreement rate, its 95% bootstrap
interval and Cohen's kappa (agreement beyond what two raters with the same pass rates would reach by
chance); the raw values give Pearson's r. Pure Python, seeded.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tether.rewards.intervals import bootstrap_interval


@dataclass(frozen=True)
class Agreement:
    n: int
    both_pass: int
    both_fail: int
    only_first: int  # the first reward passes, the second does not
    only_second: int
    rate: float  # the share of rollouts on which the two verdicts agree
    rate_low: float
    rate_high: float
    kappa: float | None  # None when both verdicts are constant and equal (no disagreement is possible)
    pearson: float | None  # None when either reward is constant
    first_mean: float
    second_mean: float


def agreement(pairs: Sequence[tuple[float, float]], threshold: float = 0.5) -> Agreement:
    if not pairs:
        raise ValueError("no rollout carries both rewards")
    verdicts = [(a >= threshold, b >= threshold) for a, b in pairs]
    both_pass = sum(a and b for a, b in verdicts)
    both_fail = sum(not a and not b for a, b in verdicts)
    only_first = sum(a and not b for a, b in verdicts)
    n = len(pairs)
    agreed = [1.0 if a == b else 0.0 for a, b in verdicts]
    low, high = bootstrap_interval(agreed)
    return Agreement(
        n=n,
        both_pass=both_pass,
        both_fail=both_fail,
        only_first=only_first,
        only_second=n - both_pass - both_fail - only_first,
        rate=statistics.fmean(agreed),
        rate_low=low,
        rate_high=high,
        kappa=_kappa(statistics.fmean(agreed), verdicts),
        pearson=_pearson([a for a, _ in pairs], [b for _, b in pairs]),
        first_mean=statistics.fmean(a for a, _ in pairs),
        second_mean=statistics.fmean(b for _, b in pairs),
    )


def _kappa(observed: float, verdicts: Sequence[tuple[bool, bool]]) -> float | None:
    n = len(verdicts)
    first = sum(a for a, _ in verdicts) / n
    second = sum(b for _, b in verdicts) / n
    chance = first * second + (1 - first) * (1 - second)
    if math.isclose(chance, 1.0):
        return None
    return (observed - chance) / (1 - chance)


def _pearson(first: Sequence[float], second: Sequence[float]) -> float | None:
    if len(set(first)) < 2 or len(set(second)) < 2:
        return None
    return statistics.correlation(first, second)
