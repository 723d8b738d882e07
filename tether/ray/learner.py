"""The learner of N ranks: Ray actors forming one `torch.distributed` group (gloo on CPU, NCCL on GPU).

Data parallel: every rank holds the whole model (a `PolicyTrainer`) and the same optimizer state. A
batch is split across ranks by token budget (longest samples first, each to the rank with the fewest
tokens so far). The single-rank loss is sum_s w_s * mean_t loss_t / W over all samples (W: the total
weight, see `tether.trainer.policy`); a rank computes the same sum over its own samples but divides by
its own total weight W_r, so before the gradients are summed across ranks each rank scales its own by
W_r / W. The summed gradient, its global norm (clipping) and so the optimizer step are then exactly those
of one rank on the whole batch, up to float error, on every rank alike.

Rank 0 writes versions and checkpoints; a checkpoint is the single-rank one, so `--resume` works with any
number of ranks (or with the local learner). A rank that dies fails the step with an error naming the
rank and its node. Models too large for one device (FSDP2 sharding) are not handled yet.
"""

from __future__ import annotations

import math
import os
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from tether.adapters.transitions import Transition
from tether.algorithms.advantages import AdvantageBatch, Sample
from tether.policy_server.base import PolicyWeights
from tether.ray.cluster import Placement, RayCluster, placement_of, where_am_i
from tether.ray.transfer import Folder, FolderSender, pack, unpack
from tether.trainer.config import TrainConfig

SUMMED = ("loss", "policy_loss", "kl_loss")  # already weighted by W_r / W: they add up
TOKEN_MEANS = ("mean_ratio", "clip_fraction", "truncated_fraction", "approx_kl", "entropy", "nll")
COUNTS = ("tokens", "forward_tokens", "padded_tokens", "samples", "micro_batches")


class LearnerRankLost(RuntimeError):
    """A rank died during a step; the message names the rank and its node."""


def trained(sample: Sample) -> bool:
    """The samples `PolicyTrainer.step` trains on (the same filter)."""
    return sample.transition.trained_tokens > 0 and sample.weight != 0


def split_by_tokens(samples: Sequence[Sample], ranks: int) -> list[list[Sample]]:
    """Shares of about equal tokens: longest first, each to the rank with the fewest tokens so far."""
    shares: list[list[Sample]] = [[] for _ in range(ranks)]
    loads = [0] * ranks
    order = sorted(samples, key=lambda s: len(s.transition.prompt_ids) + len(s.transition.response_ids))
    for sample in reversed(order):
        rank = loads.index(min(loads))
        shares[rank].append(sample)
        loads[rank] += len(sample.transition.prompt_ids) + len(sample.transition.response_ids)
    return shares


