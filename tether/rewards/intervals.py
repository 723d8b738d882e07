"""Percentile-bootstrap intervals for held-out scores: the mean of one validation's per-task rewards, and
the difference of two validations of the same policy run on the same tasks (paired by task).

Pure Python (no numpy), seeded, so the same rewards always give the same interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

DEFAULT_RESAMPLES = 10_000

Scores = Mapping[str, float] | Sequence[float]


def bootstrap_interval(
    values: Sequence[float], confidence: float = 0.95, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """The `confidence` percentile-bootstrap interval of the mean of `values`: `resamples` resamples of
    len(values) drawn with replacement, the mean of each, and their lower and upper
    (1 - confidence) / 2 quantiles. All values equal (one value included) give (value, value).

    Raises ValueError for no values, a confidence outside (0, 1), fewer than 1 resample, or a value that
    is not finite.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    data = [float(v) for v in values]
    if not data:
        raise ValueError("bootstrap_interval: no values")
    if not all(math.isfinite(v) for v in data):
        raise ValueError("bootstrap_interval: every value must be finite")
    low, high = min(data), max(data)
    if low == high:
        return low, high
    rng = random.Random(seed)
    size = len(data)
    means = sorted(math.fsum(rng.choices(data, k=size)) / size for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    # A mean of values in [low, high] is in [low, high]; rounding in the quantile must not leave it.
    return max(low, _quantile(means, tail)), min(high, _quantile(means, 1.0 - tail))


def paired_difference_interval(
    before: Scores,
    after: Scores,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """The `confidence` bootstrap interval of mean(after - before) over the same tasks: the tasks are
    resampled, each carrying both of its scores, so what the two share (a task's difficulty) cancels.

    `before` and `after` are either mappings task id -> score with the same ids, or sequences of the same
    length in the same task order. Raises ValueError when they do not pair up (and as bootstrap_interval).
    """
    return bootstrap_interval(paired_differences(before, after), confidence, resamples, seed)


def difference_interval(
    before: Sequence[float],
    after: Sequence[float],
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """The `confidence` percentile-bootstrap interval of mean(after) - mean(before) for two independent
    samples (two policies served to different sessions): each is resampled on its own.

    Raises ValueError for an empty sample, a value that is not finite, or bad parameters."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    first, second = [float(v) for v in before], [float(v) for v in after]
    if not first or not second:
        raise ValueError("difference_interval: both samples need values")
    if not all(math.isfinite(v) for v in first + second):
        raise ValueError("difference_interval: every value must be finite")
    rng = random.Random(seed)
    diffs = sorted(
        math.fsum(rng.choices(second, k=len(second))) / len(second)
        - math.fsum(rng.choices(first, k=len(first))) / len(first)
        for _ in range(resamples)
    )
    tail = (1.0 - confidence) / 2.0
    return _quantile(diffs, tail), _quantile(diffs, 1.0 - tail)


def paired_differences(before: Scores, after: Scores) -> list[float]:
    """after - before per task: by task id for mappings (sorted by id), by position for sequences."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        if set(before) != set(after):
            only_before = sorted(set(before) - set(after))[:3]
            only_after = sorted(set(after) - set(before))[:3]
            raise ValueError(
                f"paired scores need the same tasks: only before {only_before}, only after {only_after}"
            )
        return [float(after[key]) - float(before[key]) for key in sorted(before)]
    if isinstance(before, Mapping) or isinstance(after, Mapping):
        raise ValueError("paired scores: give two mappings (task id -> score) or two sequences")
    if len(before) != len(after):
        raise ValueError(f"paired scores need as many tasks after ({len(after)}) as before ({len(before)})")
    return [float(a) - float(b) for b, a in zip(before, after, strict=True)]


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, linearly interpolated between order statistics."""
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    fraction = position - below
    return ordered[below] + (ordered[above] - ordered[below]) * fraction
