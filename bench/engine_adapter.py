"""The built-in engine's adapter path on the CPU, in one run: a decode step with PEFT's LoRA layers against
the same adapter folded into the base weights (`tether/engines/merged_lora.py`), and a swap that loads a
new adapter beside the old against one copied into it (`tether/engines/adapter_reload.py`).

    .venv/bin/python -m bench.engine_adapter [--rows 8,24] [--steps 20] [--swaps 4]

SmolLM2-135M with a rank-16 LoRA on the seven Llama projections (random, non-zero weights), fp32, a
120-token context per row; decode steps alternate between the two paths, medians reported. Swaps: the
engine's `load_adapter` for a policy whose adapter is copied in place, against a policy whose next adapter
differs in its configuration (lora_alpha), so that PEFT loads it beside the old one, which is then
deleted, as every swap did before. Both policies stay loaded. Prints a table.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from tether.engines.merged_lora import MergedLoRA
from tether.models.catalog import resolve_model

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def saved_adapter(folder: Path, alpha: int = 32) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m"))
    config = LoraConfig(r=16, lora_alpha=alpha, target_modules=TARGETS, init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(folder)
    return folder


def decode_ms(rows: int, steps: int, adapter: Path) -> tuple[float, float]:
    """Median ms per decode step, PEFT's LoRA layers then the merged adapter."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m"), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter, adapter_name="policy").eval()
    merged = MergedLoRA(model)
    ids = torch.randint(0, 40000, (rows, 120), generator=torch.Generator().manual_seed(0))
    times: dict[bool, list[float]] = {False: [], True: []}
    with torch.inference_mode():
        caches = {}
        for fold in (False, True):
            merged.merge("policy") if fold else merged.restore()
            caches[fold] = model(input_ids=ids, use_cache=True).past_key_values
        for step in range(2 * steps):
            fold = step % 2 == 1
            merged.merge("policy") if fold else merged.restore()
            started = time.perf_counter()
            out = model(input_ids=ids[:, :1], past_key_values=caches[fold], use_cache=True)
            times[fold].append(time.perf_counter() - started)
            caches[fold] = out.past_key_values
    return statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3


def swap_s(swaps: int, adapter: Path, other: Path) -> tuple[float, float]:
    """Median seconds per swap: loaded fresh beside the old (`other` differs in its configuration, so it
    cannot be copied in, and the two alternate), then copied into the loaded one."""
    from tether.engines.transformers_engine import TransformersEngine

    engine = TransformersEngine("smollm2-135m", device="cpu")
    try:
        engine.load_adapter(str(adapter), policy="copied")
        engine.load_adapter(str(other), policy="fresh")
        fresh, copied = [], []
        for index in range(swaps):
            started = time.perf_counter()
            engine.load_adapter(str(adapter if index % 2 == 0 else other), policy="fresh")
            fresh.append(time.perf_counter() - started)
            started = time.perf_counter()
            engine.load_adapter(str(adapter), policy="copied")
            copied.append(time.perf_counter() - started)
        return statistics.median(fresh), statistics.median(copied)
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default="8,24", help="comma-separated batch sizes")
    parser.add_argument("--steps", type=int, default=20, help="decode steps per path and batch size")
    parser.add_argument("--swaps", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="engine-adapter-") as folder:
        adapter = saved_adapter(Path(folder) / "a")
        other = saved_adapter(Path(folder) / "b", alpha=16)
        lines = ["| | PEFT's LoRA layers | folded / copied | ratio |", "|---|---|---|---|"]
        for rows in (int(r) for r in args.rows.split(",")):
            peft_ms, merged_ms = decode_ms(rows, args.steps, adapter)
            ratio = merged_ms / peft_ms
            lines.append(
                f"| decode step, {rows} rows (ms) | {peft_ms:.1f} | {merged_ms:.1f} | {ratio:.2f}x |"
            )
        fresh, copied = swap_s(args.swaps, adapter, other)
        lines.append(f"| swap (s) | {fresh:.3f} | {copied:.3f} | {copied / fresh:.2f}x |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
