"""Trainer update throughput (tokens/s) on one tiny model and one batch: our PolicyTrainer vs TRL.

The batch: SAMPLES sequences of PROMPT prompt + RESPONSE response tokens, LoRA r=16 on the same modules,
fp32 on CPU, one optimizer step per batch. Throughput = forward tokens (prompt + response) per second of
update, after one warm-up step. TRL runs bench/trl_update.py in bench/.venv-trl on the same model folder.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
from pathlib import Path

SAMPLES, PROMPT, RESPONSE = 16, 128, 64


def batch_ids(vocab: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    top = min(vocab, 32000) - 1
    return [
        ([rng.randint(3, top) for _ in range(PROMPT)], [rng.randint(3, top) for _ in range(RESPONSE)])
        for _ in range(SAMPLES)
    ]


def model_folder(model: str) -> Path:
    from tether.models.catalog import resolve_model

    return resolve_model(model)


def ours_tokens_per_s(model: str, steps: int) -> float:
    from tether.adapters.transitions import Transition
    from tether.algorithms.advantages import Sample
    from tether.learner.policy import PolicyTrainer, TrainConfig

    folder = model_folder(model)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    trainer = PolicyTrainer(
        TrainConfig(model=str(folder), bf16=False, micro_batch_tokens=SAMPLES * (PROMPT + RESPONSE))
    )
    samples = [
        Sample(
            Transition(f"r{i}", "t", "g", 1, 0, None, 0, prompt, response, [-1.0] * RESPONSE, [1] * RESPONSE),
            advantage=1.0 if i % 2 else -1.0,
        )
        for i, (prompt, response) in enumerate(batch_ids(vocab))
    ]
    trainer.step(samples)  # warm-up
    return statistics.median(trainer.step(samples).tokens_per_s for _ in range(steps))


def trl_tokens_per_s(python: Path, model: str, steps: int) -> tuple[float, str]:
    """(tokens/s, trl version) from the TRL venv; raises RuntimeError with the script's last words."""
    folder = model_folder(model)
    script = Path(__file__).with_name("trl_update.py")
    args = [str(python), str(script), str(folder), str(steps), str(SAMPLES), str(PROMPT), str(RESPONSE)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError((done.stderr or done.stdout).strip().splitlines()[-1][-200:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["tokens_per_s"]), str(result["trl"])
