"""The built-in model engine (torch): continuous batching, stacked LoRA rows, the processed sampling
distribution. What a model's format is (catalogue, chat template, tool calls) is `tether.models`. Heavy
modules (torch, transformers) load only when their names are first used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Engine, GeneratedToken, Generation, GenerationDone, SamplingParams

if TYPE_CHECKING:
    from .transformers_engine import TransformersEngine

__all__ = [
    "Engine",
    "GeneratedToken",
    "Generation",
    "GenerationDone",
    "SamplingParams",
    "TransformersEngine",
]


def __getattr__(name: str) -> Any:
    if name != "TransformersEngine":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .transformers_engine import TransformersEngine

    globals()[name] = TransformersEngine
    return TransformersEngine
