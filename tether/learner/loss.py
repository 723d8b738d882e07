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

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from tether.algorithms.advantages import Sample, batch_mass, sample_mass


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
class StepTotals:
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
        weight = torch.exp(level_log_weights(old - behaviour, mask, tis_level))
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


def level_log_weights(log_weights: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
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


def token_coefficients(
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
