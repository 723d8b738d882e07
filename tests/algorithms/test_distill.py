"""On-policy distillation's credit assignment: the per-token reverse KL against the teacher."""

from __future__ import annotations

import math

import pytest

from tether.adapters.transitions import Transition
from tether.algorithms.advantages import DemonstrationInRLBatch
from tether.algorithms.distill import distill_advantages, token_advantages


def transition(rollout: str, logprobs: list[float], mask: list[int], call: int = 0) -> Transition:
    return Transition(
        rollout_id=rollout,
        task_id="t",
        group_id=None,
        attempt=1,
        call_index=call,
        agent=None,
        policy_version=0,
        prompt_ids=[1, 2],
        response_ids=list(range(10, 10 + len(logprobs))),
        response_logprobs=logprobs,
        loss_mask=mask,
    )


def test_each_sampled_token_earns_the_teachers_logprob_minus_the_students() -> None:
    t = transition("r", [-1.0, -2.0, 0.0, -0.5], [1, 1, 0, 1])
    assert token_advantages(t, [-0.5, -4.0, -9.0, -0.5]) == [0.5, -2.0, 0.0, 0.0]


def test_a_batch_weights_every_rollout_once_and_reports_the_reverse_kl() -> None:
    one = transition("a", [-1.0, -1.0], [1, 1])
    two_first = transition("b", [-2.0], [1])
    two_second = transition("b", [-1.0, -3.0, -1.0], [1, 0, 1], call=1)
    teacher = [[-0.5, -1.5], [-1.0], [-1.0, 0.0, -2.0]]
    batch, reverse_kl = distill_advantages([one, two_first, two_second], teacher)
    weights = {(s.rollout_id, s.transition.call_index): s.weight for s in batch.samples}
    assert weights == {("a", 0): 1.0, ("b", 0): pytest.approx(1 / 3), ("b", 1): pytest.approx(2 / 3)}
    assert batch.samples[2].token_advantages == [0.0, 0.0, -1.0]
    # trained gaps (teacher - student): 0.5, -0.5, 1.0, 0.0, -1.0: mean 0, so the reverse KL estimate is 0
    assert reverse_kl == pytest.approx(0.0)
    assert batch.report.method == "opd" and batch.report.rollouts_used == 2
    assert batch.report.mean_abs_advantage == pytest.approx(3.0 / 5)


def test_a_student_less_sure_than_its_teacher_has_a_negative_reverse_kl_estimate() -> None:
    batch, reverse_kl = distill_advantages([transition("a", [-3.0, -3.0], [1, 1])], [[-1.0, -2.0]])
    assert reverse_kl == pytest.approx(-1.5)
    assert all(a > 0 for a in batch.samples[0].token_advantages or [])
    assert math.isclose(batch.samples[0].advantage, 1.5)


def test_a_teacher_answer_of_the_wrong_length_is_refused_naming_the_call() -> None:
    with pytest.raises(ValueError, match="rollout 'a' call 0: the teacher scored 1 tokens of a 2-token"):
        distill_advantages([transition("a", [-1.0, -1.0], [1, 1])], [[-1.0]])


def test_demonstrations_are_never_distilled_on() -> None:
    demo = transition("a", [0.0, 0.0], [1, 1])
    demo.demonstration = True
    with pytest.raises(DemonstrationInRLBatch):
        distill_advantages([demo], [[-1.0, -1.0]])
