"""The learner of N ranks: Ray actors forming one `torch.distributed` group (gloo on CPU, NCCL on GPU), each
running `PolicyTrainer(config, group=Ranks(world, sharding))` (`tether.learner.groups`) on its share.

A batch is split across ranks by tokens (`split_by_tokens`). The single-rank loss is sum_s w_s * mean_t
loss_t / W over all samples (W: the total weight, see `tether.learner.policy`); a rank computes the same
sum over its own samples, also divided by the whole batch's W, so the ranks' gradients add up to the
single-rank one. The summed gradient, its global norm (clipping) and so the optimizer step are then
exactly those of one rank on the whole batch, up to float error, on every rank alike.

The two shardings (`--learner-sharding`: `replicate`, data parallel, the default; `fsdp` for models that
do not fit on one device) are described at `Ranks`.

Rank 0 writes versions and checkpoints; a checkpoint is the single-rank one, so `--resume` works with any
number of ranks, either sharding, or the local learner. A rank that dies fails the step with an error
naming the rank and its node (`LearnerRankLost`).
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tether.adapters.transitions import Transition
from tether.algorithms.advantages import AdvantageBatch, Sample, batch_mass
from tether.contracts import LEARNER_SHARDINGS
from tether.learner.config import TrainConfig
from tether.learner.errors import LearnerLost
from tether.learner.groups import split_by_tokens
from tether.policy_server.base import PolicyWeights
from tether.ray.cluster import ActorPlacement, RayCluster, placement_of, where_am_i
from tether.ray.transfer import Folder, FolderSender, pack, unpack

SUMMED = ("loss", "policy_loss", "kl_loss")  # each rank normalizes by the whole W: they add up
TOKEN_MEANS = (
    "mean_ratio",
    "clip_fraction",
    "truncated_fraction",
    "approx_kl",
    "entropy",
    "nll",
    "masked_fraction",
)
COUNTS = ("tokens", "forward_tokens", "sample_tokens", "padded_tokens", "samples", "micro_batches")


class LearnerRankLost(LearnerLost):
    """A rank died during a step; the message names the rank and its node."""


def trained(sample: Sample) -> bool:
    """The samples `PolicyTrainer.step` trains on (the same filter)."""
    return sample.transition.trained_tokens > 0 and sample.weight != 0


class LearnerRank:
    """One rank (wrapped by `ray.remote` in `RayLearner`)."""

    def __init__(self, rank: int, world: int, cpus: float, gpus: float) -> None:
        self.rank, self.world = rank, world
        self.where = where_am_i(cpus, gpus)
        self.trainer: Any = None

    def placement(self) -> dict[str, Any]:
        return self.where

    def rendezvous(self) -> str:
        """Rank 0: the address the group meets at (this node, a free port)."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return f"tcp://{self.where['node_ip']}:{port}"

    def setup(self, config: TrainConfig, init_method: str, threads: int | None, sharding: str) -> int:
        import torch
        import torch.distributed as dist

        if threads:
            torch.set_num_threads(threads)
        cuda = torch.cuda.is_available()
        backend = "nccl" if cuda else "gloo"
        device = "cuda" if cuda else "cpu"
        dist.init_process_group(backend, init_method=init_method, rank=self.rank, world_size=self.world)
        from tether.learner.groups import Ranks
        from tether.learner.policy import PolicyTrainer

        config = replace(config, device=config.device or device)
        self.trainer = PolicyTrainer(config, group=Ranks(self.world, sharding))
        return int(self.trainer.trainable_parameters)

    def step(self, batch: AdvantageBatch, total_weight: float) -> dict[str, Any]:
        return dict(self.trainer.step(batch, total_weight).to_dict())

    def trainable(self) -> dict[str, Any]:
        return dict(self.trainer.trainable())

    def held(self) -> tuple[int, int]:
        """(parameter elements this rank holds, elements of the whole model): equal unless sharded."""
        from torch.distributed.tensor import DTensor

        ps = list(self.trainer.model.parameters())
        local = sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in ps)
        return local, sum(p.numel() for p in ps)

    def can_read(self, path: str, token: str) -> bool:
        from tether.ray.transfer import can_read

        return can_read(path, token)

    def save_weights(
        self, directory: str, version: int, shared: bool
    ) -> PolicyWeights | dict[str, bytes] | None:
        if self.rank != 0:  # sharded: rank 0 writes what every rank gathers
            self.trainer.servable_state()
            return None
        if shared:
            return self.trainer.save_weights(Path(directory), version)
        with tempfile.TemporaryDirectory(prefix="tether-weights-") as tmp:
            self.trainer.save_weights(Path(tmp) / "w", version)
            return pack(Path(tmp) / "w")

    def save_checkpoint(
        self, directory: str, extra: dict[str, Any] | None, shared: bool
    ) -> dict[str, bytes] | None:
        if self.rank != 0:  # the gathers of `save_checkpoint`, nothing written
            self.trainer.checkpoint_state()
            if self.trainer.config.lora:
                self.trainer.servable_state()
            return None
        if shared:
            self.trainer.save_checkpoint(directory, extra)
            return None
        with tempfile.TemporaryDirectory(prefix="tether-checkpoint-") as tmp:
            self.trainer.save_checkpoint(Path(tmp) / "c", extra)
            return pack(Path(tmp) / "c")

    def load_checkpoint(self, folder: Folder) -> dict[str, Any]:
        return dict(self.trainer.load_checkpoint(folder.materialize()))

    def logprobs(self, samples: Sequence[Sample | Transition]) -> list[list[float]]:
        return list(self.trainer.logprobs(samples))

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class RayLearner:
    """A `Learner` (`tether.learner.base`) of `ranks` Ray actors."""

    def __init__(
        self, config: TrainConfig, ranks: int, cluster: RayCluster | None = None, sharding: str = "replicate"
    ) -> None:
        import ray

        if ranks < 1:
            raise ValueError("--learner-ranks must be at least 1")
        if sharding not in LEARNER_SHARDINGS:
            raise ValueError(f"--learner-sharding must be one of {LEARNER_SHARDINGS}, not {sharding!r}")
        if config.ppo_epochs > 1 or config.mini_batches > 1:
            # Each optimizer step of a mini-batch would need its whole mini-batch's mass on every rank.
            raise ValueError(
                "--ppo-epochs and --mini-batches above 1 run on the local learner only; with "
                "--learner-ranks > 1 each batch is one optimizer step"
            )
        self.config, self.sharded = config, sharding == "fsdp"
        gpus = 1.0 if cluster is not None and cluster.total("GPU") >= ranks else 0.0
        cpus = 0.0 if gpus else 1.0
        actor: Any = ray.remote(LearnerRank)
        self.ranks = [
            actor.options(num_cpus=cpus, num_gpus=gpus, max_restarts=0).remote(r, ranks, cpus, gpus)
            for r in range(ranks)
        ]
        self.sender = FolderSender("checkpoints", cluster.settings.weights_transfer if cluster else "auto")
        threads = max(1, (os.cpu_count() or 1) // ranks) if not gpus else None
        self.wheres = ray.get([r.placement.remote() for r in self.ranks])
        meeting = ray.get(self.ranks[0].rendezvous.remote())
        self._call_all("setup", lambda _: (config, meeting, threads, sharding))

    def held(self) -> list[tuple[int, int]]:
        return list(self._get([r.held.remote() for r in self.ranks]))

    def placements(self) -> list[ActorPlacement]:
        return [placement_of(f"learner rank {i}", w) for i, w in enumerate(self.wheres)]

    def _get(self, refs: list[Any]) -> list[Any]:
        import ray

        try:
            return list(ray.get(refs))
        except ray.exceptions.RayActorError as exc:
            rank = next((i for i, ref in enumerate(refs) if _failed(ref)), None)
            where = self.wheres[rank] if rank is not None and hasattr(self, "wheres") else None
            node = f" on node {where['node_ip']} ({where['node_id'][:8]})" if where else ""
            raise LearnerRankLost(
                f"learner rank {rank if rank is not None else '?'}{node} died: "
                f"{str(exc).splitlines()[0]}. `--resume` continues from the last checkpoint"
            ) from None
        except ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None

    def _call_all(self, method: str, args_of: Any) -> list[Any]:
        return self._get([getattr(r, method).remote(*args_of(i)) for i, r in enumerate(self.ranks)])

    def step(self, batch: AdvantageBatch) -> Any:
        samples = [s for s in batch.samples if trained(s)]
        if not samples:
            raise ValueError("nothing to train: no sample has a trained token and a non-zero weight")
        shares = split_by_tokens(samples, len(self.ranks))
        total = batch_mass(samples, self.config.loss_agg)
        results = self._call_all("step", lambda i: (replace(batch, samples=shares[i]), total))
        return _combine(results, len({s.rollout_id for s in samples}))

    def _writers(self) -> list[Any]:
        """The ranks that take part in a save or a forward: all of them when sharded, else rank 0."""
        return self.ranks if self.sharded else self.ranks[:1]

    def save_weights(self, directory: Path, version: int) -> PolicyWeights:
        shared = self.sender.shares(self.ranks[0], directory.parent)
        refs = [r.save_weights.remote(str(directory), version, shared) for r in self._writers()]
        result = self._get(refs)[0]
        if isinstance(result, PolicyWeights):
            return result
        _replace_folder(directory, result)
        return PolicyWeights(path=directory, kind="lora" if self.config.lora else "full", version=version)

    def save_checkpoint(self, directory: Path, extra: dict[str, Any] | None = None) -> Path:
        shared = self.sender.shares(self.ranks[0], directory.parent)
        refs = [r.save_checkpoint.remote(str(directory), extra, shared) for r in self._writers()]
        files = self._get(refs)[0]
        if files is not None:
            _replace_folder(directory, files)
        return directory

    def load_checkpoint(self, directory: Path) -> dict[str, Any]:
        import ray

        folders = [self.sender.folder_for(r, directory) for r in self.ranks]
        refs = [
            r.load_checkpoint.remote(ray.put(f) if f.streamed else f)
            for r, f in zip(self.ranks, folders, strict=True)
        ]
        return dict(self._get(refs)[0])

    def logprobs(self, samples: Sequence[Sample | Transition]) -> list[list[float]]:
        return list(self._get([r.logprobs.remote(list(samples)) for r in self._writers()])[0])

    def trainable(self, rank: int = 0) -> dict[str, Any]:
        """Rank `rank`'s trainable parameters, whole (sharded: every rank gathers them)."""
        ranks = self.ranks if self.sharded else [self.ranks[rank]]
        return dict(self._get([r.trainable.remote() for r in ranks])[rank if self.sharded else 0])

    def close(self) -> None:
        import ray

        for rank in self.ranks:
            ray.kill(rank)


def _failed(ref: Any) -> bool:
    import ray

    ready, _ = ray.wait([ref], timeout=0)
    if not ready:
        return False
    try:
        ray.get(ready[0])
    except ray.exceptions.RayActorError:
        return True
    except Exception:
        return False
    return False


def _replace_folder(directory: Path, files: dict[str, bytes]) -> None:
    import shutil

    tmp = directory.parent / f".{directory.name}.streamed"
    shutil.rmtree(tmp, ignore_errors=True)
    unpack(files, tmp)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(tmp, directory)


@dataclass
class CombinedMetrics:
    """One step's metrics across ranks, as `StepMetrics.to_dict` gives them for one rank."""

    values: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.values)


def _combine(results: list[dict[str, Any]], rollouts: int) -> CombinedMetrics:
    first = results[0]
    tokens = sum(r["tokens"] for r in results)
    combined = dict(first)
    for key in SUMMED + COUNTS:  # each rank's losses are normalized by the whole batch's weight: they add up
        combined[key] = sum(r[key] for r in results)
    for key in TOKEN_MEANS if first.get("ref_kl") is None else (*TOKEN_MEANS, "ref_kl"):
        combined[key] = sum((r[key] or 0.0) * r["tokens"] for r in results) / tokens if tokens else 0.0
    combined["rollouts"] = rollouts
    combined["seconds"] = max(r["seconds"] for r in results)
    combined["tokens_per_s"] = (
        combined["forward_tokens"] / combined["seconds"] if combined["seconds"] else 0.0
    )
    combined["peak_rss_mb"] = max(r["peak_rss_mb"] for r in results)
    combined["ranks"] = len(results)
    return CombinedMetrics(combined)