def _make_rank_trainer(config: TrainConfig) -> Any:
    """A `PolicyTrainer` whose gradients are summed across the process group before clipping."""
    import torch
    import torch.distributed as dist

    from tether.trainer.learner import TrainingDiverged
    from tether.trainer.policy import PolicyTrainer, StepMetrics, peak_rss_mb

    class RankTrainer(PolicyTrainer):
        scale = 1.0
        _flag_sent = False

        def _clip_gradients(self) -> float:
            self._send_flag(0.0)
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad.mul_(self.scale)
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            return super()._clip_gradients()

        def _send_flag(self, value: float) -> None:
            """Every rank says whether its forward passes diverged: all fail together, none hangs."""
            flag = torch.tensor([value], device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.SUM)
            self._flag_sent = True
            if float(flag) > 0 and value == 0:
                self.optimizer.zero_grad(set_to_none=True)
                raise TrainingDiverged(
                    f"non-finite loss on another learner rank at step {self.step_count + 1}"
                )

        def rank_step(self, batch: AdvantageBatch, scale: float) -> StepMetrics:
            self.scale, self._flag_sent = scale, False
            try:
                if batch.samples:
                    return self.step(batch)
                return self._idle_step()
            except TrainingDiverged:
                if not self._flag_sent:
                    self._send_flag(1.0)
                raise

        def _idle_step(self) -> StepMetrics:
            """No samples here: add zero gradients to the sum, take the same optimizer step."""
            self.optimizer.zero_grad(set_to_none=True)
            grad_norm = self._clip_gradients()
            lr = float(self.scheduler.get_last_lr()[0])
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step_count += 1
            names = set(SUMMED + TOKEN_MEANS + COUNTS)
            zero = {f.name: 0 for f in fields(StepMetrics) if f.name in names}
            return StepMetrics(
                step=self.step_count,
                **zero,
                ref_kl=None,
                rollouts=0,
                grad_norm=grad_norm,
                lr=lr,
                seconds=0.0,
                tokens_per_s=0.0,
                peak_rss_mb=peak_rss_mb(),
            )

    return RankTrainer(config)


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

    def setup(self, config: TrainConfig, init_method: str, threads: int | None) -> int:
        import torch
        import torch.distributed as dist

        if threads:
            torch.set_num_threads(threads)
        cuda = torch.cuda.is_available()
        backend = "nccl" if cuda else "gloo"
        device = "cuda" if cuda else "cpu"
        dist.init_process_group(backend, init_method=init_method, rank=self.rank, world_size=self.world)
        self.trainer = _make_rank_trainer(replace(config, device=config.device or device))
        with torch.no_grad():  # every rank starts from rank 0's weights
            for p in self.trainer.params:
                dist.broadcast(p.data, src=0)
        return int(self.trainer.trainable_parameters)

    def step(self, batch: AdvantageBatch, scale: float) -> dict[str, Any]:
        metrics = self.trainer.rank_step(batch, scale)
        return dict(metrics.to_dict())

    def trainable(self) -> dict[str, Any]:
        return {
            n: p.detach().cpu().clone() for n, p in self.trainer.model.named_parameters() if p.requires_grad
        }

    def can_read(self, path: str, token: str) -> bool:
        from tether.ray.transfer import can_read

        return can_read(path, token)

    def save_weights(self, directory: str, version: int, shared: bool) -> PolicyWeights | dict[str, bytes]:
        if shared:
            return self.trainer.save_weights(Path(directory), version)
        with tempfile.TemporaryDirectory(prefix="tether-weights-") as tmp:
            self.trainer.save_weights(Path(tmp) / "w", version)
            return pack(Path(tmp) / "w")

    def save_checkpoint(
        self, directory: str, extra: dict[str, Any] | None, shared: bool
    ) -> dict[str, bytes] | None:
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
    """A `Learner` (`tether.trainer.learner`) of `ranks` Ray actors."""

    def __init__(self, config: TrainConfig, ranks: int, cluster: RayCluster | None = None) -> None:
        import ray

        if ranks < 1:
            raise ValueError("--learner-ranks must be at least 1")
        self.config = config
        gpus = 1.0 if cluster is not None and cluster.total("GPU") >= ranks else 0.0
        cpus = 0.0 if gpus else 1.0
        actor: Any = ray.remote(LearnerRank)
        self.ranks = [
            actor.options(num_cpus=cpus, num_gpus=gpus, max_restarts=0).remote(r, ranks, cpus, gpus)
            for r in range(ranks)
        ]
        self.sender = FolderSender("checkpoints")
        threads = max(1, (os.cpu_count() or 1) // ranks) if not gpus else None
        meeting = ray.get(self.ranks[0].rendezvous.remote())
        self._call_all("setup", lambda _: (config, meeting, threads))
        self.wheres = ray.get([r.placement.remote() for r in self.ranks])

    def placements(self) -> list[Placement]:
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
        total = math.fsum(s.weight for s in samples)
        scales = [math.fsum(s.weight for s in share) / total for share in shares]
        results = self._call_all("step", lambda i: (replace(batch, samples=shares[i]), scales[i]))
        return _combine(results, scales, len({s.rollout_id for s in samples}))

    def save_weights(self, directory: Path, version: int) -> PolicyWeights:
        shared = self.sender.shares(self.ranks[0], directory.parent)
        result = self._get([self.ranks[0].save_weights.remote(str(directory), version, shared)])[0]
        if isinstance(result, PolicyWeights):
            return result
        _replace_folder(directory, result)
        return PolicyWeights(path=directory, kind="lora" if self.config.lora else "full", version=version)

    def save_checkpoint(self, directory: Path, extra: dict[str, Any] | None = None) -> Path:
        shared = self.sender.shares(self.ranks[0], directory.parent)
        files = self._get([self.ranks[0].save_checkpoint.remote(str(directory), extra, shared)])[0]
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
        return list(self._get([self.ranks[0].logprobs.remote(list(samples))])[0])

    def trainable(self, rank: int = 0) -> dict[str, Any]:
        return dict(self._get([self.ranks[rank].trainable.remote()])[0])

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


class CombinedMetrics:
    """One step's metrics across ranks, as `StepMetrics.to_dict` gives them for one rank."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def to_dict(self) -> dict[str, Any]:
        return dict(self.values)


def _combine(results: list[dict[str, Any]], scales: list[float], rollouts: int) -> CombinedMetrics:
    first = results[0]
    tokens = sum(r["tokens"] for r in results)
    combined = dict(first)
    for key in SUMMED:  # each rank's share was normalized by its own weight: rescaled as its gradient was
        combined[key] = sum(r[key] * scale for r, scale in zip(results, scales, strict=True))
    for key in COUNTS:
        combined[key] = sum(r[key] for r in results)
    for key in TOKEN_MEANS:
        if key in first:
            combined[key] = sum(r[key] * r["tokens"] for r in results) / tokens if tokens else 0.0
    if first.get("ref_kl") is not None:
        combined["ref_kl"] = (
            sum((r["ref_kl"] or 0.0) * r["tokens"] for r in results) / tokens if tokens else 0.0
        )
    combined["rollouts"] = rollouts
    combined["seconds"] = max(r["seconds"] for r in results)
    combined["tokens_per_s"] = (
        combined["forward_tokens"] / combined["seconds"] if combined["seconds"] else 0.0
    )
    combined["peak_rss_mb"] = max(r["peak_rss_mb"] for r in results)
    combined["ranks"] = len(results)
    return CombinedMetrics(combined)


def open_ray_learner(config: TrainConfig) -> RayLearner:
    """The registry's `ray` learner: `--learner-ranks` ranks on the cluster `--ray` joined, its
    placement printed."""
    from rich.console import Console

    from tether.ray.cluster import current, placement_table

    cluster = current()
    learner = RayLearner(config, cluster.settings.learner_ranks, cluster)
    console = Console(stderr=True)
    for line in placement_table(learner.placements()):
        console.print(f"  {line}")
    return learner
