"""`PolicyTrainer`: the learner of one process (or one rank of several), its update steps, logprobs,
weights and checkpoints. The loss it minimizes is `tether.learner.loss.policy_loss`."""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from tether.adapters.transitions import Transition
from tether.algorithms.advantages import (
    IMITATION,
    AdvantageBatch,
    Sample,
    refuse_demonstrations,
    refuse_unreproducible_sampling,
)
from tether.learner.batches import MicroBatch, collate, collate_packed, plan_micro_batches, plan_packed
from tether.learner.config import TrainConfig
from tether.learner.errors import TrainingDiverged
from tether.learner.groups import LearnerGroup, Solo
from tether.learner.loss import StepMetrics, StepTotals, k3_kl, policy_loss, token_coefficients
from tether.learner.model import (
    TokenScorer,
    bf16_by_default,
    check_sample,
    peak_rss_mb,
    processed_token_logprobs,
    sample_length,
    unflatten,
    wrap_lora,
)
from tether.learner.state import (
    CHECKPOINT_EXTRA,
    CHECKPOINT_POLICY,
    CHECKPOINT_STATE,
    atomic_dir,
    rng_state,
    set_rng_state,
)
from tether.models.catalog import resolve_model
from tether.policy_server.base import PolicyWeights

log = logging.getLogger(__name__)


class PolicyTrainer:
    """The learner of one process, or one rank of several (`group`, `tether.learner.groups`)."""

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
            self.model = wrap_lora(base, config)
            self.causal_lm = self.model.get_base_model()
        else:
            self.model = self.causal_lm = base
            if config.kl_coef > 0:
                reference = copy.deepcopy(base).eval().requires_grad_(False)
                self.reference_scorer = TokenScorer(reference, self.bf16)
        self.scorer = TokenScorer(self.causal_lm, self.bf16)
        self.make_optimizer()
        self.step_count = 0
        self.group.attach(self)
        log.info(
            "policy trainer on %s: %s, %d trainable parameters, bf16 autocast %s",
            self.model_path.name,
            "LoRA" if config.lora else "full fine-tuning",
            self.trainable_parameters,
            "on" if self.bf16 else "off",
        )

    def make_optimizer(self) -> None:
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
            logp, ent = processed_token_logprobs(logits, targets, rows, mb.samplers, entropy)
        return unflatten(logp, valid), unflatten(ent, valid) if ent is not None else None

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
        totals = StepTotals()
        grad_norm, lr = 0.0, float(self.scheduler.get_last_lr()[0])
        mass = total_weight if len(parts) == 1 else None
        for epoch in range(cfg.ppo_epochs):
            for part in parts:
                coefs = token_coefficients(samples, part, cfg.loss_agg, mass)
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
            sample_tokens=sum(sample_length(t) for t in transitions) * cfg.ppo_epochs,
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
            check_sample(s.transition, self.max_seq_len)
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
        totals: StepTotals,
        record: bool,
    ) -> float:
        """Accumulate the gradient of `indices` over micro-batches and take one optimizer step; adds to
        `totals` when `record`. Returns the gradient norm before clipping."""
        plan = self._plan([transitions[i] for i in indices])
        sink = totals if record else StepTotals()
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
            plan = plan_micro_batches([sample_length(t) for t in transitions], budget)
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

    def _accumulate(self, mb: MicroBatch, totals: StepTotals, where: str) -> None:
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
        for key, values in stats.items():  # ratio, clipped, truncated, masked, approx_kl: StepTotals' names
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
            check_sample(t, self.max_seq_len)
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
        with atomic_dir(target) as tmp:
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
        with atomic_dir(target) as tmp:
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
        set_rng_state(state["rng"])
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
            "rng": rng_state(),
        }
