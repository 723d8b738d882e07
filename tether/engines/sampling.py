"""The processed distribution, defined once for the engine that samples from it and the learner that scores
it (see `tether.sampling`).

Order, as vLLM and transformers apply them: logits / temperature, then top-k (the k largest logits), then
top-p (the smallest set of most likely tokens whose probability reaches p, renormalized over top-k), then
the softmax over what is kept. A token is in the nucleus when the tokens *strictly* more likely than it sum
to less than p, so tied tokens are kept or cut together and the set does not depend on a sort's order.
"""

from __future__ import annotations

import torch

from tether.sampling import Sampler


def kept_tokens(scaled: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor | None:
    """A bool mask [..., V] of the tokens top-k and top-p keep, from logits already divided by the
    temperature; None when nothing is cut. No gradient flows through it."""
    if top_k <= 0 and top_p >= 1.0:
        return None
    with torch.no_grad():
        keep = torch.ones_like(scaled, dtype=torch.bool)
        if 0 < top_k < scaled.shape[-1]:
            kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
            keep = scaled >= kth
        if top_p < 1.0:
            probs = torch.softmax(scaled.masked_fill(~keep, float("-inf")), dim=-1)
            ordered = probs.sort(dim=-1, descending=True).values
            before = ordered.cumsum(-1) - ordered  # mass strictly ahead of each sorted position
            count = (before < top_p).sum(-1, keepdim=True).clamp(min=1)
            threshold = ordered.gather(-1, count - 1)
            keep &= probs >= threshold
        return keep


def processed_logprobs(
    logits: torch.Tensor, sampler: Sampler, always_keep: torch.Tensor | None = None
) -> torch.Tensor:
    """Log-probabilities [..., V] under `sampler`'s distribution (-inf outside what it keeps).

    `always_keep` (token ids [...]) keeps those tokens in the set whatever the cut says: the learner
    passes the sampled tokens, so that a token whose probability moved across the nucleus boundary
    during an update gets a finite logprob (its ratio is then measured, and clipped, like any other).
    Differentiable with respect to `logits`; greedy samplers are scored at temperature 1.
    """
    temperature = sampler.temperature if sampler.temperature > 0 else 1.0
    scaled = logits / temperature if temperature != 1.0 else logits
    keep = kept_tokens(scaled, sampler.top_p, sampler.top_k)
    if keep is not None:
        if always_keep is not None:
            keep = keep.scatter(-1, always_keep[..., None], True)
        scaled = scaled.masked_fill(~keep, float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def draw(logprobs: torch.Tensor, generator: torch.Generator) -> int:
    """One token drawn from exp(logprobs) [V] by inverse CDF (much faster than torch.multinomial over a
    large vocabulary on CPU)."""
    cdf = logprobs.exp().cumsum(0)
    u = torch.rand(1, generator=generator, device=logprobs.device, dtype=cdf.dtype) * cdf[-1]
    index = int(torch.searchsorted(cdf, u, right=True).clamp(max=logprobs.numel() - 1)[0])
    # Rounding in the cumulative sum can land u on a token of probability 0 just past the last kept one.
    while logprobs[index] == float("-inf") and index > 0:
        index -= 1
    return index
