"""How the built-in engine loads a model: the weights' dtype, the output head under autocast, the stop and
padding token ids."""

from __future__ import annotations

from typing import Any

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def eos_ids(tokenizer: Any, model: Any) -> frozenset[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(t) for t in configured)
    return frozenset(ids)


def pad_id(tokenizer: Any, eos_ids: frozenset[int]) -> int:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return min(eos_ids) if eos_ids else 0


class Fp32Head(torch.nn.Module):
    """The output head in fp32 under autocast, as the learner's: bf16 keeps 8 mantissa bits, so a logit
    near 20 would move by up to 0.06."""

    def __init__(self, head: torch.nn.Module) -> None:
        super().__init__()
        self.head = head
        self.weight = head.weight  # tied to the input embeddings in small models; transformers looks here

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(hidden.device.type, enabled=False):
            out: torch.Tensor = self.head(hidden.float())
            return out


def resolve_dtype(dtype: str) -> torch.dtype:
    """The weights' dtype: `auto` keeps them in fp32 (on a bf16 CUDA device the engine adds autocast)."""
    if dtype == "auto":
        return torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: expected auto or one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype]
