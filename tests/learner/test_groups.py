"""One `PolicyTrainer.step`, run by a `Solo` group and by the ranks of a real `torch.distributed` group (gloo,
one process per rank, no Ray), makes the same update as one plain trainer on the whole batch: each rank
steps on its share, normalized by the whole batch's weight, and the group's collectives do the rest."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.learner_rig import assert_close, batch, params
from tether.algorithms import AdvantageBatch, Sample
from tether.algorithms.advantages import batch_mass
from tether.learner import PolicyTrainer, TrainConfig
from tether.learner.groups import LearnerGroup, Ranks, Solo, split_by_tokens
from tether.models.catalog import TINY_RANDOM, resolve_model

# name: (ranks, sharding (None: Solo), whether the batch is one sample, leaving a rank idle)
GROUPS = {
    "solo": (1, None, False),
    "one rank": (1, "replicate", False),
    "two ranks, replicate": (2, "replicate", False),
    "two ranks, fsdp": (2, "fsdp", False),
    "two ranks, one idle": (2, "replicate", True),
    "two ranks, fsdp, one idle": (2, "fsdp", True),
}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> TrainConfig:
    path = resolve_model(TINY_RANDOM, tmp_path_factory.mktemp("models"))
    # adam_eps 1: the step is about lr * gradient, so the comparison sees the gradients themselves
    return TrainConfig(
        model=str(path), lr=1.0, adam_eps=1.0, grad_clip=0.0, bf16=False, micro_batch_tokens=64, seed=3
    )


def the_batch(one_sample: bool) -> AdvantageBatch:
    full = batch()
    if not one_sample:
        return full
    return AdvantageBatch([Sample(full.samples[0].transition, 1.0, 1.0)], full.report)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_rank(
    rank: int, world: int, sharding: str | None, config: TrainConfig, one_sample: bool, port: int, out: str
) -> None:
    """One process: join the group, step on this rank's share, write what it now holds."""
    torch.set_num_threads(1)
    group: LearnerGroup = Solo()
    if sharding is not None:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        group = Ranks(world, sharding)
    try:
        trainer = PolicyTrainer(config, group=group)
        whole = the_batch(one_sample)
        share = split_by_tokens(whole.samples, world)[rank]
        metrics = trainer.step(replace(whole, samples=share), batch_mass(whole.samples, config.loss_agg))
        result: dict[str, Any] = {"params": trainer.trainable(), "metrics": metrics.to_dict()}
        torch.save(result, Path(out) / f"rank{rank}.pt")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.parametrize("name", list(GROUPS))
def test_a_group_makes_the_update_of_one_trainer(config: TrainConfig, tmp_path: Path, name: str) -> None:
    world, sharding, one_sample = GROUPS[name]
    plain = PolicyTrainer(config)
    before = params(plain.model)
    expected = plain.step(the_batch(one_sample)).to_dict()
    after = params(plain.model)
    assert not all(torch.equal(before[n], after[n]) for n in before)  # the step moved the weights

    mp.spawn(run_rank, args=(world, sharding, config, one_sample, free_port(), str(tmp_path)), nprocs=world)

    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(world)]
    for result in results:  # every rank holds the whole updated model
        assert_close(result["params"], after)
    rank_metrics = [r["metrics"] for r in results]
    assert sum(m["tokens"] for m in rank_metrics) == expected["tokens"]
    assert sum(m["loss"] for m in rank_metrics) == pytest.approx(expected["loss"], rel=1e-4, abs=1e-6)
    for m in rank_metrics:  # the norm of the summed gradient, the same on every rank
        assert m["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-4)
    if one_sample:
        assert [m["samples"] for m in rank_metrics] == [1, 0]


def test_a_solo_trainer_refuses_an_empty_batch(config: TrainConfig) -> None:
    with pytest.raises(ValueError, match="nothing to train"):
        PolicyTrainer(config).step(AdvantageBatch([], batch().report))


def test_split_keeps_every_sample_once_and_balances_tokens() -> None:
    samples = batch().samples
    shares = split_by_tokens(samples, 2)
    assert sorted(id(s) for share in shares for s in share) == sorted(id(s) for s in samples)
    loads = [sum(len(s.transition.prompt_ids) + len(s.transition.response_ids) for s in sh) for sh in shares]
    longest = max(len(s.transition.prompt_ids) + len(s.transition.response_ids) for s in samples)
    assert abs(loads[0] - loads[1]) <= longest
