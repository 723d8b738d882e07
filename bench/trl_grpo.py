"""Run inside bench/.venv-trl: TRL's GRPOTrainer on the single-turn arithmetic task of bench/efficacy.py.

    python trl_grpo.py --model DIR --train FILE --val FILE --points FILE [options]

The prompt (system + user message, conversational, so the model's chat template renders it), the
completion length, the temperature and the answer parsing come from bench/efficacy_agent.py, the reward
from the same `file.py:function` that Tether's run gets. Held-out accuracy is measured greedily, one
batched `generate` over the val prompts, at step 0 (in `on_train_begin`) and every --val-every steps
(in `on_step_end`), outside the clock. The clock starts after the step-0 evaluation: it covers TRL's
generation, reward, loss, backward and optimizer step, and the Trainer's own work between steps;
not the model load, the trainer's construction or the evaluations. Training stops after the first
evaluation whose clock is past --budget (or at --max-steps).

Each evaluation is appended to --points as one JSON line; the last line of stdout is one JSON object:
{"trl": version, "torch": version, "steps": N, "load_seconds": S, "points": [...]}.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
import trl
from datasets import Dataset
from efficacy_agent import MAX_TOKENS, TEMPERATURE, final_answer, messages  # bench/ is sys.path[0]
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

Reward = Callable[[dict, str | None], float]
LLAMA_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="local HF model folder")
    parser.add_argument("--train", required=True, type=Path)
    parser.add_argument("--val", required=True, type=Path)
    parser.add_argument("--points", required=True, type=Path, help="JSON lines, one per evaluation")
    parser.add_argument("--reward", default="examples/arith_agent/reward.py:correct")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--tasks-per-step", type=int, default=3)
    parser.add_argument("--val-every", type=int, default=2)
    parser.add_argument("--budget", type=float, default=600.0, help="training seconds")
    parser.add_argument("--max-steps", type=int, default=0, help="0: no limit but the budget")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--lora-alpha", type=int, default=32)
    parser.add_argument("--clip-low", type=float, default=0.2)
    parser.add_argument("--clip-high", type=float, default=0.28)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument(
        "--bf16",
        choices=("auto", "on", "off"),
        default="auto",
        help="bf16 autocast; auto: Tether's default (CUDA with bf16 only)",
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def bf16_by_default() -> bool:
    """Tether's rule (tether.learner.policy.bf16_by_default) for the device TRL trains on: bf16 on a CUDA
    device that supports it, fp32 on CPUs."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def load_reward(spec: str) -> Reward:
    path, _, name = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location("efficacy_reward", path)
    if module_spec is None or module_spec.loader is None:
        raise SystemExit(f"cannot load the reward {spec!r}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def read_tasks(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def prompt_ids(tokenizer: Any, question: str) -> list[int]:
    """The ids Tether's engine feeds the model for this question: the chat template, generation prompt."""
    ids = tokenizer.apply_chat_template(messages(question), add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]


class Evaluator:
    """Greedy held-out accuracy: every val prompt in one left-padded `generate` batch."""

    def __init__(self, tokenizer: Any, tasks: list[dict], reward: Reward) -> None:
        self.tasks = tasks
        self.reward = reward
        self.tokenizer = tokenizer
        self.prompts = [prompt_ids(tokenizer, task["question"]) for task in tasks]
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = tokenizer.eos_token_id
        self.config = GenerationConfig(
            max_new_tokens=MAX_TOKENS, do_sample=False, pad_token_id=self.pad, eos_token_id=eos
        )

    def rewards(self, model: Any) -> list[float]:
        device = next(model.parameters()).device
        width = max(len(p) for p in self.prompts)
        ids = torch.tensor([[self.pad] * (width - len(p)) + p for p in self.prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in self.prompts], device=device)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=self.config)
        if was_training:
            model.train()
        texts = self.tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
        return [self.reward(task, final_answer(text)) for task, text in zip(self.tasks, texts, strict=True)]


