"""Micro-batches: which samples run through the model together, and their tensors.

Two layouts give the loss the same [B, K] per-token tensors (right-aligned response tokens):
- padded: one left-padded row per sample, so that every response ends at the last column;
- packed (`tether.learner.packing`): samples that share a token prefix share the columns of that prefix
  in one row, with a 4-D attention mask and a `gather` of the columns that predict each response token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tether.adapters.transitions import Transition
from tether.learner.packing import pack_rows, packed_layout
from tether.sampling import Sampler


@dataclass
class MicroBatch:
    """The model inputs of some samples (padded or packed, see the module docstring) and their per-token
    tensors [B, K]."""

    indices: list[int]
    input_ids: torch.Tensor  # [B, W] padded, or [R, W] packed rows
    attention_mask: torch.Tensor  # [B, W] padded, or [R, 1, W, W] packed (bool: query attends to key)
    position_ids: torch.Tensor  # [B, W] padded, or [R, W] packed
    targets: torch.Tensor  # [B, K] response tokens, right-aligned
    valid: torch.Tensor  # [B, K] bool: a response token (trained or not)
    mask: torch.Tensor  # [B, K] bool: a trained response token
    behaviour: torch.Tensor  # [B, K] recorded logprobs
    advantages: torch.Tensor  # [B, K]: each response token's advantage
    coef: torch.Tensor  # [B, 1] weight / (trained tokens * total weight)
    demonstration: torch.Tensor  # [B, 1] bool: no recorded logprobs (another model's text)
    samplers: list[Sampler]  # per row: the distribution its tokens were drawn from
    old: torch.Tensor | None = None  # [B, K] the policy's logprobs at the start of the update
    gather: torch.Tensor | None = None  # [B, K] packed only: the flat column predicting each response token
    tokens: int = 0  # the real (unpadded) tokens the forward pass runs


def plan_micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Group sample indices so that rows x longest row stays within `budget` padded tokens.

    Longest first, so neighbours have similar lengths (little padding) and the biggest micro-batch, the
    memory peak, comes first. A sample longer than the budget goes alone.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) + 1) * lengths[current[0]] > budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def collate(
    transitions: Sequence[Transition],
    indices: list[int],
    pad_id: int,
    advantages: Sequence[float | Sequence[float]] | None = None,
    coefs: Sequence[float] | None = None,
    old: Sequence[Sequence[float]] | None = None,
    with_inputs: bool = True,
) -> MicroBatch:
    """The padded layout of `indices`; without `with_inputs` only the per-token tensors are filled."""
    rows = [transitions[i] for i in indices]
    width = max(len(t.prompt_ids) + len(t.response_ids) for t in rows) if with_inputs else 0
    k = max(len(t.response_ids) for t in rows)
    b = len(rows)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((b, width), dtype=torch.long)
    targets = torch.zeros((b, k), dtype=torch.long)
    valid = torch.zeros((b, k), dtype=torch.bool)
    mask = torch.zeros((b, k), dtype=torch.bool)
    behaviour = torch.zeros((b, k), dtype=torch.float32)
    adv = torch.zeros((b, k), dtype=torch.float32)
    old_logp = torch.zeros((b, k), dtype=torch.float32) if old is not None else None
    for row, t in enumerate(rows):
        n = len(t.response_ids)
        if with_inputs:
            ids = list(t.prompt_ids) + list(t.response_ids)
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        if n:
            targets[row, k - n :] = torch.tensor(t.response_ids, dtype=torch.long)
            valid[row, k - n :] = True
            mask[row, k - n :] = torch.tensor(t.loss_mask, dtype=torch.long) != 0
            behaviour[row, k - n :] = torch.tensor(t.response_logprobs, dtype=torch.float32)
            if advantages is not None:
                adv[row, k - n :] = _row_advantages(advantages[indices[row]], n)
            if old_logp is not None and old is not None:
                old_logp[row, k - n :] = torch.tensor(old[indices[row]], dtype=torch.float32)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    coef = [coefs[i] for i in indices] if coefs is not None else [0.0] * b
    return MicroBatch(
        indices=indices,
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        targets=targets,
        valid=valid,
        mask=mask,
        behaviour=behaviour,
        advantages=adv,
        coef=torch.tensor(coef, dtype=torch.float32)[:, None],
        demonstration=torch.tensor([t.demonstration for t in rows], dtype=torch.bool)[:, None],
        samplers=[t.sampler for t in rows],
        old=old_logp,
        tokens=int(attention_mask.sum()),
    )


def _row_advantages(value: float | Sequence[float], length: int) -> torch.Tensor:
    """One sample's advantages over its `length` response tokens: a scalar broadcast, or one per token."""
    if isinstance(value, int | float):
        return torch.full((length,), float(value), dtype=torch.float32)
    if len(value) != length:
        raise ValueError(f"{len(value)} token advantages for a response of {length} tokens")
    return torch.tensor(list(value), dtype=torch.float32)


def plan_packed(sequences: Sequence[Sequence[int]], budget: int, row_tokens: int) -> list[list[int]]:
    """Micro-batches of sequence indices for the packed layout: the prefix-tree rows of all `sequences`,
    grouped so that rows x widest row stays within `budget` (`plan_micro_batches` over rows)."""
    rows = pack_rows(sequences, row_tokens)
    plan = plan_micro_batches([len(row.token_ids) for row in rows], budget)
    return [sorted(i for r in group for i in rows[r].members) for group in plan]


def collate_packed(
    transitions: Sequence[Transition],
    indices: list[int],
    pad_id: int,
    row_tokens: int,
    advantages: Sequence[float | Sequence[float]] | None = None,
    coefs: Sequence[float] | None = None,
    old: Sequence[Sequence[float]] | None = None,
) -> MicroBatch:
    """`collate`'s per-token tensors over the packed layout of the same samples."""
    padded = collate(transitions, indices, pad_id, advantages, coefs, old, with_inputs=False)
    rows = [transitions[i] for i in indices]
    layout = packed_layout(
        [list(t.prompt_ids) + list(t.response_ids) for t in rows],
        [len(t.response_ids) for t in rows],
        row_tokens,
        pad_id,
    )
    padded.input_ids = layout.input_ids
    padded.attention_mask = layout.attention_mask
    padded.position_ids = layout.position_ids
    padded.gather = layout.gather
    padded.tokens = layout.tokens
    return padded
