"""Who takes part in a `PolicyTrainer`'s update: one process (`Solo`), or the ranks of a `torch.distributed`
group (`Ranks`), each holding part of the batch.

Every rank runs the same `PolicyTrainer.step` on its share and normalizes it by the whole batch's weight
(`batch_mass`), so the ranks' gradients add up to the single-rank one; the group only adds the
collectives around it: it pads micro-batch plans where every forward is a collective, sums gradients and
agrees on divergence, and shards and gathers the state. The learner built from Ray actors
(`tether.learner.ray_learner`) is `PolicyTrainer(config, group=Ranks(world, sharding))` on each rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
import torch.distributed as dist

from tether.algorithms.advantages import Sample
from tether.contracts import LEARNER_SHARDINGS
from tether.learner.config import TrainConfig
from tether.learner.errors import TrainingDiverged
from tether.learner.model import TokenScorer


class Member(Protocol):
    """What a group reads of the learner it takes part in (`PolicyTrainer`)."""

    @property
    def config(self) -> TrainConfig: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def params(self) -> list[torch.nn.Parameter]: ...

    @property
    def scorer(self) -> TokenScorer: ...

    @property
    def reference_scorer(self) -> TokenScorer | None: ...

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def step_count(self) -> int: ...

    def make_optimizer(self) -> None: ...


class LearnerGroup:
    """The collectives around one rank's update; these defaults, all the identity, are `Solo`'s."""

    world = 1

    def attach(self, trainer: Member) -> None:
        """The model and optimizer are built: make every rank start alike (and shard them)."""

    def begin_step(self, trainer: Member) -> None:
        pass

    def pad_plan(self, plan: list[list[int]]) -> list[list[int]]:
        """Micro-batches of sample indices; an empty one is a blank forward that trains nothing."""
        return plan

    def diverged(self, error: TrainingDiverged, logp: torch.Tensor) -> torch.Tensor:
        """A micro-batch's loss is not finite: raise, or return a zero loss and raise after the step's
        collectives (`reduce_gradients`)."""
        raise error

    def reduce_gradients(self, trainer: Member) -> None:
        """Before clipping: every rank holds the whole batch's gradient, or all raise together."""

    def step_failed(self, trainer: Member) -> None:
        """The step raised `TrainingDiverged` before `reduce_gradients`: tell the other ranks."""

    def whole(self, tensor: torch.Tensor) -> torch.Tensor:
        """An unsharded copy on the CPU."""
        return tensor.detach().cpu().clone()

    def servable_state(self, model: Any) -> dict[str, Any] | None:
        """The state dict `save_pretrained` writes (None: the model's own)."""
        return None

    def whole_optimizer_state(self, state: dict[str, Any]) -> dict[str, Any]:
        return state

    def like(self, value: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
        """A whole tensor of a checkpoint, laid out as `param` is."""
        return value

    def optimizer_loaded(self, optimizer: torch.optim.Optimizer) -> None:
        pass


class Solo(LearnerGroup):
    """One process holds the whole model and the whole batch."""


class Ranks(LearnerGroup):
    """This process is one rank of an initialized `torch.distributed` group of `world` ranks.

    `replicate`: every rank holds the whole model and optimizer; gradients are all-reduced (summed)
    before clipping. `fsdp`: FSDP2 (`tether.learner.sharding`), each rank holds 1/N of the parameters,
    gradients and optimizer state; every forward is a collective, so plans are padded to the longest
    rank's and a diverged micro-batch still runs its backward before the step fails on every rank.
    """

    def __init__(self, world: int, sharding: str = "replicate") -> None:
        if sharding not in LEARNER_SHARDINGS:
            raise ValueError(f"--learner-sharding must be one of {LEARNER_SHARDINGS}, not {sharding!r}")
        self.world, self.sharded = world, sharding == "fsdp"
        self._flag_sent = False
        self._divergence: TrainingDiverged | None = None
        self.device = torch.device("cpu")

    def attach(self, trainer: Member) -> None:
        from tether.learner import sharding

        self.device = trainer.device
        with torch.no_grad():  # every rank starts from rank 0's weights
            for p in trainer.params:
                dist.broadcast(p.data, src=0)
        if self.sharded:
            sharding.shard(trainer.scorer, self.world, trainer.device.type)
            if trainer.reference_scorer is not None:
                sharding.shard(trainer.reference_scorer, self.world, trainer.device.type)
            trainer.make_optimizer()  # over the sharded parameters

    def begin_step(self, trainer: Member) -> None:
        self._flag_sent, self._divergence = False, None
        rank = dist.get_rank()
        if rank > 0:  # rank 0's random state is the checkpoint's; the others' follow from the step, so a
            # resumed run draws the same dropout masks on every rank as an uninterrupted one
            torch.manual_seed(trainer.config.seed * 1_000_003 + trainer.step_count * 1_009 + rank)

    def pad_plan(self, plan: list[list[int]]) -> list[list[int]]:
        if not self.sharded:
            return plan
        longest = torch.tensor([len(plan)], device=self.device)
        dist.all_reduce(longest, op=dist.ReduceOp.MAX)  # every rank runs as many forwards
        return plan + [[] for _ in range(int(longest) - len(plan))]

    def diverged(self, error: TrainingDiverged, logp: torch.Tensor) -> torch.Tensor:
        if not self.sharded:
            raise error
        self._divergence = self._divergence or error
        return logp.sum() * 0.0  # the backward's collectives still run; the step fails after them

    def reduce_gradients(self, trainer: Member) -> None:
        self._send_flag(trainer, 1.0 if self._divergence else 0.0)
        if self.sharded:
            return  # FSDP2 reduce-scattered them in the backward
        for p in trainer.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)

    def step_failed(self, trainer: Member) -> None:
        if not self._flag_sent:
            self._send_flag(trainer, 1.0)

    def _send_flag(self, trainer: Member, value: float) -> None:
        """Every rank says whether its forward passes diverged: all fail together, none hangs."""
        flag = torch.tensor([value], device=trainer.device)
        dist.all_reduce(flag, op=dist.ReduceOp.SUM)
        self._flag_sent = True
        if float(flag) > 0:
            trainer.optimizer.zero_grad(set_to_none=True)
            if self._divergence is not None:
                raise self._divergence
            if value == 0:
                raise TrainingDiverged(
                    f"non-finite loss on another learner rank at step {trainer.step_count + 1}"
                )

    # The saved state: gathered on every rank in one order (rank 0 writes it), a single-rank checkpoint.

    def whole(self, tensor: torch.Tensor) -> torch.Tensor:
        from tether.learner import sharding

        return sharding.whole(tensor)

    def servable_state(self, model: Any) -> dict[str, Any] | None:
        return {n: self.whole(t) for n, t in model.state_dict().items()} if self.sharded else None

    def whole_optimizer_state(self, state: dict[str, Any]) -> dict[str, Any]:
        from tether.learner import sharding

        return sharding.whole_state(state) if self.sharded else state

    def like(self, value: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
        from tether.learner import sharding

        return sharding.like(value, param)

    def optimizer_loaded(self, optimizer: torch.optim.Optimizer) -> None:
        from tether.learner import sharding

        if self.sharded:
            sharding.shard_optimizer_state(optimizer)


def split_by_tokens(samples: Sequence[Sample], ranks: int) -> list[list[Sample]]:
    """Shares of about equal tokens: longest first, each to the rank with the fewest tokens so far. A
    group's samples stay on one rank, so that its prompt is computed once (`tether.learner.packing`),
    unless there are fewer groups than ranks."""
    units: dict[str | None, list[Sample]] = {}
    for sample in samples:
        units.setdefault(sample.transition.group_id, []).append(sample)
    parts = list(units.values()) if len(units) >= ranks else [[sample] for sample in samples]
    shares: list[list[Sample]] = [[] for _ in range(ranks)]
    loads = [0] * ranks
    for part in sorted(parts, key=_tokens, reverse=True):
        rank = loads.index(min(loads))
        shares[rank].extend(part)
        loads[rank] += _tokens(part)
    return shares


def _tokens(samples: Sequence[Sample]) -> int:
    return sum(len(s.transition.prompt_ids) + len(s.transition.response_ids) for s in samples)
