"""A decoding batch's rows and its layout: left-padded rows sharing one KV cache and one attention mask.

A row's columns are where its attention mask is 1; zeros mark padding on the left (a row shorter than
the batch) and, for a row that started from a cached prefix shorter than the batch's, a hole between its
prefix and the rest. Explicit position ids keep each row's positions 0, 1, 2, ... across the holes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from .base import DEFAULT_POLICY, SamplingParams


@dataclass
class Request:
    prompt_ids: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    results: asyncio.Queue[Any]
    owner: str | None = None
    policy: str = DEFAULT_POLICY
    cancelled: bool = False
    arrival: int = 0  # the worker's count of requests received before this one

    def push(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.results.put_nowait, item)
        except RuntimeError:
            self.cancelled = True


@dataclass
class Row:
    request: Request
    generator: torch.Generator | None
    policy_version: int
    stops: list[str]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text_ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted: str = ""
    finish_reason: str | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.request.cancelled


@dataclass
class Batch:
    rows: list[Row]
    cache: Any
    mask: torch.Tensor
    positions: torch.Tensor
    last_tokens: torch.Tensor
    reshapeable: bool


def merge(running: Batch, fresh: Batch) -> Batch:
    width = max(running.mask.shape[1], fresh.mask.shape[1])
    for old, new in zip(running.cache.layers, fresh.cache.layers, strict=True):
        old.keys = torch.cat([pad_seq(old.keys, width), pad_seq(new.keys, width)])
        old.values = torch.cat([pad_seq(old.values, width), pad_seq(new.values, width)])
    running.mask = torch.cat([pad_mask(running.mask, width), pad_mask(fresh.mask, width)])
    running.positions = torch.cat([running.positions, fresh.positions])
    running.last_tokens = torch.cat([running.last_tokens, fresh.last_tokens])
    running.rows = running.rows + fresh.rows
    return running


def select_rows(batch: Batch, rows: list[int]) -> None:
    """Keep (or repeat) the batch rows `rows` names, in that order."""
    index = torch.tensor(rows, dtype=torch.long, device=batch.mask.device)
    batch.rows = [batch.rows[i] for i in rows]
    batch.mask = batch.mask[index]
    batch.positions = batch.positions[index]
    batch.last_tokens = batch.last_tokens[index]
    for layer in batch.cache.layers:
        layer.keys, layer.values = layer.keys[index], layer.values[index]


def pad_seq(states: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(states, (0, 0, width - states.shape[-2], 0))


def pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(mask, (width - mask.shape[1], 0))


def trim_left(batch: Batch) -> None:
    """Drop the leading columns no row uses (holes further right stay: the mask hides them)."""
    used = batch.mask.any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else 0
    if start == 0:
        return
    batch.mask = batch.mask[:, start:]
    for layer in batch.cache.layers:
        layer.keys, layer.values = layer.keys[..., start:, :], layer.values[..., start:, :]


def prefill_layout(
    prompts: list[list[int]], cached: list[int], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Input ids [rows, S] (each prompt after its `cached` leading tokens, left-padded), the attention
    mask [rows, P + S] over a past region of width P = max(cached) (row i's prefix right-aligned in it)
    and the inputs, and the inputs' position ids (row i's first input is at position cached[i])."""
    past = max(cached, default=0)
    width = max(len(prompt) - k for prompt, k in zip(prompts, cached, strict=True))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), past + width), dtype=torch.long)
    for i, (prompt, k) in enumerate(zip(prompts, cached, strict=True)):
        suffix = prompt[k:]
        ids[i, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
        mask[i, past - k : past] = 1
        mask[i, past + width - len(suffix) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, past:]
    return ids, mask, positions
