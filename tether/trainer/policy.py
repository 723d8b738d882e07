"""The policy update: clipped, importance-corrected policy-gradient steps over a batch of samples.

For every trained response token t of a sample with advantage A (see `policy_loss`):

    logp     = log pi_theta(token)            the trainer's current logprob, with gradient, under the
                                              distribution the token was drawn from: logits / temperature,
                                              top-k and top-p as the sample's `Sampler` says (`tether.
                                              engines.sampling`, the engine's own definition)
    old      = log pi_old(token)              the trainer's logprob when the update begins; with one
                                              optimizer step per batch (the default) that is the same
                                              forward pass, detached
    rec      = response_logprobs[t]           recorded by the engine that sampled the token (behaviour mu,
                                              under the same processed distribution)
    ratio    = exp(logp - rec)                pi_theta / mu: engine mismatch and staleness together
    is_w     = min(exp(old - rec), tis_cap)   truncated importance weight (detached)
    loss_t   = -min(is_w * exp(logp - old) * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)
             + kl_coef * k3_t,  k3_t = exp(ref - logp) - (ref - logp) - 1

`is_w * exp(logp - old)` has the value min(ratio, tis_cap) and the gradient min(ratio, tis_cap) * grad logp:
below the cap it is exactly the ratio of the PPO surrogate. Above it the unclipped branch stops growing,
which only matters for negative advantages (for positive ones 1 + clip_high < tis_cap binds first), so
one token the engine sampled far more confidently than the trainer would cannot dominate the batch
(the same bound as dual-clip PPO with c = tis_cap). With `tis_mode="mask"` a token whose exp(old - rec)
leaves [1 / tis_cap, tis_cap] is dropped instead. The trust region is measured against the behaviour
policy: a stale or mismatched token whose ratio left [1 - clip_low, 1 + clip_high] in the direction its
advantage pushes contributes no gradient, which is also what bounds `ppo_epochs` > 1.

Because the engine records each token's logprob under the distribution it sampled from and the learner
scores the same distribution, the ratio at the start of an update is 1 up to numerics at any
temperature. The nucleus is recomputed from the learner's own logits (the same set as the engine's when
the weights are the same), with the sampled token always kept: a token that crossed the nucleus
boundary during the update keeps a finite ratio, which the clip then bounds.

Aggregation (`loss_agg`): "rollout" averages token losses within each sample and combines samples with
their `weight` (a transition's share of its rollout's trained tokens): loss = sum_s w_s * mean_t loss_t /
sum_s w_s, i.e. every rollout counts once, whatever its number of calls and tokens. "token" takes one
mean over every trained token of the batch (longer rollouts count more, as in DAPO).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import random
import shutil
import sys
import time
import uuid
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tether.engines.openmp import prefer_passive_waiting

prefer_passive_waiting()

import torch
from torch.distributed.tensor import DTensor

from tether.adapters.transitions import Transition
from tether.algorithms.advantages import (
    IMITATION,
    AdvantageBatch,
    Sample,
    batch_mass,
    refuse_demonstrations,
    refuse_unreproducible_sampling,
    sample_mass,
)
from tether.engines.sampling import processed_logprobs
from tether.models.catalog import resolve_model
from tether.policy_server.base import PolicyWeights
from tether.sampling import Sampler
from tether.trainer.batches import MicroBatch, collate, collate_packed, plan_micro_batches, plan_packed
from tether.trainer.config import TrainConfig
from tether.trainer.groups import LearnerGroup, Solo
from tether.trainer.learner import TrainingDiverged

log = logging.getLogger(__name__)

CHECKPOINT_STATE = "state.pt"
CHECKPOINT_EXTRA = "extra.json"
CHECKPOINT_POLICY = "policy"


@dataclass
class StepMetrics:
    step: int  # optimizer steps taken so far, this one included
    loss: float  # the objective that was differentiated (policy + KL)
    policy_loss: float
    kl_loss: float  # kl_coef * KL to the reference
    mean_ratio: float  # token mean of pi_theta / mu
    clip_fraction: float  # trained tokens whose gradient the clip removed
    truncated_fraction: float  # trained tokens with pi_theta / mu above tis_cap
    approx_kl: float  # k3 estimate of KL(mu || pi_theta), behaviour to current
    ref_kl: float | None  # k3 estimate of KL(pi_theta || reference), only with kl_coef > 0
    entropy: float  # mean entropy (nats) of the current policy at trained tokens
    tokens: int  # trained (loss-masked) tokens
    forward_tokens: int  # tokens run through the model, padding excluded (a shared prefix counts once)
    sample_tokens: int  # the samples' prompt + response tokens: what the update runs without shared prefixes
    padded_tokens: int  # rows x width summed over micro-batches
    samples: int
    rollouts: int
    micro_batches: int
    grad_norm: float  # before clipping
    lr: float
    seconds: float
    tokens_per_s: float  # forward_tokens / seconds
    peak_rss_mb: float  # the process's peak resident memory so far
    nll: float = 0.0  # mean negative logprob of the trained tokens before this update (SFT's loss)
    masked_fraction: float = 0.0  # trained tokens dropped by tis_mode "mask" (ratio outside the band)
    optimizer_steps: int = 1  # ppo_epochs x mini-batches

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Totals:
    """Running sums over the trained tokens of one step."""

    loss: float = 0.0
    policy_loss: float = 0.0
    kl_loss: float = 0.0
    tokens: int = 0
    ratio: float = 0.0
    clipped: float = 0.0
    truncated: float = 0.0
    approx_kl: float = 0.0
    ref_kl: float = 0.0
    entropy: float = 0.0
    nll: float = 0.0
    masked: float = 0.0
    padded: int = 0
    forward: int = 0  # real tokens run through the model
    micro_batches: int = 0

    def mean(self, total: float) -> float:
        return total / self.tokens if self.tokens else 0.0


def policy_loss(
    logp: torch.Tensor,
    behaviour: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    tis_cap: float | None,
    old: torch.Tensor | None = None,
    tis_mode: str = "truncate",
    tis_level: str = "token",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token clipped surrogate loss (see the module docstring) and per-token diagnostics.

    `old` is the policy's logprob at the start of the update (default: `logp` detached, the same thing
    when the update is one optimizer step). Positions outside `mask` get it as behaviour, so whatever
    was recorded there (0.0 for observation tokens, or garbage) cannot produce inf or NaN, nor any
    gradient. `tis_mode` "mask" drops tokens whose weight old / behaviour leaves [1 / tis_cap, tis_cap]
    (stats["masked"]) instead of truncating it. `tis_level` "sequence" and "geometric" give every token of
    a row (one sample) its sequence's weight: the product of its tokens' weights, or their geometric mean.
    """
    old = logp.detach() if old is None else torch.where(mask, old, logp.detach())
    behaviour = torch.where(mask, behaviour, old)
    log_ratio = logp - behaviour
    ratio = torch.exp(log_ratio)
    clipped_ratio = ratio.clamp(1 - clip_low, 1 + clip_high)
    unclipped_ratio = ratio
    outside = torch.zeros_like(mask)
    if tis_cap is not None:
        weight = torch.exp(_level_log_weights(old - behaviour, mask, tis_level))
        if tis_mode == "mask":
            outside = (weight > tis_cap) | (weight < 1 / tis_cap)
            weight = torch.where(outside, 1.0, weight)
        is_weight = weight.clamp(max=tis_cap)
        unclipped_ratio = is_weight * torch.exp(logp - old)
    loss = -torch.minimum(unclipped_ratio * advantages, clipped_ratio * advantages)
    loss = torch.where(outside, 0.0, loss)
    with torch.no_grad():
        r = ratio.detach()
        clipped = ((advantages > 0) & (r > 1 + clip_high)) | ((advantages < 0) & (r < 1 - clip_low))
        if tis_cap is None:
            truncated = torch.zeros_like(mask)
        else:  # a token's own ratio, or its sequence's weight
            truncated = ((r if tis_level == "token" else weight) > tis_cap) & ~outside
        stats = {
            "masked": outside.float(),
            "ratio": r,
            "clipped": clipped.float(),
            "truncated": truncated.float(),
            "approx_kl": (r - 1) - log_ratio.detach(),
        }
    return loss, stats


