"""Agreement between two rewards of the same rollouts: the figures (`tether.rewards.agreement`) and
`tether store agreement` reading them from a store whose rollouts a judge and an evaluator both scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.rewards.test_judge import judge_server
from tests.rewards.test_sources import rollout
from tether.cli.main import main
from tether.rewards.agreement import agreement
from tether.store.records import Reward
from tether.store.reward_rule import named_reward


def test_the_rate_kappa_and_correlation_are_those_of_the_verdicts() -> None:
    # 3 both pass, 4 both fail, 2 only the first, 1 only the second: 7 of 10 agree; pass rates 0.5 and
    # 0.4 give a chance agreement 0.5*0.4 + 0.5*0.6 = 0.5, so kappa = (0.7 - 0.5) / 0.5 = 0.4.
    pairs = [(1.0, 1.0)] * 3 + [(0.0, 0.0)] * 4 + [(0.9, 0.0)] * 2 + [(0.2, 1.0)]
    result = agreement(pairs)
    assert (result.both_pass, result.both_fail, result.only_first, result.only_second) == (3, 4, 2, 1)
    assert result.rate == pytest.approx(0.7) and result.kappa == pytest.approx(0.4)
    assert result.rate_low < 0.7 < result.rate_high
    assert result.pearson is not None and 0 < result.pearson < 1
    assert result.first_mean == pytest.approx((3 + 1.8 + 0.2) / 10)


def test_two_raters_that_always_pass_have_no_kappa_and_a_threshold_moves_the_verdicts() -> None:
    assert agreement([(1.0, 1.0), (0.8, 0.9)]).kappa is None
    strict = agreement([(0.6, 1.0), (0.6, 0.0)], threshold=0.7)
    assert (strict.both_fail, strict.only_second) == (1, 1)
    with pytest.raises(ValueError, match="no rollout carries both"):
        agreement([])


def test_a_named_reward_is_the_last_of_its_attempt_and_never_a_step_reward() -> None:
    rewards = [
        Reward(rollout_id="r", name="correct", value=1.0, attempt=1, source="evaluator", primary=False),
        Reward(rollout_id="r", name="correct", value=0.0, attempt=2, source="evaluator", primary=False),
        Reward(rollout_id="r", name="correct", value=0.5, attempt=2, span_id="s", source="evaluator"),
        Reward(rollout_id="r", name="judge", value=1.0, attempt=2, source="agent"),
    ]
    assert named_reward(rewards, 1, "correct") == 1.0
    assert named_reward(rewards, 2, "correct") == 0.0
    assert named_reward(rewards, 2, "judge") == 1.0
    assert named_reward(rewards, 2, "judge", agent_rewards=False) is None


def test_tether_store_agreement_compares_a_judge_with_the_evaluator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The judge passes the first task's rollout only; the evaluator passes both.
    with judge_server(
        lambda r: "SCORE: 1" if "question 0" in r["messages"][1]["content"] else "SCORE: 0"
    ) as (
        url,
        _,
    ):
        rollout(tmp_path, url, "--reward-weights", "judge=1", "--run", "judged")
    capsys.readouterr()
    store_args = ["store", "--project-dir", str(tmp_path), "agreement", "--run", "judged"]
    assert main([*store_args, "--rewards", "judge,answered", "--mode", "all", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["n"], figures["both_pass"], figures["only_second"], figures["rate"]) == (2, 1, 1, 0.5)
    assert figures["first_mean"] == 0.5 and figures["second_mean"] == 1.0
    assert main([*store_args, "--rewards", "judge,answered", "--mode", "all"]) == 0
    assert "agreement 0.500" in capsys.readouterr().out
    with pytest.raises(
        SystemExit, match=r"carries both 'judge' and 'correct'.*\['answered', 'judge', 'reward'\]"
    ):
        main([*store_args, "--rewards", "judge,correct", "--mode", "all"])
    with pytest.raises(SystemExit, match="no succeeded val rollouts"):
        main([*store_args, "--rewards", "judge,answered"])
    with pytest.raises(SystemExit, match="two names"):
        main([*store_args, "--rewards", "judge"])
