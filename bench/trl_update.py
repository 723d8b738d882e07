"""Run inside bench/.venv-trl: TRL's SFTTrainer update throughput on the batch of bench/trainer_bench.py.

    python trl_update.py MODEL_DIR STEPS SAMPLES PROMPT RESPONSE

Same model folder, same LoRA (r=16, alpha=32, the Llama projection modules), fp32 on CPU, one optimizer
step per batch of SAMPLES sequences. Prints one JSON line: {"tokens_per_s": ..., "trl": version}.
(GRPO's update cannot be timed apart from its generation in TRL; SFT's step is the same forward, backward
and optimizer step over the same tokens, so it is the fair TRL counterpart of a policy update.)
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import sys
import tempfile
import time

import trl
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, TrainerCallback
from trl import SFTConfig, SFTTrainer


class StepTimer(TrainerCallback):
    def __init__(self) -> None:
        self.began = 0.0
        self.seconds: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
        self.began = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
        self.seconds.append(time.perf_counter() - self.began)


def main() -> None:
    folder, steps, samples, prompt, response = sys.argv[1], *map(int, sys.argv[2:6])
    model = AutoModelForCausalLM.from_pretrained(folder)
    rng = random.Random(0)
    top = min(model.config.vocab_size, 32000) - 1
    rows = [{"input_ids": [rng.randint(3, top) for _ in range(prompt + response)]} for _ in range(samples)]
    config = SFTConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"),
        max_steps=steps + 1,
        per_device_train_batch_size=samples,
        learning_rate=1e-4,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        # TRL's defaults turn on bf16 autocast (emulated on most CPUs, many times slower) and gradient
        # checkpointing; our PolicyTrainer runs fp32 without checkpointing on such a CPU, so match it.
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        dataset_kwargs={"skip_prepare_dataset": True},
        remove_unused_columns=False,
    )
    lora = LoraConfig(
        r=16,
        lora_alpha=32,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        task_type="CAUSAL_LM",
    )
    timer = StepTimer()
    trainer = SFTTrainer(
        model=model, args=config, train_dataset=Dataset.from_list(rows * (steps + 1)), peft_config=lora
    )
    trainer.add_callback(timer)
    trainer.train()
    shutil.rmtree(config.output_dir, ignore_errors=True)
    step_s = statistics.median(timer.seconds[1:] or timer.seconds)
    print(f"step seconds: {[round(x, 3) for x in timer.seconds]}", file=sys.stderr)
    print(json.dumps({"tokens_per_s": samples * (prompt + response) / step_s, "trl": trl.__version__}))


if __name__ == "__main__":
    main()