def _level_log_weights(log_weights: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """Each token's log importance weight at `level`: its own, or its row's sum (sequence) or mean
    (geometric) over the trained tokens."""
    if level == "token":
        return log_weights
    total = torch.where(mask, log_weights, 0.0).sum(dim=-1, keepdim=True)
    if level == "geometric":
        total = total / mask.sum(dim=-1, keepdim=True).clamp(min=1)
    return total.expand_as(log_weights)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi_theta || ref) for tokens sampled from pi_theta (unbiased, >= 0)."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


class TokenScorer(torch.nn.Module):
    """The logits [B, K, V] (fp32) that predict the last K tokens of each row, or with `valid` [B, K] only
    those [N, V] of its N true entries (the head skips the padding): decoder, then head.

    One module, so that a sharded learner (`tether.trainer.sharding`) can gather the embedding, final norm
    and head (tied in small models) around a single forward.
    """

    def __init__(self, causal_lm: Any, bf16: bool) -> None:
        super().__init__()
        self.causal_lm = causal_lm
        self.bf16 = bf16

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        k: int,
        gather: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
    ) -> torch.Tensor:
        with torch.autocast(input_ids.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            hidden = self.causal_lm.get_decoder()(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=False,
            ).last_hidden_state
        if gather is not None:  # packed rows: the columns that predict each sample's K tokens
            hidden = hidden.reshape(-1, hidden.shape[-1])[gather]
        else:  # padded rows: column j predicts token j + 1, so the K columns before the last
            hidden = hidden[:, -k - 1 : -1]
        if valid is not None:
            hidden = hidden[valid]
        # The head runs in fp32: bf16 keeps 8 mantissa bits, so a logit near 20 would move by up to 0.06.
        logits: torch.Tensor = self.causal_lm.get_output_embeddings()(hidden.float())
        return logits


class PolicyTrainer:
    """The learner of one process, or one rank of several (`group`, `tether.trainer.groups`)."""

    def __init__(self, config: TrainConfig, group: LearnerGroup | None = None) -> None:
        from transformers import AutoModelForCausalLM

        self.config = config
        self.group: LearnerGroup = group or Solo()
        self.device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.bf16 = config.bf16 if config.bf16 is not None else bf16_by_default(self.device)
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        cache = Path(config.cache_dir) if config.cache_dir else None
        self.model_path = resolve_model(config.model, cache)
        base = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
        # transformers wraps `to` with functools.wraps, whose stub type does not bind `self`.
        base = base.to(self.device)  # type: ignore[arg-type]
        self.max_seq_len = min(
            config.max_seq_len, int(getattr(base.config, "max_position_embeddings", 0) or 2**31)
        )
        pad = base.config.pad_token_id if base.config.pad_token_id is not None else base.config.eos_token_id
        self.pad_id = int(pad if isinstance(pad, int) else 0)
        self.reference_scorer: TokenScorer | None = None
        if config.lora:
            self.model = _wrap_lora(base, config)
            self.causal_lm = self.model.get_base_model()
        else:
            self.model = self.causal_lm = base
            if config.kl_coef > 0:
                reference = copy.deepcopy(base).eval().requires_grad_(False)
                self.reference_scorer = TokenScorer(reference, self.bf16)
        self.scorer = TokenScorer(self.causal_lm, self.bf16)
        self._make_optimizer()
        self.step_count = 0
        self.group.attach(self)
        log.info(
            "policy trainer on %s: %s, %d trainable parameters, bf16 autocast %s",
            self.model_path.name,
            "LoRA" if config.lora else "full fine-tuning",
            self.trainable_parameters,
            "on" if self.bf16 else "off",
        )

    def _make_optimizer(self) -> None:
        """The optimizer and schedule over the model's trainable parameters as they are now (a sharded
        learner calls it again once its parameters are sharded)."""
        config = self.config
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params,
            lr=config.learning_rate,
            betas=config.betas,
            eps=config.adam_eps,
            weight_decay=config.weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: config.lr_factor(step)
        )

    @property
    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.params)

    # ---- forward ------------------------------------------------------------------------------

    def _token_logprobs(
        self, mb: MicroBatch, entropy: bool = False, scorer: TokenScorer | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logprobs [B, K] of the response tokens (and entropies) under `scorer` (default: the policy);
        0 where a row has no response token."""
        valid = mb.valid.to(self.device)
        logits = (scorer or self.scorer)(
            mb.input_ids.to(self.device),
            mb.attention_mask.to(self.device),
            mb.position_ids.to(self.device),
            mb.targets.shape[1],
            mb.gather.to(self.device) if mb.gather is not None else None,
            valid,
        )
        targets = mb.targets.to(self.device)[valid]
        ent = None
        if not any(sampler.processed for sampler in mb.samplers):
            lse = torch.logsumexp(logits, dim=-1)
            logp = logits.gather(-1, targets[:, None]).squeeze(-1) - lse
            if entropy:
                with torch.no_grad():
                    ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
        else:
            rows = valid.nonzero()[:, 0]
            logp, ent = _processed_token_logprobs(logits, targets, rows, mb.samplers, entropy)
        return _unflatten(logp, valid), _unflatten(ent, valid) if ent is not None else None

    def _reference_logprobs(self, mb: MicroBatch) -> torch.Tensor:
        with torch.no_grad():
            if self.config.lora:
                with self.model.disable_adapter():
                    return self._token_logprobs(mb)[0]
            return self._token_logprobs(mb, scorer=self.reference_scorer)[0]

    # ---- update -------------------------------------------------------------------------------

    def step(
        self, batch: AdvantageBatch | Sequence[Sample], total_weight: float | None = None
    ) -> StepMetrics:
        """One update of the batch: `ppo_epochs` passes over it, each in `mini_batches` optimizer steps,
        accumulating gradients over micro-batches (one optimizer step by default).

        `total_weight` (default: the samples' own) is the W the loss is normalized by: a learner rank
        holding part of a batch passes the whole batch's (`batch_mass`), so that the ranks' gradients add
        up to the single-rank one. Reported statistics are those of the first pass over the batch.
        """
        self.group.begin_step(self)
        try:
            return self._step(batch, total_weight)
        except TrainingDiverged:
            self.group.step_failed(self)
            raise

    def _step(self, batch: AdvantageBatch | Sequence[Sample], total_weight: float | None) -> StepMetrics:
        started = time.perf_counter()
        cfg = self.config
        samples = self._trainable_samples(batch)
        transitions = [s.transition for s in samples]
        advantages = [s.advantages for s in samples]
        parts = self._mini_batches(samples)
        steps = len(parts) * cfg.ppo_epochs
        # "old" is the policy at the start of the update; with one optimizer step it is the forward's own
        # logprob, detached, and costs no extra pass.
        old = self.logprobs(transitions) if steps > 1 else None
        self.model.train()
        totals = _Totals()
        grad_norm, lr = 0.0, float(self.scheduler.get_last_lr()[0])
        mass = total_weight if len(parts) == 1 else None
        for epoch in range(cfg.ppo_epochs):
            for part in parts:
                coefs = _coefficients(samples, part, cfg.loss_agg, mass)
                grad_norm = self._optimizer_step(
                    transitions, part, advantages, coefs, old, totals, epoch == 0
                )
        self.scheduler.step()
        self.step_count += 1

        seconds = time.perf_counter() - started
        forward_tokens = totals.forward * cfg.ppo_epochs
        return StepMetrics(
            step=self.step_count,
            loss=totals.loss,
            policy_loss=totals.policy_loss,
            kl_loss=totals.kl_loss,
            mean_ratio=totals.mean(totals.ratio),
            clip_fraction=totals.mean(totals.clipped),
            truncated_fraction=totals.mean(totals.truncated),
            approx_kl=totals.mean(totals.approx_kl),
            ref_kl=totals.mean(totals.ref_kl) if cfg.kl_coef > 0 else None,
            entropy=totals.mean(totals.entropy),
            tokens=totals.tokens,
            forward_tokens=forward_tokens,
            sample_tokens=sum(_length(t) for t in transitions) * cfg.ppo_epochs,
            padded_tokens=totals.padded,
            samples=len(samples),
            rollouts=len({s.rollout_id for s in samples}),
            micro_batches=totals.micro_batches,
            grad_norm=grad_norm,
            lr=lr,
            seconds=seconds,
            tokens_per_s=forward_tokens / seconds if seconds > 0 else 0.0,
            peak_rss_mb=peak_rss_mb(),
            nll=totals.mean(totals.nll),
            masked_fraction=totals.mean(totals.masked),
            optimizer_steps=steps,
        )

    def _trainable_samples(self, batch: AdvantageBatch | Sequence[Sample]) -> list[Sample]:
        given = batch.samples if isinstance(batch, AdvantageBatch) else batch
        samples = [s for s in given if s.transition.trained_tokens > 0 and s.weight != 0]
        if not (isinstance(batch, AdvantageBatch) and batch.report.method == IMITATION):
            refuse_demonstrations([s.transition for s in samples])
            refuse_unreproducible_sampling([s.transition for s in samples])
        for s in samples:
            _check_sample(s.transition, self.max_seq_len)
            if s.weight < 0:
                raise ValueError(f"sample of rollout {s.rollout_id!r} has a negative weight {s.weight}")
        if not samples and self.group.world == 1:  # a rank without a share adds zero gradients to the sum
            raise ValueError("nothing to train: no sample has a trained token and a non-zero weight")
        return samples

    def _mini_batches(self, samples: Sequence[Sample]) -> list[list[int]]:
        """Sample indices split into `mini_batches` parts, whole rollouts each, in a seeded order."""
        count = self.config.mini_batches
        if count <= 1:
            return [list(range(len(samples)))]
        rollouts = sorted({s.rollout_id for s in samples})
        random.Random(self.config.seed * 7_919 + self.step_count).shuffle(rollouts)
        part_of = {rollout: i % count for i, rollout in enumerate(rollouts)}
        parts = [[i for i, s in enumerate(samples) if part_of[s.rollout_id] == p] for p in range(count)]
        return [part for part in parts if part]

    def _optimizer_step(
        self,
        transitions: Sequence[Transition],
        indices: list[int],
        advantages: Sequence[float | Sequence[float]],
        coefs: Sequence[float],
        old: Sequence[Sequence[float]] | None,
        totals: _Totals,
        record: bool,
    ) -> float:
        """Accumulate the gradient of `indices` over micro-batches and take one optimizer step; adds to
        `totals` when `record`. Returns the gradient norm before clipping."""
        plan = self._plan([transitions[i] for i in indices])
        sink = totals if record else _Totals()
        self.optimizer.zero_grad(set_to_none=True)
        for n, group in enumerate(plan):
            if group:
                mb = self._collate(transitions, [indices[g] for g in group], advantages, coefs, old)
            else:
                mb = self._blank()
            try:
                self._accumulate(mb, sink, f"micro-batch {n + 1}/{len(plan)}")
            except TrainingDiverged:
                self.optimizer.zero_grad(set_to_none=True)
                raise
        sink.micro_batches += len(plan)
        grad_norm = self._clip_gradients()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def _plan(self, transitions: Sequence[Transition]) -> list[list[int]]:
        """Micro-batches of indices into `transitions`; an empty one is a `_blank` (ranks of a sharded
        learner pad their plans to the same length, since every forward is a collective there)."""
        budget = self.config.micro_batch_tokens
        if self.config.share_prefixes:
            sequences = [list(t.prompt_ids) + list(t.response_ids) for t in transitions]
            plan = plan_packed(sequences, budget, self._row_tokens)
        else:
            plan = plan_micro_batches([_length(t) for t in transitions], budget)
        return self.group.pad_plan(plan)

    @property
    def _row_tokens(self) -> int:
        """A packed row's width: within the micro-batch budget too."""
        return min(self.config.packed_row_tokens, self.config.micro_batch_tokens)

    def _collate(
        self,
        transitions: Sequence[Transition],
        rows: list[int],
        advantages: Sequence[float | Sequence[float]] | None = None,
        coefs: Sequence[float] | None = None,
        old: Sequence[Sequence[float]] | None = None,
    ) -> MicroBatch:
        if self.config.share_prefixes:
            return collate_packed(transitions, rows, self.pad_id, self._row_tokens, advantages, coefs, old)
        return collate(transitions, rows, self.pad_id, advantages, coefs, old)

    def _blank(self) -> MicroBatch:
        """A one-token micro-batch that trains nothing: its loss and gradient are exactly 0."""
        blank = Transition(
            rollout_id="",
            task_id="",
            group_id="",
            attempt=None,
            call_index=0,
            agent=None,
            policy_version=None,
            prompt_ids=[self.pad_id],
            response_ids=[self.pad_id],
            response_logprobs=[0.0],
            loss_mask=[0],
            reward=0.0,
        )
        return collate([blank], [0], self.pad_id, [0.0], [0.0])

    def _accumulate(self, mb: MicroBatch, totals: _Totals, where: str) -> None:
        cfg = self.config
        mask = mb.mask.to(self.device)
        coef = mb.coef.to(self.device)
        logp, entropy = self._token_logprobs(mb, entropy=True)
        # A demonstration has no behaviour policy: measured against the trainer's own logprob the ratio is
        # 1 and the surrogate's gradient with advantage 1 is the cross-entropy's.
        behaviour = torch.where(mb.demonstration.to(self.device), logp.detach(), mb.behaviour.to(self.device))
        per_token, stats = policy_loss(
            logp,
            behaviour,
            mb.advantages.to(self.device),
            mask,
            cfg.clip_low,
            cfg.clip_high,
            cfg.tis_cap,
            old=mb.old.to(self.device) if mb.old is not None else None,
            tis_mode=cfg.tis_mode,
            tis_level=cfg.tis_level,
        )
        policy_part = torch.where(mask, per_token, 0.0).mul(coef).sum()
        loss = policy_part
        kl_part = None
        if cfg.kl_coef > 0:
            kl = k3_kl(logp, self._reference_logprobs(mb))
            kl_part = torch.where(mask, kl, 0.0).mul(coef).sum() * cfg.kl_coef
            loss = loss + kl_part
            totals.ref_kl += float(torch.where(mask, kl.detach(), 0.0).sum())
        value = float(loss.detach())
        if not math.isfinite(value):
            loss = self.group.diverged(
                TrainingDiverged(
                    f"non-finite loss ({value}) at step {self.step_count + 1}, {where}; the update was not "
                    "applied. Check the samples' advantages and recorded logprobs for NaN/inf, or lower "
                    "the lr."
                ),
                logp,
            )
            value = 0.0
        loss.backward()

        totals.loss += value
        totals.policy_loss += float(policy_part.detach())
        totals.kl_loss += float(kl_part.detach()) if kl_part is not None else 0.0
        totals.tokens += int(mask.sum())
        totals.padded += mb.input_ids.numel()
        totals.forward += mb.tokens
        for key, values in stats.items():  # ratio, clipped, truncated, masked, approx_kl: _Totals' names
            setattr(totals, key, getattr(totals, key) + float(values[mask].sum()))
        if entropy is not None:
            totals.entropy += float(entropy[mask].sum())
        totals.nll -= float(logp.detach()[mask].sum())

    def _clip_gradients(self) -> float:
        self.group.reduce_gradients(self)
        max_norm = self.config.grad_clip if self.config.grad_clip > 0 else math.inf
        total = torch.nn.utils.clip_grad_norm_(self.params, max_norm)
        if isinstance(total, DTensor):  # sharded parameters: the norm is a replicated DTensor
            total = total.full_tensor()
        norm = float(total)
        if not math.isfinite(norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainingDiverged(
                f"non-finite gradient norm ({norm}) at step {self.step_count + 1}; the update was not "
                "applied. Lower the lr or check the samples' advantages."
            )
        return norm

    # ---- evaluation ---------------------------------------------------------------------------

    def logprobs(self, samples: Sequence[Sample | Transition]) -> list[list[float]]:
        """The current policy's logprobs of every response token (trained or not), without gradients."""
        transitions = [s.transition if isinstance(s, Sample) else s for s in samples]
        for t in transitions:
            _check_sample(t, self.max_seq_len)
        out: list[list[float]] = [[] for _ in transitions]
        todo = [i for i, t in enumerate(transitions) if t.response_ids]
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for group in self._plan([transitions[i] for i in todo]):
                    if not group:
                        self._token_logprobs(self._blank())
                        continue
                    mb = self._collate(transitions, [todo[g] for g in group])
                    logp = self._token_logprobs(mb)[0].float().cpu()
                    for row, i in enumerate(mb.indices):
                        n = len(transitions[i].response_ids)
                        out[i] = logp[row, logp.shape[1] - n :].tolist()
        finally:
            self.model.train(was_training)
        return out

    # ---- saving -------------------------------------------------------------------------------

    def save_adapter(self, path: str | os.PathLike[str]) -> Path:
        """Write the servable policy atomically: a PEFT adapter folder, or the whole model without LoRA.

        The engine takes the adapter with `TransformersEngine.load_adapter(path)`; a full model folder is
        served by starting an engine on it.
        """
        target = Path(path)
        state = self.servable_state()
        with _atomic_dir(target) as tmp:
            self.model.save_pretrained(tmp, **({"state_dict": state} if state is not None else {}))
            if not self.config.lora:
                from transformers import AutoTokenizer

                AutoTokenizer.from_pretrained(self.model_path).save_pretrained(tmp)
        return target

    def save_weights(self, directory: Path, version: int) -> PolicyWeights:
        """The servable policy of `version` in its own folder (the `Learner` seam)."""
        path = self.save_adapter(directory)
        return PolicyWeights(path=path, kind="lora" if self.config.lora else "full", version=version)

    def save_checkpoint(self, directory: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> Path:
        """Everything needed to resume: trainable weights, optimizer, scheduler, step, RNG and `extra`.

        `extra` (e.g. the data position) must be JSON-serialisable. With LoRA the folder also holds the
        servable adapter under `policy/`.
        """
        target = Path(directory)
        extra_text = json.dumps(extra or {})
        state = self.checkpoint_state()
        with _atomic_dir(target) as tmp:
            torch.save(state, tmp / CHECKPOINT_STATE)
            (tmp / CHECKPOINT_EXTRA).write_text(extra_text)
            if self.config.lora:
                self.save_adapter(tmp / CHECKPOINT_POLICY)
        return target

    def load_checkpoint(self, directory: str | os.PathLike[str]) -> dict[str, Any]:
        """Restore a `save_checkpoint` folder into this trainer (same config); returns its `extra`."""
        folder = Path(directory)
        state = torch.load(folder / CHECKPOINT_STATE, map_location="cpu", weights_only=True)
        if state["lora"] != self.config.lora:
            raise ValueError(
                f"checkpoint was saved with lora={state['lora']}, this trainer has lora={self.config.lora}"
            )
        params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        saved = state["trainable"]
        if set(saved) != set(params):
            missing, unexpected = sorted(set(params) - set(saved)), sorted(set(saved) - set(params))
            raise ValueError(
                f"checkpoint parameters do not match this model (missing {missing[:3]}, unexpected "
                f"{unexpected[:3]}): was it saved with the same model, lora_r and target_modules?"
            )
        with torch.no_grad():
            for name, param in params.items():
                param.copy_(self.group.like(saved[name], param))
        self.optimizer.load_state_dict(state["optimizer"])
        self.group.optimizer_loaded(self.optimizer)
        self.scheduler.load_state_dict(state["scheduler"])
        self.step_count = int(state["step"])
        _set_rng_state(state["rng"])
        return json.loads((folder / CHECKPOINT_EXTRA).read_text())

    # The saved state, whole (on a sharded rank, gathering is a collective: every rank calls these).

    def trainable(self) -> dict[str, torch.Tensor]:
        return {n: self.group.whole(p) for n, p in self.model.named_parameters() if p.requires_grad}

    def servable_state(self) -> dict[str, Any] | None:
        """The state dict `save_pretrained` writes (None: the model's own)."""
        return self.group.servable_state(self.model)

    def checkpoint_state(self) -> dict[str, Any]:
        return {
            "step": self.step_count,
            "lora": self.config.lora,
            "trainable": self.trainable(),
            "optimizer": self.group.whole_optimizer_state(self.optimizer.state_dict()),
            "scheduler": self.scheduler.state_dict(),
            "rng": _rng_state(),
        }


def _processed_token_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    rows: torch.Tensor,
    samplers: Sequence[Sampler],
    entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs [N] of `targets` under the sampling distribution of each token's row (`rows`; tokens
    grouped by sampler), and that distribution's entropies."""
    logp = torch.empty(targets.shape, dtype=logits.dtype, device=logits.device)
    ent = torch.empty(targets.shape, dtype=logits.dtype, device=logits.device) if entropy else None
    by_sampler: dict[Sampler, list[int]] = {}
    for row, sampler in enumerate(samplers):
        by_sampler.setdefault(sampler, []).append(row)
    for sampler, members in by_sampler.items():
        index = torch.isin(rows, torch.tensor(members, device=rows.device)).nonzero().squeeze(1)
        chosen = targets[index]
        logprobs = processed_logprobs(logits[index], sampler, always_keep=chosen)
        logp = logp.index_put((index,), logprobs.gather(-1, chosen[:, None]).squeeze(-1))
        if ent is not None:
            with torch.no_grad():
                probs = logprobs.exp()
                ent[index] = -torch.special.xlogy(probs, probs).sum(-1)
    return logp, ent


def _unflatten(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per-token `values` [N] back in the [B, K] layout of `valid`, 0 elsewhere."""
    return torch.zeros(valid.shape, dtype=values.dtype, device=values.device).masked_scatter(valid, values)


def _coefficients(
    samples: Sequence[Sample], part: Sequence[int], loss_agg: str, total: float | None
) -> list[float]:
    """Per-sample token coefficients of one optimizer step over `part` (others get 0): a sample's mass
    spread over its trained tokens, divided by the part's mass (or `total`, a whole batch's)."""
    mass = total if total is not None else batch_mass([samples[i] for i in part], loss_agg)
    coefs = [0.0] * len(samples)
    for i in part:
        sample = samples[i]
        coefs[i] = sample_mass(sample, loss_agg) / (sample.transition.trained_tokens * mass)
    return coefs


def _wrap_lora(model: Any, config: TrainConfig) -> Any:
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # peft probes a transformers attribute that is deprecated in transformers 5; harmless.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, lora)


def _length(t: Transition) -> int:
    return len(t.prompt_ids) + len(t.response_ids)


def _check_sample(t: Transition, max_seq_len: int) -> None:
    n = len(t.response_ids)
    if len(t.response_logprobs) != n or len(t.loss_mask) != n:
        raise ValueError(
            f"rollout {t.rollout_id!r} call {t.call_index}: response_ids, response_logprobs and loss_mask "
            f"have lengths {n}, {len(t.response_logprobs)}, {len(t.loss_mask)}"
        )
    if n and not t.prompt_ids:
        raise ValueError(
            f"rollout {t.rollout_id!r} call {t.call_index}: empty prompt (nothing predicts token 0)"
        )
    if _length(t) > max_seq_len:
        raise ValueError(
            f"rollout {t.rollout_id!r} call {t.call_index} has {_length(t)} tokens, more than max_seq_len="
            f"{max_seq_len}; raise TrainConfig.max_seq_len (up to the model's context) or shorten rollouts"
        )


def bf16_by_default(device: torch.device) -> bool:
    """The learner's default precision: the one the built-in engine samples in (`dtype auto`: bf16 on a
    CUDA device that supports it, fp32 elsewhere). A learner in another precision than its sampler
    scores tokens differently from how they were drawn: on a CPU with native bf16, autocast alone moved
    the first ratio by 4e-3."""
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


def peak_rss_mb() -> float:
    try:
        import resource
    except ImportError:
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def _atomic_dir(target: Path) -> Iterator[Path]:
    """Write a folder under a temporary name, then swap it into place (replacing any previous one)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex}"
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        yield tmp
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
