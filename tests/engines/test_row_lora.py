"""Each row of one forward pass through its own LoRA adapter: the same logits as PEFT's mixed batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tether.engines.row_lora import RowLoRA
from tether.engines.transformers_engine import BASE_ADAPTER


def save_adapter(tiny_path: Path, out: Path, seed: int, **options: object) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(tiny_path)
    config = LoraConfig(init_lora_weights=False, **options)  # type: ignore[arg-type]
    get_peft_model(base, config).save_pretrained(out)
    return out


def peft_with(tiny_path: Path, adapters: dict[str, Path]):  # noqa: ANN201
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    names = list(adapters)
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_path), adapters[names[0]], adapter_name=names[0]
    )
    for name in names[1:]:
        model.load_adapter(adapters[name], adapter_name=name)
    return model.eval()


def two_adapters(tiny_path: Path, tmp_path: Path) -> dict[str, Path]:
    """Two adapters of different ranks on partly different layers."""
    return {
        "writer": save_adapter(
            tiny_path, tmp_path / "w", 1, r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]
        ),
        "rewriter": save_adapter(
            tiny_path, tmp_path / "r", 2, r=8, lora_alpha=8, target_modules=["v_proj", "o_proj", "up_proj"]
        ),
    }


def test_rows_get_their_own_adapter_as_in_peft_mixed_batch(tiny_path: Path, tmp_path: Path) -> None:
    """Two adapters of different ranks on different layers, and base-model rows, in one batch."""
    adapters = two_adapters(tiny_path, tmp_path)
    model = peft_with(tiny_path, adapters)
    row_lora = RowLoRA.build(model, list(adapters))
    assert row_lora is not None
    names = ["writer", BASE_ADAPTER, "rewriter", "rewriter", "writer"]
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (len(names), 7))
    with torch.inference_mode():
        expected = model(input_ids=ids, adapter_names=names).logits
        with row_lora.rows(names, ids.device):
            got = model(input_ids=ids).logits
        with model.disable_adapter():
            base = model(input_ids=ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(got[0], base[0], atol=1e-3)  # the adapters really change the rows
    torch.testing.assert_close(got[1], base[1], rtol=1e-5, atol=1e-5)
    model.set_adapter("writer")
    with torch.inference_mode():
        active = model(input_ids=ids).logits  # outside `rows` the hooks add nothing
        with row_lora.rows(["writer"] * len(names), ids.device):
            all_writer = model(input_ids=ids).logits
    torch.testing.assert_close(active[0], expected[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(all_writer, active, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", [{"use_dora": True}, {"lora_bias": True}])
def test_other_lora_variants_stay_on_peft(tiny_path: Path, tmp_path: Path, variant: dict) -> None:
    plain = save_adapter(tiny_path, tmp_path / "plain", 1, r=4, target_modules=["q_proj"])
    other = save_adapter(tiny_path, tmp_path / "other", 2, r=4, target_modules=["q_proj"], **variant)
    assert RowLoRA.build(peft_with(tiny_path, {"a": plain, "b": other}), ["a", "b"]) is None
    assert RowLoRA.build(peft_with(tiny_path, {"a": plain}), ["a"]) is not None
