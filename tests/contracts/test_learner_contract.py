"""What every learner (`tether.learner.base.Learner`) does, on each backend in `LEARNERS` (conftest):
a step reports its metrics and moves the policy; the versions it saves serve what it had; a checkpoint
resumes into the very next step an uninterrupted learner takes; an empty or diverged step changes
nothing. Each test opens its own learners (a Ray learner takes some seconds to start its ranks)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.contracts.conftest import gap, on_policy_batch, served_logprobs, transition, transitions
from tether.adapters.transitions import Transition
from tether.algorithms.advantages import AdvantageBatch, Sample, assign_advantages
from tether.learner.base import Learner, TrainingDiverged
from tether.learner.config import TrainConfig
from tether.models.catalog import TINY_RANDOM
from tether.policy_server import PolicyServerOptions, open_policy_server

MakeLearner = Callable[[TrainConfig], Learner]
LR = 1e-2
WARMUP = 3
# The progress line and the run's records read these of every step (tether/experiment/progress.py).
REPORTED = ("loss", "clip_fraction", "approx_kl", "nll", "seconds", "grad_norm", "lr")


def config(**overrides: object) -> TrainConfig:
    """The tiny model, fp32 on both sides, micro-batches of a few rows, and a warm-up the scheduler's
    state has to carry across a checkpoint."""
    options: dict[str, object] = {
        "model": TINY_RANDOM,
        "lr": LR,
        "bf16": False,
        "seed": 3,
        "micro_batch_tokens": 64,
        "warmup_steps": WARMUP,
    }
    return TrainConfig(**{**options, **overrides})  # type: ignore[arg-type]


def probes() -> list[Transition]:
    return [transition("p", [2131, 4387, 3658, 28, 9981], 0.0), transition("q", [77, 78, 79], 0.0, extra=7)]


def gaps(a: list[list[float]], b: list[list[float]]) -> float:
    assert len(a) == len(b)
    return max(gap(x, y) for x, y in zip(a, b, strict=True))


def test_a_step_reports_its_metrics_and_moves_the_policy(make_learner: MakeLearner) -> None:
    """`logprobs` scores every response token (none of an empty response) and changes nothing; a step
    reports what it trained on and moves the policy."""
    learner = make_learner(config())
    items = [*probes(), transition("empty", [], 0.0)]
    before = learner.logprobs(items)
    assert [len(x) for x in before] == [len(t.response_ids) for t in items] and before[-1] == []
    assert all(lp < 0 for lp in before[0] + before[1]) and learner.logprobs(items) == before

    batch = on_policy_batch(learner)
    metrics = learner.step(batch).to_dict()
    assert metrics["step"] == 1
    assert metrics["tokens"] == sum(s.transition.trained_tokens for s in batch.samples)
    assert metrics["samples"] == len(batch.samples) == 6 and metrics["rollouts"] == 4
    assert all(math.isfinite(metrics[key]) for key in REPORTED), metrics
    assert metrics["lr"] == pytest.approx(LR / WARMUP) and metrics["grad_norm"] > 0
    # The behaviour logprobs are the learner's own: the update starts on policy.
    assert metrics["mean_ratio"] == pytest.approx(1.0, abs=1e-4)
    assert gaps(learner.logprobs(items[:2]), before[:2]) > 1e-4

    second = learner.step(on_policy_batch(learner)).to_dict()
    assert second["step"] == 2 and second["lr"] == pytest.approx(2 * LR / WARMUP)


async def test_saved_versions_serve_what_the_learner_had(make_learner: MakeLearner, tmp_path: Path) -> None:
    """Each version is a folder of its own that the built-in engine serves with the learner's logprobs,
    the older one untouched by the newer."""
    learner = make_learner(config())
    probe = probes()[0]
    saved, expected = [], []
    for version in (1, 2):
        learner.step(on_policy_batch(learner))
        weights = learner.save_weights(tmp_path / "policies" / f"v{version}", version)
        assert (weights.path, weights.kind, weights.version) == (
            tmp_path / "policies" / f"v{version}",
            "lora",
            version,
        )
        saved.append(weights)
        expected.append(learner.logprobs([probe])[0])
    assert gap(expected[0], expected[1]) > 1e-4  # the two versions differ
    server = open_policy_server("builtin", PolicyServerOptions(model=TINY_RANDOM))
    try:
        for weights, logprobs in zip(saved, expected, strict=True):
            assert await server.load(weights) == weights.version
            served, version = await served_logprobs(server.upstream(), probe)
            assert version == weights.version and gap(served, logprobs) < 1e-4
    finally:
        server.close()


@pytest.mark.parametrize("dropout", [0.0, 0.1], ids=["no-dropout", "lora-dropout"])
def test_a_resumed_checkpoint_takes_the_same_next_step(
    make_learner: MakeLearner, tmp_path: Path, dropout: float
) -> None:
    """Weights, optimizer moments, the warm-up's position, the step count and the random state (which
    LoRA dropout draws from) all come back: the next step from the checkpoint is the uninterrupted
    learner's (`PolicyTrainer.save_checkpoint`: "everything needed to resume")."""
    uninterrupted = make_learner(config(lora_dropout=dropout))
    for _ in range(2):
        uninterrupted.step(on_policy_batch(uninterrupted))
    checkpoint = uninterrupted.save_checkpoint(tmp_path / "checkpoint", {"data_position": 7})
    next_batch = on_policy_batch(uninterrupted)
    expected = uninterrupted.step(next_batch).to_dict()
    expected_logprobs = uninterrupted.logprobs(probes())

    resumed = make_learner(config(lora_dropout=dropout))
    assert gaps(resumed.logprobs(probes()), expected_logprobs) > 1e-4  # a fresh learner is elsewhere
    assert resumed.load_checkpoint(checkpoint) == {"data_position": 7}
    metrics = resumed.step(next_batch).to_dict()
    assert metrics["step"] == expected["step"] == 3
    for key in ("lr", "loss", "grad_norm", "mean_ratio"):
        assert metrics[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key
    assert gaps(resumed.logprobs(probes()), expected_logprobs) < 1e-6


def test_a_step_that_cannot_apply_changes_nothing(make_learner: MakeLearner) -> None:
    """Nothing to train (no sample, or none with a trained token and a weight) is a ValueError saying so;
    a non-finite loss raises TrainingDiverged "leaving the weights as they were" (the protocol). Neither
    moves the policy, the step count or the schedule: the next good step is the first."""
    learner = make_learner(config())
    before = learner.logprobs(probes())
    good = on_policy_batch(learner)
    empty = assign_advantages([])
    masked = transition("masked", [2131, 4387], 1.0)
    masked.loss_mask = [0, 0]
    untrainable = AdvantageBatch(
        [Sample(masked, 1.0, 1.0), Sample(transition("zero", [28], 0.0), 1.0, 0.0)], empty.report
    )
    for batch in (empty, untrainable):
        with pytest.raises(ValueError, match="nothing to train"):
            learner.step(batch)
    poisoned = on_policy_batch(learner, transitions())
    poisoned.samples[0] = Sample(poisoned.samples[0].transition, math.nan, poisoned.samples[0].weight)
    with pytest.raises(TrainingDiverged):
        learner.step(poisoned)
    assert learner.logprobs(probes()) == before

    metrics = learner.step(good).to_dict()
    assert metrics["step"] == 1 and metrics["lr"] == pytest.approx(LR / WARMUP)
    assert gaps(learner.logprobs(probes()), before) > 1e-4
