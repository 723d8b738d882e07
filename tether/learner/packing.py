"""Prefix-shared packing: each distinct token prefix of a micro-batch is run through the model once.

The samples of a GRPO group share their prompt, and every sample of a run shares its system prompt; a
multi-turn rollout's later calls extend its earlier ones. Padded rows compute each of those prefixes once
per sample. A packed row lays the samples out as a prefix tree instead:

    row:  [ shared prompt P ][ completion 1 ][ completion 2 ] ... [ completion n ]

and a 4-D attention mask lets every token attend exactly to the tokens of its own sequence (its path in
the tree): completion i sees P and its own earlier tokens, never another completion. Position ids restart
along each path, so every token's hidden state is, up to float summation order, the one it has in a
padded row of its own sequence, and gradients flow through P from every completion that extends it.
The logits that predict a sample's response tokens are gathered from the columns of its path (`gather`),
so the loss downstream sees the usual [B, K] layout.

Sharing is found by sorting the sequences: in lexicographic order the longest common prefix of a sequence
with any earlier one is the one with its predecessor, so each sequence reuses its predecessor's path up to
that prefix and adds its remaining tokens as a new segment. A row closes when the next segment would take
it past `row_tokens` (attention is quadratic in a row's width); a sequence longer than that goes alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class PackedRow:
    """One row of the layout: its tokens, and for each sequence placed in it, the columns of its path."""

    token_ids: list[int] = field(default_factory=list)
    position_ids: list[int] = field(default_factory=list)
    members: list[int] = field(default_factory=list)  # indices into the packed sequences
    paths: list[list[int]] = field(default_factory=list)  # per member: the column of each of its tokens
    shared_from: list[int] = field(default_factory=list)  # per member: how many of its tokens it reuses


def pack_rows(sequences: Sequence[Sequence[int]], row_tokens: int) -> list[PackedRow]:
    """Lay `sequences` out as prefix trees in rows of at most `row_tokens` columns (or one sequence)."""
    order = sorted(range(len(sequences)), key=lambda i: list(sequences[i]))
    rows: list[PackedRow] = []
    row: PackedRow | None = None
    for index in order:
        sequence = sequences[index]
        shared = 0
        if row is not None and row.members:
            previous = sequences[row.members[-1]]
            shared = _common_prefix(previous, sequence)
            if len(row.token_ids) + len(sequence) - shared > row_tokens:
                row, shared = None, 0
        if row is None:
            row = PackedRow()
            rows.append(row)
        _place(row, sequence, index, shared)
    return rows


def _place(row: PackedRow, sequence: Sequence[int], index: int, shared: int) -> None:
    path = row.paths[-1][:shared] if shared else []
    start = len(row.token_ids)
    row.token_ids.extend(sequence[shared:])
    row.position_ids.extend(range(shared, len(sequence)))
    path.extend(range(start, start + len(sequence) - shared))
    row.members.append(index)
    row.paths.append(path)
    row.shared_from.append(shared)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class PackedLayout:
    """Model inputs for packed rows, and where each sample's predicting columns are."""

    input_ids: torch.Tensor  # [R, W]
    attention_mask: torch.Tensor  # [R, 1, W, W] bool: query column attends to key column
    position_ids: torch.Tensor  # [R, W]
    gather: torch.Tensor  # [B, K] flat column (row * W + column) predicting each right-aligned response token
    tokens: int  # real (unpadded) columns: the tokens the forward pass runs


def packed_layout(
    sequences: Sequence[Sequence[int]],
    response_lengths: Sequence[int],
    row_tokens: int,
    pad_id: int,
) -> PackedLayout:
    """The packed inputs for `sequences` (prompt + response ids), whose last `response_lengths[b]`
    tokens are the response; `gather[b]` is right-aligned like the other [B, K] tensors of a micro-batch."""
    rows = pack_rows(sequences, row_tokens)
    width = max(len(row.token_ids) for row in rows)
    count = len(rows)
    input_ids = torch.full((count, width), pad_id, dtype=torch.long)
    position_ids = torch.zeros((count, width), dtype=torch.long)
    # A pad column attends to itself only, so that no softmax row is empty (NaN would reach the backward).
    mask = torch.eye(width, dtype=torch.bool).repeat(count, 1, 1)
    k = max(response_lengths) if response_lengths else 0
    gather = torch.zeros((len(sequences), k), dtype=torch.long)
    for r, row in enumerate(rows):
        used = len(row.token_ids)
        input_ids[r, :used] = torch.tensor(row.token_ids, dtype=torch.long)
        position_ids[r, :used] = torch.tensor(row.position_ids, dtype=torch.long)
        for member, path, shared in zip(row.members, row.paths, row.shared_from, strict=True):
            columns = torch.tensor(path, dtype=torch.long)
            causal = torch.ones((len(path), len(path)), dtype=torch.bool).tril()
            mask[r][columns[shared:, None], columns[None, :]] = causal[shared:]
            n = response_lengths[member]
            if n:
                # Token j of the sequence is predicted by the column holding token j - 1.
                start = len(path) - n - 1
                gather[member, k - n :] = columns[start : start + n] + r * width
    return PackedLayout(input_ids, mask[:, None], position_ids, gather, sum(len(r.token_ids) for r in rows))
