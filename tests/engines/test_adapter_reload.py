"""A policy's next adapter version copied into the loaded adapter, or loaded anew when its shape differs."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.engines.test_row_lora import peft_with, save_adapter
from tether.engines.adapter_reload import reload_in_place


def logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=ids).logits


def test_a_version_of_the_same_shape_is_copied_in(tiny_path: Path, tmp_path: Path) -> None:
    modules = ["q_proj", "v_proj", "up_proj"]
    first = save_adapter(tiny_path, tmp_path / "1", 1, r=4, lora_alpha=8, target_modules=modules)
    second = save_adapter(
        tiny_path, tmp_path / "2", 2, r=4, lora_alpha=8, target_modules=list(reversed(modules))
    )
    ids = torch.randint(0, 1000, (2, 8), generator=torch.Generator().manual_seed(0))
    model = peft_with(tiny_path, {"policy": first})
    before = logits(model, ids)
    assert reload_in_place(model, "policy", str(second))
    torch.testing.assert_close(logits(model, ids), logits(peft_with(tiny_path, {"p": second}), ids))
    assert not torch.allclose(logits(model, ids), before, atol=1e-3)


def test_another_shape_is_left_to_a_fresh_load(tiny_path: Path, tmp_path: Path) -> None:
    first = save_adapter(tiny_path, tmp_path / "1", 1, r=4, target_modules=["q_proj"])
    ids = torch.randint(0, 1000, (2, 8), generator=torch.Generator().manual_seed(0))
    for other in (
        save_adapter(tiny_path, tmp_path / "r8", 2, r=8, target_modules=["q_proj"]),
        save_adapter(tiny_path, tmp_path / "alpha", 2, r=4, lora_alpha=64, target_modules=["q_proj"]),
        save_adapter(tiny_path, tmp_path / "more", 2, r=4, target_modules=["q_proj", "v_proj"]),
    ):
        model = peft_with(tiny_path, {"policy": first})
        before = logits(model, ids)
        assert not reload_in_place(model, "policy", str(other))
        torch.testing.assert_close(logits(model, ids), before)


async def test_the_engine_swaps_to_an_adapter_of_another_shape(tiny_path: Path, tmp_path: Path) -> None:
    from tether.engines.transformers_engine import TransformersEngine

    small = save_adapter(tiny_path, tmp_path / "s", 1, r=4, target_modules=["q_proj"])
    large = save_adapter(tiny_path, tmp_path / "l", 2, r=8, target_modules=["q_proj", "o_proj"])
    ids = [1, 17, 33, 49, 65, 81]
    engine = TransformersEngine(str(tiny_path), max_batch_size=4)
    try:
        for adapter in (small, large, small):
            engine.load_adapter(str(adapter))
            reference = peft_with(tiny_path, {"p": adapter})
            expected = torch.log_softmax(logits(reference, torch.tensor([ids]))[0, :-1], -1)
            picked = expected.gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)
            torch.testing.assert_close(torch.tensor(await engine.score(ids)), picked, rtol=1e-4, atol=1e-4)
    finally:
        engine.close()
