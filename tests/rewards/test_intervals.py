"""Bootstrap intervals for held-out scores: coverage on known distributions, pairing, degenerate inputs."""

from __future__ import annotations

import random
import statistics

import pytest

from tether.rewards.intervals import bootstrap_interval, paired_difference_interval, paired_differences


def test_the_interval_of_a_mean_covers_the_true_mean_about_95_times_in_100() -> None:
    """200 samples of 40 rewards of 0 or 1 from a known success rate: the 95% interval holds the true rate in
    about 95% of them (the percentile bootstrap runs a little short at this size, never far)."""
    rng = random.Random(1)
    true_mean = 0.3
    covered = 0
    widths = []
    for trial in range(200):
        values = [float(rng.random() < true_mean) for _ in range(40)]
        low, high = bootstrap_interval(values, resamples=1000, seed=trial)
        assert low <= statistics.fmean(values) <= high
        covered += low <= true_mean <= high
        widths.append(high - low)
    assert 0.88 <= covered / 200 <= 0.99
    # the normal approximation's width, 2 * 1.96 * sqrt(p(1-p)/n), is about 0.28 here
    assert 0.22 < statistics.fmean(widths) < 0.33


def test_a_higher_confidence_gives_a_wider_interval_and_more_tasks_a_narrower_one() -> None:
    rng = random.Random(2)
    values = [rng.gauss(0.5, 0.2) for _ in range(50)]
    low80, high80 = bootstrap_interval(values, confidence=0.8)
    low95, high95 = bootstrap_interval(values)
    low99, high99 = bootstrap_interval(values, confidence=0.99)
    assert low99 < low95 < low80 < high80 < high95 < high99
    low, high = bootstrap_interval(values * 4)  # the same spread over four times the tasks: half the width
    assert 0.4 < (high - low) / (high95 - low95) < 0.6


def test_the_same_seed_gives_the_same_interval_and_order_does_not_matter_much() -> None:
    values = [0.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.25, 1.0]
    assert bootstrap_interval(values, seed=3) == bootstrap_interval(values, seed=3)
    other = bootstrap_interval(list(reversed(values)), seed=4)
    assert other == pytest.approx(bootstrap_interval(values, seed=3), abs=0.07)


@pytest.mark.parametrize("values", [[0.25], [1.0] * 30, [0.0] * 7])
def test_all_equal_values_give_a_zero_width_interval_at_their_value(values: list[float]) -> None:
    assert bootstrap_interval(values) == (values[0], values[0])


def test_the_interval_stays_inside_the_range_of_the_values() -> None:
    values = [0.0] * 39 + [1.0]
    low, high = bootstrap_interval(values)
    assert low == 0.0 and 0.0 < high <= 0.125


@pytest.mark.parametrize(
    ("values", "options", "message"),
    [
        ([], {}, "no values"),
        ([1.0, float("nan")], {}, "finite"),
        ([0.0, 1.0], {"confidence": 1.0}, "confidence"),
        ([0.0, 1.0], {"confidence": 0.0}, "confidence"),
        ([0.0, 1.0], {"resamples": 0}, "resamples"),
    ],
)
def test_nonsense_is_refused(values: list[float], options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bootstrap_interval(values, **options)


def test_a_paired_difference_cancels_what_the_tasks_share() -> None:
    """Task difficulty varies a lot, the change is a small steady gain: paired by task, the interval of the
    difference excludes 0; treated as two unrelated samples, the spread of the tasks would hide it."""
    rng = random.Random(5)
    difficulty = {f"t{i}": rng.uniform(0.0, 0.8) for i in range(30)}
    before = dict(difficulty)
    after = {task: value + 0.05 + rng.uniform(-0.02, 0.02) for task, value in difficulty.items()}
    low, high = paired_difference_interval(before, after)
    assert 0.03 < low <= 0.05 <= high < 0.07
    before_low, before_high = bootstrap_interval(list(before.values()))
    after_low, _ = bootstrap_interval(list(after.values()))
    assert after_low < before_high  # the unpaired intervals overlap
    assert before_low < after_low


def test_pairing_is_by_task_id_for_mappings_and_by_position_for_sequences() -> None:
    before = {"a": 0.0, "b": 1.0, "c": 0.0}
    after = {"c": 1.0, "a": 1.0, "b": 1.0}  # another order, the same tasks
    assert paired_differences(before, after) == [1.0, 0.0, 1.0]
    assert paired_differences([0.0, 1.0], [1.0, 1.0]) == [1.0, 0.0]
    assert paired_difference_interval(before, before) == (0.0, 0.0)
    low, high = paired_difference_interval(before, after, seed=1)
    assert 0.0 <= low < 2 / 3 < high <= 1.0


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        ({"a": 0.0, "b": 1.0}, {"a": 0.0, "c": 1.0}, "same tasks"),
        ([0.0, 1.0], [1.0], "as many tasks"),
        ({"a": 0.0}, [1.0], "two mappings"),
        ({}, {}, "no values"),
    ],
)
def test_scores_that_do_not_pair_are_refused(before: object, after: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_difference_interval(before, after)  # type: ignore[arg-type]
