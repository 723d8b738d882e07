"""More from each batch: several optimizer steps per batch, token-level aggregation, masked importance
weights, and the processed distribution in the learner (tiny-random, no gateway)."""

# ruff: noqa: F811  (the fixtures one_thread and tiny_path come from test_policy, and are used by name)

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.learner.test_policy import (  # noqa: F401  (one_thread and tiny_path are fixtures)
    BAD,
    GOOD,
    make,
    one_thread,
    record_own_logprobs,
    same_params,
    tiny_path,
    trainable,
)
from tether.algorithms import Sample
from tether.learner import PolicyTrainer, TrainConfig
from tether.sampling import Sampler

LONG = GOOD + GOOD  # 8 tokens against BAD's 3


def on_policy(trainer: PolicyTrainer, *advantages_and_responses: tuple[float, list[int]]) -> list[Sample]:
    items = [make(f"r{i}", response) for i, (_, response) in enumerate(advantages_and_responses)]
    record_own_logprobs(trainer, items)
    return [
        Sample(t, advantage=a, weight=1.0) for t, (a, _) in zip(items, advantages_and_responses, strict=True)
    ]


def test_loss_aggregation_by_rollout_or_by_token(tiny_path: Path) -> None:
    # At ratio 1 the surrogate is -A per token. By rollout: (-1 + 1) / 2 = 0; by token: (-8 + 3) / 11.
    for loss_agg, expected in (("rollout", 0.0), ("token", -5 / 11)):
        trainer = PolicyTrainer(TrainConfig(model=str(tiny_path), loss_agg=loss_agg))
        metrics = trainer.step(on_policy(trainer, (1.0, LONG), (-1.0, BAD)))
        assert metrics.policy_loss == pytest.approx(expected, abs=1e-5)


def test_epochs_and_mini_batches_take_more_optimizer_steps(tiny_path: Path) -> None:
    def gain(**options: object) -> tuple[float, int, float]:
        trainer = PolicyTrainer(TrainConfig(model=str(tiny_path), lr=2e-3, **options))  # type: ignore[arg-type]
        samples = on_policy(trainer, (1.0, GOOD), (-1.0, BAD), (1.0, GOOD), (-1.0, BAD))
        before = sum(trainer.logprobs([samples[0].transition])[0])
        metrics = trainer.step(samples)
        after = sum(trainer.logprobs([samples[0].transition])[0])
        return after - before, metrics.optimizer_steps, metrics.mean_ratio

    one, steps, ratio = gain()
    assert steps == 1 and ratio == pytest.approx(1.0, abs=1e-6)
    many, steps, ratio = gain(ppo_epochs=2, mini_batches=2)
    assert steps == 4
    assert 0 < one < many  # the rewarded response gains more from four steps than from one
    assert ratio != pytest.approx(1.0, abs=1e-6)  # later mini-batches of the first pass moved already


def test_masked_mode_drops_tokens_outside_the_band(tiny_path: Path) -> None:
    trainer = PolicyTrainer(TrainConfig(model=str(tiny_path), tis_mode="mask", tis_cap=2.0))
    samples = on_policy(trainer, (1.0, GOOD), (-1.0, BAD))
    for sample in samples:  # recorded 1.0 lower: weight e > 2 for every token
        sample.transition.response_logprobs = [lp - 1.0 for lp in sample.transition.response_logprobs]
    start = trainable(trainer)
    metrics = trainer.step(samples)
    assert metrics.masked_fraction == 1.0 and metrics.truncated_fraction == 0.0
    assert metrics.policy_loss == 0.0 and metrics.grad_norm == 0.0
    assert same_params(start, trainable(trainer))

    truncating = PolicyTrainer(TrainConfig(model=str(tiny_path), tis_cap=2.0))
    shifted = on_policy(truncating, (1.0, GOOD), (-1.0, BAD))
    for sample in shifted:
        sample.transition.response_logprobs = [lp - 1.0 for lp in sample.transition.response_logprobs]
    assert truncating.step(shifted).truncated_fraction == 1.0


def test_learner_scores_the_processed_distribution(tiny_path: Path) -> None:
    trainer = PolicyTrainer(TrainConfig(model=str(tiny_path)))
    raw = make("r", GOOD)
    hot = replace(raw, sampler=Sampler(temperature=0.5))
    cut = replace(raw, sampler=Sampler(temperature=1.0, top_k=5))
    raw_lp, hot_lp, cut_lp = trainer.logprobs([raw, hot, cut])
    with torch.no_grad():
        logits = trainer.scorer(*_inputs(trainer, raw))[0]
    targets = torch.tensor(GOOD)
    expected_hot = torch.log_softmax(logits / 0.5, -1).gather(-1, targets[:, None]).squeeze(-1)
    assert hot_lp == pytest.approx(expected_hot.tolist(), abs=1e-5)
    # top-k renormalizes over 5 tokens (plus the sampled one when it falls outside): never below raw.
    assert all(c >= r - 1e-6 for c, r in zip(cut_lp, raw_lp, strict=True))
    assert all(math.isfinite(v) for v in cut_lp)


