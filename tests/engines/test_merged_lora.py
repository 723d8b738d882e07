"""One LoRA adapter folded into the base weights: PEFT's logits, and the base exactly as loaded after."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.engines.test_row_lora import peft_with, save_adapter, two_adapters
from tether.engines.merged_lora import MergedLoRA


def base_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


def test_a_merged_adapter_gives_peft_logits_and_leaves_the_base_as_loaded(
    tiny_path: Path, tmp_path: Path
) -> None:
    adapters = two_adapters(tiny_path, tmp_path)
    model = peft_with(tiny_path, adapters)
    loaded = base_weights(model)
    ids = torch.randint(0, 1000, (3, 9), generator=torch.Generator().manual_seed(0))
    expected = {}
    with torch.inference_mode():
        for name in adapters:
            model.set_adapter(name)
            expected[name] = model(input_ids=ids).logits
        with model.disable_adapter():
            base = model(input_ids=ids).logits
    merged = MergedLoRA(model)
    for name in ["writer", "rewriter", "writer"]:  # each merge restores the other first
        assert merged.merge(name)
        with torch.inference_mode():
            got = model(input_ids=ids).logits
        torch.testing.assert_close(got, expected[name], rtol=1e-4, atol=1e-4)
        assert not torch.allclose(got, base, atol=1e-3)
    merged.restore()
    after = base_weights(model)
    assert all(torch.equal(after[n], loaded[n]) for n in loaded)  # bit for bit, however many merges
    model.set_adapter("rewriter")
    with torch.inference_mode():
        torch.testing.assert_close(model(input_ids=ids).logits, expected["rewriter"], rtol=1e-4, atol=1e-4)


def test_a_lora_variant_is_not_merged(tiny_path: Path, tmp_path: Path) -> None:
    dora = save_adapter(tiny_path, tmp_path / "d", 1, r=4, target_modules=["q_proj"], use_dora=True)
    model = peft_with(tiny_path, {"dora": dora})
    loaded = base_weights(model)
    assert not MergedLoRA(model).merge("dora")
    assert all(torch.equal(p, loaded[n]) for n, p in base_weights(model).items())


async def test_the_cpu_engine_samples_from_the_merged_adapter(tiny_path: Path, tmp_path: Path) -> None:
    from tether.engines.base import SamplingParams
    from tether.engines.transformers_engine import TransformersEngine

    first = save_adapter(tiny_path, tmp_path / "a", 1, r=4, target_modules=["q_proj", "v_proj"])
    engine = TransformersEngine(str(tiny_path), device="cpu", max_batch_size=4)
    try:
        engine.load_adapter(str(first))
        await engine.generate([1, 5, 9, 13], SamplingParams(max_tokens=3, temperature=0))
        assert engine._merged is not None and engine._merged.merged is not None
        engine.load_adapter(str(first), policy_version=2)  # a swap puts the base back first
        assert engine._merged.merged is None
    finally:
        engine.close()
