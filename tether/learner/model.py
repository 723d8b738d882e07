"""The model side of the learner: the decoder-and-head module the update runs (`TokenScorer`), logprobs
under each sample's sampling distribution, LoRA wrapping, and the checks and defaults of a sample."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from tether.adapters.transitions import Transition
from tether.engines.sampling import processed_logprobs
from tether.learner.config import TrainConfig
from tether.sampling import Sampler


class TokenScorer(torch.nn.Module):
    """The logits [B, K, V] (fp32) that predict the last K tokens of each row, or with `valid` [B, K] only
    those [N, V] of its N true entries (the head skips the padding): decoder, then head.

    One module, so that a sharded learner (`tether.learner.sharding`) can gather the embedding, final norm
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


def processed_token_logprobs(
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


def unflatten(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per-token `values` [N] back in the [B, K] layout of `valid`, 0 elsewhere."""
    return torch.zeros(valid.shape, dtype=values.dtype, device=values.device).masked_scatter(valid, values)


def wrap_lora(model: Any, config: TrainConfig) -> Any:
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


def sample_length(t: Transition) -> int:
    return len(t.prompt_ids) + len(t.response_ids)


def check_sample(t: Transition, max_seq_len: int) -> None:
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
    length = sample_length(t)
    if length > max_seq_len:
        raise ValueError(
            f"rollout {t.rollout_id!r} call {t.call_index} has {length} tokens, more than max_seq_len="
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
