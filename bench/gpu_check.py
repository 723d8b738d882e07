"""The built-in engine and the learner on a GPU, with random-weight models of real shapes.

    python -m bench.gpu_check --tokenizer DIR [--out DIR] [--shapes smollm2-135m,qwen2.5-0.5b,qwen2.5-1.5b]
    bash scripts/gpu_check.sh        # the same, with the SmolLM2 tokenizer written first where it can be

No network: every model is built here from its configuration (SmolLM2-135M's, and Qwen2.5-0.5B's and
1.5B's with the SmolLM2 tokenizer's vocabulary) with random weights. Per shape, with prefix sharing on
and off (the engine's prefix cache, `prefix_cache_mb`, and the learner's packed prefixes,
`share_prefixes`):
- generation tokens/s at 1, 24 and 64 concurrent calls, in groups of 8 calls that share a prompt (the
  shape of a GRPO step), at temperature 1;
- one update (LoRA, GRPO advantages) of 8 groups of 8 samples: forward tokens, seconds, tokens/s;
- peak GPU memory of each, and the precision (the engine's and learner's defaults: bf16 autocast over
  fp32 weights where the card supports it).
`--device cpu --quick` runs the same code with tiny sizes on a CPU (a smoke run, not a figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": {
        "kind": "llama",
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "tie_word_embeddings": True,
        "rope_theta": 100000.0,
    },
    "qwen2.5-0.5b": {
        "kind": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
        "rope_theta": 1000000.0,
    },
    "qwen2.5-1.5b": {
        "kind": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
        "rope_theta": 1000000.0,
    },
}
QUICK_SHAPE = {
    "kind": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}
GROUP = 8


def build_model(shape: dict[str, Any], tokenizer_dir: Path, out: Path) -> Path:
    """A random-weight model of `shape` with the tokenizer in `tokenizer_dir`, saved to `out`."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    options = {k: v for k, v in shape.items() if k != "kind"}
    eos = tokenizer.eos_token_id
    config_class, model_class = (
        (Qwen2Config, Qwen2ForCausalLM) if shape["kind"] == "qwen2" else (LlamaConfig, LlamaForCausalLM)
    )
    config = config_class(
        vocab_size=len(tokenizer),
        max_position_embeddings=8192,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos,
        **options,
    )
    torch.manual_seed(0)
    model_class(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def prompts(groups: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(10, vocab) for _ in range(length)] for _ in range(groups)]


async def generation_rate(engine: Any, calls: int, prompt_len: int, max_tokens: int) -> dict[str, float]:
    """Tokens/s of `calls` concurrent generations, GROUP calls per prompt."""
    from tether.engines.base import SamplingParams

    groups = prompts(max(1, calls // GROUP), prompt_len, engine.vocab_size, seed=calls)
    params = [SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=i) for i in range(calls)]
    started = time.perf_counter()
    done = await asyncio.gather(
        *(engine.generate(groups[i % len(groups)], params[i], owner=f"rollout-{i}") for i in range(calls))
    )
    seconds = time.perf_counter() - started
    tokens = sum(len(generation.token_ids) for generation, _ in done)
    return {"calls": calls, "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def engine_figures(path: Path, device: str, share: bool, quick: bool) -> dict[str, Any]:
    import torch

    from tether.engines.transformers_engine import TransformersEngine

    engine = TransformersEngine(
        str(path), device=device, max_batch_size=64, prefix_cache_mb=1024 if share else 0
    )
    prompt_len, max_tokens = (24, 8) if quick else (300, 128)
    try:
        asyncio.run(generation_rate(engine, 1, prompt_len, 4))  # warm-up: kernels, allocator
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        rates = [asyncio.run(generation_rate(engine, n, prompt_len, max_tokens)) for n in (1, 24, 64)]
        peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0.0
        stats = engine.prefill_stats() if hasattr(engine, "prefill_stats") else {}
        return {"rates": rates, "peak_mib": peak, "autocast_bf16": engine.autocast, "prefill": stats}
    finally:
        engine.close()


def update_figures(path: Path, device: str, share: bool, quick: bool) -> dict[str, Any]:
    import torch

    from tether.adapters.transitions import Transition
    from tether.algorithms import assign_advantages
    from tether.learner import PolicyTrainer, TrainConfig

    trainer = PolicyTrainer(TrainConfig(model=str(path), device=device, share_prefixes=share))
    prompt_len, response_len = (24, 8) if quick else (300, 128)
    vocab = trainer.causal_lm.config.vocab_size
    rng = random.Random(1)
    batch = []
    for g, prompt in enumerate(prompts(GROUP, prompt_len, vocab, seed=7)):
        for s in range(GROUP):
            response = [
                rng.randrange(10, vocab) for _ in range(rng.randrange(response_len // 2, response_len))
            ]
            batch.append(
                Transition(
                    rollout_id=f"r{g}-{s}",
                    task_id=f"t{g}",
                    group_id=f"g{g}",
                    attempt=None,
                    call_index=0,
                    agent=None,
                    policy_version=0,
                    prompt_ids=prompt,
                    response_ids=response,
                    response_logprobs=[-2.0] * len(response),
                    loss_mask=[1] * len(response),
                    reward=float(s % 2),
                )
            )
    samples = assign_advantages(batch)
    trainer.step(samples)  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    metrics = trainer.step(samples)
    if device == "cuda":
        torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0.0
    return {
        "forward_tokens": metrics.forward_tokens,
        "trained_tokens": metrics.tokens,
        "seconds": metrics.seconds,
        "forward_tokens_per_s": metrics.tokens_per_s,
        "trained_tokens_per_s": metrics.tokens / metrics.seconds,
        "peak_mib": peak,
        "bf16": trainer.bf16,
    }


def table(results: dict[str, Any]) -> str:
    lines = [
        "| shape | prefixes | gen tok/s @1 | @24 | @64 | engine peak MiB | update fwd tokens | update s "
        "| trained tok/s | learner peak MiB | bf16 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape, modes in results.items():
        for mode, row in modes.items():
            rates = [f"{r['tokens_per_s']:.0f}" for r in row["engine"]["rates"]]
            update = row["update"]
            lines.append(
                f"| {shape} | {mode} | {' | '.join(rates)} | {row['engine']['peak_mib']:.0f} "
                f"| {update['forward_tokens']} | {update['seconds']:.2f} "
                f"| {update['trained_tokens_per_s']:.0f} "
                f"| {update['peak_mib']:.0f} | {update['bf16']} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokenizer", type=Path, required=True, help="a folder with the SmolLM2 tokenizer")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the code path")
    parser.add_argument("--out", type=Path, help="a folder for gpu_check.json and gpu_check.md")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device is visible to torch; on a CPU use --device cpu --quick")
    names = [n.strip() for n in args.shapes.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        parser.error(f"unknown shapes {unknown}; choose from {', '.join(SHAPES)}")
    card = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as folder:
        for name in names:
            started = time.monotonic()
            path = build_model(
                QUICK_SHAPE if args.quick else SHAPES[name], args.tokenizer, Path(folder) / name
            )
            for share in (False, True):
                mode = "shared" if share else "unshared"
                results.setdefault(name, {})[mode] = {
                    "engine": engine_figures(path, args.device, share, args.quick),
                    "update": update_figures(path, args.device, share, args.quick),
                }
            print(
                f"gpu_check: {name} done in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True
            )
    report = f"card: {card}, torch {torch.__version__}\n\n{table(results)}"
    print(report)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_check.json").write_text(json.dumps({"card": card, "results": results}, indent=2))
        (args.out / "gpu_check.md").write_text(report + "\n")


if __name__ == "__main__":
    main()
