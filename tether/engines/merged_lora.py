"""One LoRA adapter folded into the base weights, for batches whose rows all sample from it.

PEFT runs a LoRA layer as the base layer plus `x @ A @ B * scale`: on a CPU that is two more small matrix
products and an add in each of the ~200 projections of a small model: folded, a decode step of
SmolLM2-135M takes 0.84x-0.89x as long at 8-24 rows on 2 cores (`python -m bench.engine_adapter`). With
the adapter's delta added into the base weights, the same batch runs the plain model. `MergedLoRA` keeps
each touched base weight's original values aside once and copies them back before any other adapter, a
mixed batch or a swap needs the base, so the base never drifts (subtracting the delta again would round
differently each time).

Plain LoRA only (`row_lora.plain_lora`); anything else leaves `merge` returning False and the caller on
PEFT's path. Used on the CPU, where memory for one copy of the projections is cheap and the extra
products are what a step costs; on a GPU the copy would cost memory the engine is better off spending
on rows.
"""

from __future__ import annotations

from typing import Any

import torch

from .row_lora import plain_lora


class MergedLoRA:
    """Which adapter, if any, is folded into `model`'s base weights; PEFT's LoRA layers are disabled
    while one is."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.merged: str | None = None
        self._originals: dict[Any, torch.Tensor] = {}  # PEFT LoRA layer -> its base weight as loaded
        self._touched: list[Any] = []  # the layers the merged adapter changed
        self._unmergeable: set[str] = set()  # adapters with a layer that is not plain LoRA

    def merge(self, name: str) -> bool:
        """Fold adapter `name` into the base weights (restoring any other first). False, with the base
        as loaded, where a layer is not plain LoRA (remembered: a forward pass asks every time)."""
        if self.merged == name:
            return True
        self.restore()
        if name in self._unmergeable:
            return False
        layers = [layer for layer in self.model.modules() if name in getattr(layer, "lora_A", {})]
        if not layers or not all(plain_lora(layer, [name]) for layer in layers):
            self._unmergeable.add(name)
            return False
        with torch.no_grad():
            for layer in layers:
                weight = layer.get_base_layer().weight
                if layer not in self._originals:
                    self._originals[layer] = weight.detach().clone()
                weight.add_(layer.get_delta_weight(name).to(weight.dtype))
        self.model.base_model.disable_adapter_layers()
        self.merged, self._touched = name, layers
        return True

    def restore(self) -> None:
        """The base weights as loaded, and PEFT's LoRA layers back on."""
        if self.merged is None:
            return
        with torch.no_grad():
            for layer in self._touched:
                layer.get_base_layer().weight.copy_(self._originals[layer])
        self.model.base_model.enable_adapter_layers()
        self.merged, self._touched = None, []
