"""Several policies in one batch: generation tokens/s of the built-in engine at 24 concurrent calls when
they sample from two LoRA adapters (12 calls each, every forward pass tagging each row with its adapter)
against all 24 from one adapter, on SmolLM2-135M.

    .venv/bin/python -m bench.multi_adapter [--rounds 4] [--tokens 64] [--concurrent 24]

Both adapters are rank 16 on every attention and MLP projection, with random (non-zero) weights, so every
row really runs its adapter. The rounds alternate one adapter / two adapters in one engine, so load on
the machine falls on both alike; the first round of each is a warm-up and not counted. Generation is
greedy up to `max_tokens` (a call that ends sooner counts the tokens it made). Reported: tokens/s of each
round, the medians, and two / one (the target: at least 0.8).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

MODEL = "smollm2-135m"
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_adapter(folder: Path, seed: int) -> Path:
    """A rank-16 LoRA adapter of SmolLM2 with random A and B (PEFT's default B is zero: a no-op)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tether.models.catalog import resolve_model

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(resolve_model(MODEL))
    config = LoraConfig(r=16, lora_alpha=32, target_modules=PROJECTIONS, init_lora_weights=False)
    model = get_peft_model(base, config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.mul_(0.05)  # small enough that the text stays language-like
    model.save_pretrained(folder)
    return folder


async def one_round(engine: Any, prompts: list[list[int]], policies: list[str], tokens: int) -> float:
    """Tokens/s of all the calls at once, one per prompt, call i sampling from policies[i]."""
    from tether.engines import SamplingParams

    params = SamplingParams(max_tokens=tokens, temperature=0)
    started = time.perf_counter()
    results = await asyncio.gather(
        *(
            engine.generate(prompt, params, owner=f"call{i}", policy=policy)
            for i, (prompt, policy) in enumerate(zip(prompts, policies, strict=True))
        )
    )
    elapsed = time.perf_counter() - started
    return sum(len(generation.token_ids) for generation, _ in results) / elapsed


async def measure(rounds: int, tokens: int, concurrent: int) -> dict[str, Any]:
    from tether.engines.transformers_engine import TransformersEngine

    with tempfile.TemporaryDirectory() as scratch:
        first = make_adapter(Path(scratch) / "a", seed=1)
        second = make_adapter(Path(scratch) / "b", seed=2)
        engine = TransformersEngine(MODEL, max_batch_size=concurrent)
        device = str(engine.device)
        try:
            engine.load_adapter(str(first), policy="writer")
            engine.load_adapter(str(second), policy="rewriter")
            prompts = [
                engine.chat_prompt_ids([{"role": "user", "content": f"Write a SQL query for question {i}."}])
                for i in range(concurrent)
            ]
            one = ["writer"] * concurrent
            two = ["writer" if i % 2 else "rewriter" for i in range(concurrent)]
            series: dict[str, list[float]] = {"one_adapter": [], "two_adapters": []}
            for index in range(rounds + 1):
                for name, policies in (("one_adapter", one), ("two_adapters", two)):
                    rate = await one_round(engine, prompts, policies, tokens)
                    if index:  # the first round of each is the warm-up
                        series[name].append(rate)
                    print(f"round {index} {name}: {rate:.1f} tokens/s", flush=True)
        finally:
            engine.close()
    medians = {name: statistics.median(values) for name, values in series.items()}
    return {
        "device": device,
        "concurrent": concurrent,
        "tokens_per_call": tokens,
        "tokens_per_s": series,
        "median_tokens_per_s": medians,
        "two_over_one": medians["two_adapters"] / medians["one_adapter"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4, help="measured rounds of each (after a warm-up)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens each call generates")
    parser.add_argument("--concurrent", type=int, default=24, help="calls at once (the engine's batch)")
    args = parser.parse_args()
    result = asyncio.run(measure(args.rounds, args.tokens, args.concurrent))
    print(json.dumps(result, indent=2))
    print(
        f"two adapters / one: {result['two_over_one']:.3f} "
        f"({result['median_tokens_per_s']['two_adapters']:.1f} against "
        f"{result['median_tokens_per_s']['one_adapter']:.1f} tokens/s, medians of {args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()