def _inputs(trainer: PolicyTrainer, transition):  # noqa: ANN001, ANN202
    from tether.learner.batches import collate

    mb = collate([transition], [0], trainer.pad_id)
    return mb.input_ids, mb.attention_mask, mb.position_ids, mb.targets.shape[1]


def test_update_options_are_checked() -> None:
    with pytest.raises(ValueError, match="loss_agg"):
        TrainConfig(model="tiny-random", loss_agg="sequence")
    with pytest.raises(ValueError, match="ppo_epochs"):
        TrainConfig(model="tiny-random", ppo_epochs=0)
    with pytest.raises(ValueError, match="tis_cap must be above 1"):
        TrainConfig(model="tiny-random", tis_mode="mask", tis_cap=None)


def last_token_shifted(trainer: PolicyTrainer, shift: float) -> list[Sample]:
    """GOOD with advantage +1 and BAD with -1, each one's last recorded logprob `shift` below the
    policy's: that token's weight pi_old / mu is e^shift, the others' 1."""
    samples = on_policy(trainer, (1.0, GOOD), (-1.0, BAD))
    for sample in samples:
        sample.transition.response_logprobs[-1] -= shift
    return samples


@pytest.mark.parametrize(
    ("level", "masked"),
    [("token", 2 / 7), ("sequence", 1.0), ("geometric", 0.0)],
)
def test_tis_level_weighs_each_token_or_each_sequence(tiny_path: Path, level: str, masked: float) -> None:
    # The last tokens' weight e^0.9 = 2.46 leaves [1/2, 2]: alone (token, 2 of 7 tokens), as their
    # sequences' product (sequence: every token), or not as the geometric means e^0.225 and e^0.3.
    trainer = PolicyTrainer(TrainConfig(model=str(tiny_path), tis_mode="mask", tis_cap=2.0, tis_level=level))
    start = trainable(trainer)
    metrics = trainer.step(last_token_shifted(trainer, 0.9))
    assert metrics.masked_fraction == pytest.approx(masked)
    assert same_params(start, trainable(trainer)) == (masked == 1.0)


def test_tis_level_sequence_truncates_the_whole_sequence_at_the_cap(tiny_path: Path) -> None:
    def truncated(level: str) -> float:
        trainer = PolicyTrainer(TrainConfig(model=str(tiny_path), tis_cap=2.0, tis_level=level))
        return trainer.step(last_token_shifted(trainer, 0.9)).truncated_fraction

    assert truncated("token") == pytest.approx(2 / 7)
    assert truncated("geometric") == 0.0 and truncated("sequence") == 1.0


def test_rl_learning_rate_and_warm_up_start_after_the_sft_updates(tiny_path: Path) -> None:
    options = {"lr": 1e-3, "rl_lr": 4e-4, "rl_warmup_steps": 2, "rl_start_step": 2}
    trainer = PolicyTrainer(TrainConfig(model=str(tiny_path), **options))  # type: ignore[arg-type]
    rates = [trainer.step(on_policy(trainer, (1.0, GOOD), (-1.0, BAD))).lr for _ in range(5)]
    assert rates == pytest.approx([1e-3, 1e-3, 2e-4, 4e-4, 4e-4])
    plain = TrainConfig(model="tiny-random", lr=1e-3, warmup_steps=2)
    assert [plain.lr_factor(step) for step in range(3)] == [0.5, 1.0, 1.0]
    with pytest.raises(ValueError, match="rl-lr"):
        TrainConfig(model="tiny-random", rl_lr=0.0)


def test_rl_cosine_decay_falls_to_a_tenth_of_rls_rate_over_its_updates() -> None:
    config = TrainConfig(
        model="tiny-random", lr=1e-3, rl_lr=4e-4, rl_start_step=2, rl_warmup_steps=2, rl_decay_steps=4
    )
    half = math.sqrt(0.5)  # cos(pi / 4)
    cosine = [1.0, 0.1 + 0.45 * (1 + half), 0.55, 0.1 + 0.45 * (1 - half), 0.1, 0.1]
    warm_up = [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    expected = [1.0, 1.0] + [0.4 * w * c for w, c in zip(warm_up, cosine, strict=True)]
    assert [config.lr_factor(step) for step in range(8)] == pytest.approx(expected)
    assert TrainConfig(model="tiny-random", rl_start_step=1).lr_factor(100) == 1.0  # constant by default
