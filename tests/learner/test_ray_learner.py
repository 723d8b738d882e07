"""The learner of 2 ranks (gloo, a real process group of Ray actors) makes the very update one rank makes
on the same batch, with rollouts of unequal weights and sizes, and with a rank that gets no sample; its
checkpoint resumes a learner of another rank count."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import torch
from ray.cluster_utils import Cluster

from tests.learner_rig import assert_close, batch, params
from tether.algorithms import AdvantageBatch, Sample
from tether.learner import PolicyTrainer, TrainConfig
from tether.learner.policy import StepMetrics
from tether.learner.ray_learner import RayLearner, _combine
from tether.models.catalog import TINY_RANDOM, resolve_model


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> TrainConfig:
    path = resolve_model(TINY_RANDOM, tmp_path_factory.mktemp("models"))
    # adam_eps 1: the step is about lr * gradient, so the comparison sees the gradients themselves (Adam's
    # first step with a tiny eps is lr * sign(gradient), which float noise flips where a gradient is ~0).
    return TrainConfig(
        model=str(path), lr=1.0, adam_eps=1.0, grad_clip=0.0, bf16=False, micro_batch_tokens=64, seed=3
    )


@pytest.mark.parametrize("sharding", ["replicate", "fsdp"])
def test_two_ranks_make_the_single_rank_update(
    config: TrainConfig, ray_cluster: Cluster, tmp_path: Path, sharding: str
) -> None:
    torch.set_num_threads(1)
    local = PolicyTrainer(config)
    before = params(local.model)
    learner = RayLearner(config, ranks=2, sharding=sharding)
    try:
        for held, whole in learner.held():
            assert held < whole * 0.6 if sharding == "fsdp" else held == whole
        assert_close(learner.trainable(0), before)
        full = batch()
        local_metrics = local.step(full).to_dict()
        ray_metrics = learner.step(full).to_dict()
        after = params(local.model)
        assert not all(torch.equal(before[n], after[n]) for n in before)  # the step moved the weights
        assert_close(learner.trainable(0), after)
        assert_close(learner.trainable(1), after)
        for key in ("loss", "grad_norm", "mean_ratio", "entropy"):
            assert ray_metrics[key] == pytest.approx(local_metrics[key], rel=1e-4, abs=1e-6), key
        assert ray_metrics["tokens"] == local_metrics["tokens"]
        assert ray_metrics["rollouts"] == local_metrics["rollouts"] == 4

        # One sample for two ranks: the idle rank adds zero gradients and takes the same step.
        one = AdvantageBatch([Sample(full.samples[0].transition, 1.0, 1.0)], full.report)
        local.step(one)
        learner.step(one)
        assert_close(learner.trainable(1), params(local.model))

        # Rank 0's checkpoint is the single-rank one: a local learner resumes it...
        learner.save_checkpoint(tmp_path / "checkpoint", {"step": 2})
        resumed = PolicyTrainer(config)
        assert resumed.load_checkpoint(tmp_path / "checkpoint") == {"step": 2}
        assert_close(params(resumed.model), params(local.model))
        weights = learner.save_weights(tmp_path / "policies" / "v2", 2)
        assert weights.version == 2 and (weights.path / "adapter_config.json").exists()

        # ...and the ranks resume a local checkpoint, optimizer moments included: the next steps agree.
        local.save_checkpoint(tmp_path / "local-checkpoint", {"step": 2})
        learner.step(full)  # moves the ranks away from the checkpoint
        assert learner.load_checkpoint(tmp_path / "local-checkpoint") == {"step": 2}
        assert_close(learner.trainable(0), params(local.model))
        local.step(full)
        learner.step(full)
        assert_close(learner.trainable(1), params(local.model))
    finally:
        learner.close()


def test_fsdp_full_fine_tuning_with_tied_embeddings(
    config: TrainConfig, ray_cluster: Cluster, tmp_path: Path
) -> None:
    """Without LoRA every weight is sharded, the embedding and the head (one tied tensor) among them."""
    torch.set_num_threads(1)
    full_ft = TrainConfig(**{**config.__dict__, "lora": False})
    local = PolicyTrainer(full_ft)
    assert local.causal_lm.config.tie_word_embeddings
    learner = RayLearner(full_ft, ranks=2, sharding="fsdp")
    try:
        local.step(batch())
        learner.step(batch())
        assert_close(learner.trainable(1), params(local.model))
        weights = learner.save_weights(tmp_path / "v1", 1)
        served = PolicyTrainer(TrainConfig(**{**full_ft.__dict__, "model": str(weights.path)}))
        assert_close(params(served.model), params(local.model))
    finally:
        learner.close()


def test_token_means_are_weighted_by_each_ranks_trained_tokens() -> None:
    def rank(tokens: int, fraction: float) -> dict[str, Any]:
        zeros = {field.name: 0.0 for field in fields(StepMetrics)}
        return zeros | {
            "ref_kl": None,
            "tokens": tokens,
            "masked_fraction": fraction,
            "clip_fraction": fraction,
        }

    combined = _combine([rank(30, 0.0), rank(10, 0.4)], rollouts=2).to_dict()
    assert combined["masked_fraction"] == pytest.approx(0.1)
    assert combined["clip_fraction"] == pytest.approx(0.1)
    assert combined["tokens"] == 40
