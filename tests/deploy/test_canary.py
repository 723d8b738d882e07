"""The canary's rule (`tether.deploy.canary`): which sessions it serves, and when its rewards against the
incumbent's promote it, roll it back, or wait."""

from __future__ import annotations

import pytest

from tether.deploy import CanaryRule, arm_of, compare, decide
from tether.rewards.intervals import difference_interval

RULE = CanaryRule(share=0.5, min_sessions=10, max_sessions=40)


def test_a_share_of_names_goes_to_the_canary_and_a_name_always_the_same_way() -> None:
    names = [f"user-{i}" for i in range(4000)]
    arms = [arm_of(name, 0.1) for name in names]
    assert 0.08 < arms.count("canary") / len(names) < 0.12
    assert arms == [arm_of(name, 0.1) for name in names]
    # a larger share takes every name a smaller one took, and more
    assert all(
        arm_of(name, 0.3) == "canary" for name, arm in zip(names, arms, strict=True) if arm == "canary"
    )


def test_better_promotes_worse_rolls_back_unclear_waits_then_rolls_back_at_the_cap() -> None:
    worse, better = [0.0, 1.0, 0.0, 0.0] * 5, [1.0, 1.0, 0.0, 1.0] * 5  # means 0.25 and 0.75
    assert decide(RULE, compare(worse, better)).verdict == "promote"
    assert decide(RULE, compare(better, worse)).verdict == "rollback"
    same = [0.0, 1.0] * 10
    assert decide(RULE, compare(same, same)).verdict == "wait"
    assert decide(RULE, compare(same * 2, same * 2)).verdict == "rollback"  # 40 canary sessions: its cap
    # a margin promotes a canary not shown worse by more than it
    assert decide(CanaryRule(0.5, 10, 40, margin=0.5), compare(same, same)).verdict == "promote"


def test_too_few_rewarded_sessions_in_either_arm_waits_whatever_the_means() -> None:
    few = decide(RULE, compare([0.0] * 9, [1.0] * 30))
    assert few.verdict == "wait" and "10 of each are needed" in few.reason
    assert decide(RULE, compare([0.0] * 30, [1.0])).verdict == "wait"


def test_the_interval_of_two_independent_samples_covers_their_difference() -> None:
    low, high = difference_interval([0.0, 1.0] * 50, [1.0, 1.0, 1.0, 0.0] * 25)  # 0.5 -> 0.75
    assert low < 0.25 < high and low > 0
    assert difference_interval([0.5] * 5, [0.5] * 7) == (0.0, 0.0)
    with pytest.raises(ValueError, match="both samples"):
        difference_interval([], [1.0])


def test_a_rule_out_of_range_is_refused_naming_the_value() -> None:
    for rule, says in (
        (CanaryRule(share=1.0), "share is between 0 and 1"),
        (CanaryRule(min_sessions=1), "at least 2 rewarded sessions"),
        (CanaryRule(min_sessions=30, max_sessions=20), "max sessions >= min sessions"),
        (CanaryRule(margin=-0.1), "margin is >= 0"),
    ):
        with pytest.raises(ValueError, match=says):
            rule.check()