class TrainRewards:
    """The reward function GRPOTrainer calls; remembers the rewards of each batch."""

    __name__ = "correct"

    def __init__(self, reward: Reward) -> None:
        self.reward = reward
        self.seen: list[float] = []

    def __call__(
        self, prompts: list, completions: list, answer: list, question: list, **_: Any
    ) -> list[float]:
        rewards = [
            self.reward(
                {"question": q, "reference": {"answer": a}}, final_answer(c[0]["content"] if c else "")
            )
            for c, a, q in zip(completions, answer, question, strict=True)
        ]
        self.seen.extend(rewards)
        return rewards

    def drain(self) -> float | None:
        mean = statistics.fmean(self.seen) if self.seen else None
        self.seen = []
        return mean


class Clock(TrainerCallback):
    """Evaluates at step 0 and every `every` steps off the clock; stops after the first one past budget."""

    def __init__(self, args: argparse.Namespace, evaluator: Evaluator, train_rewards: TrainRewards) -> None:
        self.args = args
        self.evaluator = evaluator
        self.train_rewards = train_rewards
        self.model: Any = None
        self.began = 0.0
        self.excluded = 0.0
        self.points: list[dict] = []

    def _evaluate(self, step: int, clock: float) -> None:
        started = time.perf_counter()
        rewards = self.evaluator.rewards(self.model)
        seconds = time.perf_counter() - started
        point = {
            "step": step,
            "samples": step * self.args.group_size * self.args.tasks_per_step,
            "clock_s": clock,
            "accuracy": statistics.fmean(rewards),
            "rewards": rewards,
            "eval_seconds": seconds,
            "train_reward_mean": self.train_rewards.drain(),
        }
        self.points.append(point)
        with self.args.points.open("a") as handle:
            handle.write(json.dumps(point) + "\n")
        self.excluded += time.perf_counter() - started

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
        self._evaluate(0, 0.0)
        self.began = time.perf_counter()
        self.excluded = 0.0

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
        step = state.global_step
        at_limit = bool(self.args.max_steps) and step >= self.args.max_steps
        if step % self.args.val_every and not at_limit:
            return control
        clock = time.perf_counter() - self.began - self.excluded
        self._evaluate(step, clock)
        if clock >= self.args.budget or at_limit:
            control.should_training_stop = True
        return control


def grpo_config(args: argparse.Namespace, output_dir: str) -> GRPOConfig:
    batch = args.group_size * args.tasks_per_step
    return GRPOConfig(
        output_dir=output_dir,
        # One generation batch (tasks_per_step prompts x group_size completions) is one optimizer step.
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=args.group_size,
        num_iterations=1,
        max_steps=args.max_steps or 1_000_000,  # the callback stops it; the learning rate is constant
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        max_grad_norm=args.grad_clip,
        beta=0.0,
        epsilon=args.clip_low,
        epsilon_high=args.clip_high,
        loss_type="grpo",  # token mean within each completion, mean over completions (Tether's "rollout")
        scale_rewards="group",
        temperature=TEMPERATURE,
        top_p=1.0,
        top_k=0,
        max_completion_length=MAX_TOKENS,
        # TRL's defaults turn on bf16 autocast (emulated on most CPUs, many times slower) and gradient
        # checkpointing; Tether's learner uses bf16 only on CUDA (its engine's precision), never checkpoints.
        bf16=args.bf16 == "on" or (args.bf16 == "auto" and bf16_by_default()),
        fp16=False,
        gradient_checkpointing=False,
        use_cpu=not torch.cuda.is_available(),
        seed=args.seed,
        data_seed=args.seed,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        remove_unused_columns=False,
    )


def main() -> None:
    args = parse_args()
    loading = time.perf_counter()
    reward = load_reward(args.reward)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    train = read_tasks(args.train)
    rows = [
        {"prompt": messages(t["question"]), "answer": t["reference"]["answer"], "question": t["question"]}
        for t in train
    ]
    lora = LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=0.0,
        target_modules=LLAMA_TARGET_MODULES,
        task_type="CAUSAL_LM",
    )
    train_rewards = TrainRewards(reward)
    clock = Clock(args, Evaluator(tokenizer, read_tasks(args.val), reward), train_rewards)
    output_dir = tempfile.mkdtemp(prefix="trl-efficacy-")
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=train_rewards,
        args=grpo_config(args, output_dir),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[clock],
    )
    clock.model = trainer.model
    load_seconds = time.perf_counter() - loading
    trainer.train()
    result = {
        "trl": trl.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "steps": trainer.state.global_step,
        "bf16": trainer.args.bf16,
        "load_seconds": load_seconds,
        "points": clock.points,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
