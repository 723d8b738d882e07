"""Model engines. Heavy modules (torch, transformers) load only when their names are first used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Engine, GeneratedToken, Generation, GenerationDone, SamplingParams

if TYPE_CHECKING:
    from .catalog import CATALOGUE, resolve_model
    from .transformers_engine import TransformersEngine

__all__ = [
    "CATALOGUE",
    "Engine",
    "GeneratedToken",
    "Generation",
    "GenerationDone",
    "SamplingParams",
    "TransformersEngine",
    "resolve_model",
]

_LAZY = {
    "CATALOGUE": "catalog",
    "resolve_model": "catalog",
    "TransformersEngine": "transformers_engine",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module_name}", __name__), name)
    globals()[name] = value
    return value
