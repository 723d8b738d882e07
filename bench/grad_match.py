"""Do Tether's GRPO learner and TRL's GRPOTrainer make the same update from the same batch?

    nice -n 19 .venv/bin/python -m bench.grad_match [--out DIR] [--max-tasks 12] [--seed 0] [--threads 1]

One fixed batch, the one bench/efficacy.py's first step would see: the arithmetic tasks of
examples/arith_agent (`tasks.py --train 200 --val 32 --seed 0`), each asked as bench/efficacy_agent.py's
`messages`, rendered to token ids by Tether's built-in engine (`TransformersEngine.chat_prompt_ids`, what
the gateway does for a chat call), G = 8 completions of each sampled once by that engine from the base
SmolLM2-135M-Instruct at `efficacy_agent.TEMPERATURE` (top-p 1, no top-k, MAX_TOKENS, seeded), with the
logprobs the engine records, and rewards from examples/arith_agent/reward.py:correct on `final_answer` of
the text. Training tasks are tried in file order until the batch holds two groups with mixed rewards and
one group whose rewards are all equal (or --max-tasks are tried).

From the same LoRA weights (Tether's PolicyTrainer initialises them, seed 0; TRL's copy is overwritten with
that state dict), each side takes ONE optimizer step on that batch through its own code:

- Tether: the transitions as `tether.adapters.build` makes them (response = the engine's tokens, EOS
  included, loss mask 1, the engine's sampler and logprobs), `assign_advantages(method="grpo")` as the
  training loop calls it, then `PolicyTrainer.step` (TrainConfig as `tether train` builds it: lr 1e-4,
  LoRA r16/alpha32, clip 0.2/0.28, tis_cap 2, loss_agg "rollout", grad clip 1, fp32 on a CPU). The
  gradient is read inside `_clip_gradients` (before and after clipping), the delta from the trainable
  weights around the step.
- TRL: bench/.venv-trl (bench/refenv.py), `GRPOTrainer` built as bench/trl_grpo.py builds it (its
  `grpo_config`, LoRA config, reward wrapper and messages), max_steps 1, `trainer.train()`: TRL's own
  prompt tokenization, reward call, advantages, shuffling, `_compute_loss`, Trainer's gradient clipping and
  AdamW step. Only the generation is replaced: `_generate_single_turn` hands back the batch's completion
  ids for the prompt it is given (the decoded prompt names the question). Its prompt ids, advantages,
  loss, gradients (inside `_clip_grad_norm`) and the delta are recorded.

Two weight states: "init" (LoRA as initialised, B = 0, so only the B matrices get a gradient; Tether's
behaviour logprobs are the engine's own records) and "perturbed" (every lora_B drawn from N(0, 0.01^2),
the same on both sides, so A gets a gradient too; Tether's behaviour logprobs are rescored by the learner
at those weights, as an engine serving them would have recorded them). Per state, also "Tether, TRL's
weighting": Tether's PolicyTrainer.step on Samples carrying TRL's advantages (sample std + 1e-4) with the
zero-variance group kept at advantage 0 and weight 1, which isolates the aggregation and advantage
differences from everything else, and, in "init", a control: that weighting scored at temperature 1
instead (behaviour rescored there too), which shows how far the gradient moves when the temperature
scaling of the logits is not matched. After the "init" step, Tether's adapter is saved and loaded into
the engine (the swap of the training loop), and one group sampled from it is rescored by the learner:
the sampler after a swap must be the policy just trained.

Output on stdout: the prompt-id checks, per-completion rewards and advantages, and per state the losses,
grad norms (before clipping), cosine of the flattened LoRA gradients, per-module and per-layer norm
ratios, and the parameter deltas of one step. --out (default: a new temporary folder) keeps the batch
(batch.json), the initial states (states.pt), TRL's tensors (trl.pt) and report.json. Measured: 435 s
under `nice -n 19` with --threads 1 on 2 cores that a training run kept busy (sampling 83 s, Tether's
five steps 217 s, TRL's two 105 s); the batch and every number but the timings were the same run to run.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TASKS_SCRIPT = ROOT / "examples" / "arith_agent" / "tasks.py"
REWARD_FILE = ROOT / "examples" / "arith_agent" / "reward.py"
REWARD = f"{REWARD_FILE}:correct"
MODEL = "smollm2-135m"
GROUP_SIZE = 8
MIXED_GROUPS = 2
EQUAL_GROUPS = 1
LR = 1e-4
PERTURB_STD = 0.01
SEED_BASE = 1000  # the engine seed of completion k of tried task i is SEED_BASE * (i + 1) + k
CASES = ("init", "perturbed")
LORA_NAME = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+_proj)\.(lora_[AB])\.")

Tensors = dict[str, Any]  # parameter name -> torch.Tensor (torch is imported lazily: two interpreters)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.grad_match",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: a new temp folder)")
    parser.add_argument("--max-tasks", type=int, default=12, help="training tasks tried to fill the batch")
    parser.add_argument("--seed", type=int, default=0, help="task split and learner seed (as efficacy)")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per process (1: kind to a busy machine)"
    )
    parser.add_argument("--trl-side", type=Path, default=None, help=argparse.SUPPRESS)  # internal
    return parser.parse_args(argv)


# -- shared helpers (both interpreters) -----------------------------------------------------------------


def named_grads(model: Any) -> Tensors:
    import torch

    return {
        n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
        for n, p in model.named_parameters()
        if p.requires_grad
    }


def trainable_copy(model: Any) -> Tensors:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable(model: Any, state: Tensors) -> None:
    import torch

    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if set(params) != set(state):
        missing, extra = sorted(set(params) - set(state))[:3], sorted(set(state) - set(params))[:3]
        raise SystemExit(f"LoRA parameter names differ: missing {missing}, unexpected {extra}")
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(state[name])


# -- stage 1 (Tether's venv): the batch ------------------------------------------------------------------


def make_tasks(folder: Path, seed: int) -> list[dict[str, Any]]:
    args = [sys.executable, str(TASKS_SCRIPT), "--out-dir", str(folder), "--train", "200", "--val", "32"]
    subprocess.run([*args, "--seed", str(seed)], check=True, capture_output=True, timeout=120)
    lines = (folder / "train.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def load_reward() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("grad_match_reward", REWARD_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.correct


def sample_group(engine: Any, prompt: list[int], seeds: list[int]) -> list[Any]:
    """G completions of one prompt, at once (so they share a batch, as a step's agents do)."""
    import asyncio

    from bench.efficacy_agent import MAX_TOKENS, TEMPERATURE
    from tether.engines.base import SamplingParams

    async def run() -> list[Any]:
        calls = [
            engine.generate(
                prompt,
                SamplingParams(max_tokens=MAX_TOKENS, temperature=TEMPERATURE, top_p=1.0, seed=seed),
                owner=f"rollout-{seed}",
            )
            for seed in seeds
        ]
        return [generation for generation, _ in await asyncio.gather(*calls)]

    return asyncio.run(run())


def prompt_checks(engine: Any, question: str) -> dict[str, Any]:
    """The engine's prompt ids against the HF tokenizer's template (add_generation_prompt=True)."""
    from bench.efficacy_agent import messages
    from tether.models.chat_template import ChatTemplate

    convo = messages(question)
    engine_ids = engine.chat_prompt_ids(convo)
    rendered = engine.tokenizer.apply_chat_template(convo, add_generation_prompt=True, tokenize=True)
    hf_ids = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
    text = engine.tokenizer.apply_chat_template(convo, add_generation_prompt=True, tokenize=False)
    return {
        "engine_ids": engine_ids,
        "hf_template_equal": [int(i) for i in hf_ids] == engine_ids,
        "chat_template_equal": ChatTemplate(engine.tokenizer).prompt_ids(convo) == engine_ids,
        "text": text,
    }


def build_batch(engine: Any, tasks: list[dict[str, Any]], max_tasks: int) -> dict[str, Any]:
    from bench.efficacy_agent import TEMPERATURE, final_answer

    reward = load_reward()
    mixed: list[dict[str, Any]] = []
    equal: list[dict[str, Any]] = []
    tried = 0
    for index, task in enumerate(tasks[:max_tasks]):
        if len(mixed) >= MIXED_GROUPS and len(equal) >= EQUAL_GROUPS:
            break
        tried += 1
        check = prompt_checks(engine, task["question"])
        seeds = [SEED_BASE * (index + 1) + k for k in range(GROUP_SIZE)]
        completions = []
        for seed, gen in zip(seeds, sample_group(engine, check["engine_ids"], seeds), strict=True):
            answer = final_answer(gen.text)
            completions.append(
                {
                    "seed": seed,
                    "token_ids": list(gen.token_ids),
                    "logprobs": list(gen.logprobs),
                    "text": gen.text,
                    "finish_reason": gen.finish_reason,
                    "answer": answer,
                    "reward": float(reward(task, answer)),
                }
            )
        rewards = [c["reward"] for c in completions]
        group = {"task": task, "prompt": check, "completions": completions}
        kind = "equal" if max(rewards) == min(rewards) else "mixed"
        print(f"grad_match: task {task['id']} rewards {rewards} ({kind})", file=sys.stderr, flush=True)
        (equal if kind == "equal" else mixed).append(group)
    groups = mixed[:MIXED_GROUPS] + equal[:EQUAL_GROUPS]
    if len(groups) < 2:
        raise SystemExit(f"grad_match: {tried} tasks gave no usable batch: {len(mixed)} mixed groups")
    return {"temperature": TEMPERATURE, "tasks_tried": tried, "groups": groups}


# -- stage 2 (Tether's venv): Tether's learner -----------------------------------------------------------


def transitions_of(
    batch: dict[str, Any], behaviour: list[list[float]] | None = None, temperature: float | None = None
) -> list[Any]:
    """The batch as `tether.adapters.build` turns recorded calls into transitions (one call a rollout);
    `temperature` overrides the sampler's (the control of `run_tether`)."""
    from tether.adapters.transitions import Transition
    from tether.sampling import Sampler

    sampled_at = batch["temperature"] if temperature is None else temperature
    sampler = Sampler(temperature=sampled_at, top_p=1.0, top_k=0)
    out: list[Any] = []
    for g, group in enumerate(batch["groups"]):
        for k, c in enumerate(group["completions"]):
            n = len(c["token_ids"])
            logprobs = behaviour[len(out)] if behaviour is not None else c["logprobs"]
            out.append(
                Transition(
                    rollout_id=f"g{g}-r{k}",
                    task_id=group["task"]["id"],
                    group_id=f"step0.{group['task']['id']}",
                    attempt=0,
                    call_index=0,
                    agent=None,
                    policy_version=0,
                    prompt_ids=list(group["prompt"]["engine_ids"]),
                    response_ids=list(c["token_ids"]),
                    response_logprobs=list(logprobs),
                    loss_mask=[1] * n,
                    reward=c["reward"],
                    span_ids=[f"span-g{g}-r{k}"],
                    sampler=sampler,
                    response_versions=[0] * n,
                )
            )
    return out


def trl_style_advantages(batch: dict[str, Any]) -> list[float]:
    """What TRL computes with scale_rewards="group": (r - mean) / (sample std + 1e-4)."""
    out: list[float] = []
    for group in batch["groups"]:
        rewards = [c["reward"] for c in group["completions"]]
        mean = math.fsum(rewards) / len(rewards)
        std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
        out += [(r - mean) / (std + 1e-4) for r in rewards]
    return out


def tether_step(trainer: Any, batch: Any) -> dict[str, Any]:
    """One PolicyTrainer.step, with the gradient read before and after clipping and the weight delta."""
    captured: dict[str, Tensors] = {}
    clip = trainer._clip_gradients

    def clip_and_record() -> float:
        captured["raw"] = named_grads(trainer.model)
        norm = float(clip())
        captured["clipped"] = named_grads(trainer.model)
        return norm

    trainer._clip_gradients = clip_and_record
    before = trainable_copy(trainer.model)
    try:
        metrics = trainer.step(batch)
    finally:
        del trainer._clip_gradients
    after = trainable_copy(trainer.model)
    delta = {n: after[n] - before[n] for n in before}
    return {**captured, "delta": delta, "metrics": metrics.to_dict()}


def reset(trainer: Any, state: Tensors) -> None:
    """The weights of `state`, a fresh optimizer and schedule: a learner about to take its first step."""
    load_trainable(trainer.model, state)
    trainer.make_optimizer()
    trainer.step_count = 0


def perturbed_state(state: Tensors, seed: int) -> Tensors:
    import torch

    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, value in sorted(state.items()):
        noise = torch.randn(value.shape, generator=generator, dtype=value.dtype) * PERTURB_STD
        out[name] = noise if ".lora_B." in name else value.clone()
    return out


def swap_check(engine: Any, trainer: Any, batch: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Tether's adapter after the step, loaded into the engine as the loop swaps it; one group sampled
    from it, rescored by the learner: the gap between recorded and learner logprobs (ratio at step 2)."""
    from tether.sampling import Sampler

    adapter = trainer.save_adapter(folder / "tether-adapter-v1")
    engine.load_adapter(str(adapter))
    group = batch["groups"][0]
    prompt = group["prompt"]["engine_ids"]
    seeds = [SEED_BASE * 97 + k for k in range(GROUP_SIZE)]
    generations = sample_group(engine, prompt, seeds)
    swapped = {
        "groups": [
            {
                "task": group["task"],
                "prompt": group["prompt"],
                "completions": [
                    {"token_ids": list(g.token_ids), "logprobs": list(g.logprobs), "reward": 0.0}
                    for g in generations
                ],
            }
        ],
        "temperature": batch["temperature"],
    }
    transitions = transitions_of(swapped)
    assert {t.sampler for t in transitions} == {Sampler(temperature=batch["temperature"])}
    scored = trainer.logprobs(transitions)
    gaps = [
        a - b
        for t, s in zip(transitions, scored, strict=True)
        for a, b in zip(s, t.response_logprobs, strict=True)
    ]
    return {
        "tokens": len(gaps),
        "max_abs_gap": max(abs(g) for g in gaps),
        "mean_ratio": math.fsum(math.exp(g) for g in gaps) / len(gaps),
    }


def run_tether(batch: dict[str, Any], folder: Path, engine: Any, seed: int) -> dict[str, Any]:
    import torch

    from tether.algorithms import Sample
    from tether.algorithms.advantages import assign_advantages
    from tether.learner.config import TrainConfig
    from tether.learner.policy import PolicyTrainer

    # As `tether train` builds it (tether/cli/train_cmd.py) for bench/efficacy.py's command line.
    config = TrainConfig(model=MODEL, lr=LR, seed=seed, clip_low=0.2, clip_high=0.28, tis_cap=2.0)
    trainer = PolicyTrainer(config)
    init = trainable_copy(trainer.model)
    states = {"init": init, "perturbed": perturbed_state(init, seed + 1)}
    torch.save(states, folder / "states.pt")
    trl_advantages = trl_style_advantages(batch)
    results: dict[str, Any] = {"config": {k: str(v) for k, v in vars(config).items()}}
    for case in CASES:
        reset(trainer, states[case])
        behaviour = None if case == "init" else trainer.logprobs(transitions_of(batch))
        transitions = transitions_of(batch, behaviour)
        advantage_batch = assign_advantages(transitions, method="grpo")
        real = tether_step(trainer, advantage_batch)
        real["advantages"] = {s.rollout_id: s.advantage for s in advantage_batch.samples}
        real["report"] = vars(advantage_batch.report)
        if case == "init":
            results["swap_check"] = swap_check(engine, trainer, batch, folder)
        reset(trainer, states[case])
        matched_samples = [
            Sample(t, advantage=a, weight=1.0) for t, a in zip(transitions, trl_advantages, strict=True)
        ]
        matched = tether_step(trainer, matched_samples)
        results[case] = {"tether": real, "tether_trl_weighting": matched}
        if case == "init":
            # Control: TRL's weighting, but scored at temperature 1 (behaviour rescored there, so the ratio
            # is 1): how far the gradient moves when the temperature scaling of the logits is not matched.
            reset(trainer, states[case])
            raw = trainer.logprobs(transitions_of(batch, temperature=1.0))
            control = [
                Sample(t, advantage=a, weight=1.0)
                for t, a in zip(transitions_of(batch, raw, 1.0), trl_advantages, strict=True)
            ]
            results[case]["control_temperature_1"] = tether_step(trainer, control)
        print(f"grad_match: Tether {case} done", file=sys.stderr, flush=True)
    return results


# -- stage 3 (TRL's venv): GRPOTrainer -------------------------------------------------------------------


def trl_side(folder: Path, threads: int) -> None:
    """Runs in bench/.venv-trl: one real GRPOTrainer step per state, with the batch's completions."""
    import importlib.metadata

    import torch
    import trl_grpo  # bench/ is sys.path[0]
    from datasets import Dataset
    from efficacy_agent import messages
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    torch.set_num_threads(threads)
    batch = json.loads((folder / "batch.json").read_text())
    states = torch.load(folder / "states.pt", weights_only=True)
    model_dir = batch["model_dir"]
    results: dict[str, Any] = {
        "versions": {
            name: importlib.metadata.version(name)
            for name in ("trl", "transformers", "torch", "peft", "accelerate")
        }
    }
    for case in CASES:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        rows = [
            {
                "prompt": messages(g["task"]["question"]),
                "answer": g["task"]["reference"]["answer"],
                "question": g["task"]["question"],
            }
            for g in batch["groups"]
        ]
        options = argparse.Namespace(
            group_size=GROUP_SIZE,
            tasks_per_step=len(rows),
            max_steps=1,
            lr=LR,
            grad_clip=1.0,
            clip_low=0.2,
            clip_high=0.28,
            bf16="auto",
            seed=0,
        )
        lora = LoraConfig(
            r=16,
            lora_alpha=32,
            lora_dropout=0.0,
            target_modules=trl_grpo.LLAMA_TARGET_MODULES,
            task_type="CAUSAL_LM",
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=trl_grpo.TrainRewards(trl_grpo.load_reward(REWARD)),
            args=trl_grpo.grpo_config(options, tempfile.mkdtemp(prefix="grad-match-trl-")),
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=lora,
        )
        load_trainable(trainer.model, states[case])
        results[case] = trl_step(trainer, batch, tokenizer)
        questions = [g["task"]["question"] for g in batch["groups"]]
        results[case]["evaluator_prompt_ids"] = {q: trl_grpo.prompt_ids(tokenizer, q) for q in questions}
        results.setdefault("optimizer", type(trainer.optimizer).__name__ if trainer.optimizer else None)
        results.setdefault("optim", str(trainer.args.optim))
        print(f"grad_match: TRL {case} done", file=sys.stderr, flush=True)
    torch.save(results, folder / "trl.pt")


def trl_step(trainer: Any, batch: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """trainer.train() for one step; generation replaced by the batch's completions."""
    queues = {g["task"]["question"]: deque(c["token_ids"] for c in g["completions"]) for g in batch["groups"]}
    captured: dict[str, Any] = {"prompt_ids": {}}

    def fixed_generation(
        prompt_ids: list[list[int]], images: Any, fields: Any, generations: int, tool_images: bool = False
    ) -> tuple[list[list[int]], None]:
        out = []
        for ids in prompt_ids:
            text = tokenizer.decode(ids)
            question = next(q for q in queues if q in text)
            captured["prompt_ids"].setdefault(question, [int(i) for i in ids])
            out.append(list(queues[question].popleft()))
        return out, None

    compute_loss = trainer._compute_loss

    def loss_and_record(model: Any, inputs: dict[str, Any]) -> Any:
        loss = compute_loss(model, inputs)
        captured["inputs"] = {k: v.detach().clone() for k, v in inputs.items() if hasattr(v, "detach")}
        captured["loss"] = float(loss.detach())
        return loss

    clip = trainer._clip_grad_norm

    def clip_and_record(model: Any) -> Any:
        captured["raw"] = named_grads(trainer.model)
        norm = clip(model)
        captured["grad_norm"] = float(norm)
        captured["clipped"] = named_grads(trainer.model)
        return norm

    trainer._generate_single_turn = fixed_generation
    trainer._compute_loss = loss_and_record
    trainer._clip_grad_norm = clip_and_record
    before = trainable_copy(trainer.model)
    trainer.train()
    after = trainable_copy(trainer.model)
    captured["delta"] = {n: after[n] - before[n] for n in before}
    captured["rows"] = trl_rows(captured.pop("inputs"), batch, tokenizer)
    return captured


def trl_rows(inputs: dict[str, Any], batch: dict[str, Any], tokenizer: Any) -> list[dict[str, Any]]:
    """Each (shuffled) row of TRL's loss inputs, named by group and completion index."""
    used: set[tuple[int, int]] = set()
    rows = []
    for row in range(inputs["prompt_ids"].shape[0]):
        prompt = inputs["prompt_ids"][row][inputs["prompt_mask"][row].bool()].tolist()
        mask = inputs["completion_mask"][row].bool()
        completion = inputs["completion_ids"][row][mask].tolist()
        text = tokenizer.decode(prompt)
        g = next(i for i, group in enumerate(batch["groups"]) if group["task"]["question"] in text)
        k = next(
            k
            for k, c in enumerate(batch["groups"][g]["completions"])
            if c["token_ids"] == completion and (g, k) not in used
        )
        used.add((g, k))
        rows.append(
            {"group": g, "k": k, "advantage": float(inputs["advantages"][row]), "trained": int(mask.sum())}
        )
    return rows


# -- stage 4: the comparison -----------------------------------------------------------------------------


def flat(tensors: Tensors) -> Any:
    import torch

    return torch.cat([tensors[n].flatten().double() for n in sorted(tensors)])


def cosine(a: Any, b: Any) -> float:
    denominator = float(a.norm() * b.norm())
    return float(a @ b) / denominator if denominator > 0 else float("nan")


def grouped_norms(tensors: Tensors, key: str) -> dict[str, float]:
    """Gradient norm per module kind ("q_proj.lora_B") or per layer ("12"), over the LoRA tensors."""
    sums: dict[str, float] = defaultdict(float)
    for name, value in tensors.items():
        match = LORA_NAME.search(name)
        if match is None:
            continue
        layer, module, part = match.groups()
        sums[layer if key == "layer" else f"{module}.{part}"] += float(value.double().pow(2).sum())
    order = sorted(sums, key=lambda k: int(k)) if key == "layer" else sorted(sums)
    return {k: math.sqrt(sums[k]) for k in order}


def compare(ours: Tensors, theirs: Tensors) -> dict[str, Any]:
    a, b = flat(ours), flat(theirs)
    na, nb = float(a.norm()), float(b.norm())
    both = (a != 0) & (b != 0)
    return {
        "norm_tether": na,
        "norm_trl": nb,
        "ratio": na / nb if nb > 0 else float("nan"),
        "cosine": cosine(a, b),
        "relative_diff": float((a - b).norm()) / nb if nb > 0 else float("nan"),
        "max_abs_tether": float(a.abs().max()),
        "max_abs_trl": float(b.abs().max()),
        "nonzero_tether": int((a != 0).sum()),
        "nonzero_trl": int((b != 0).sum()),
        "sign_agreement": float(((a.sign() == b.sign()) & both).sum()) / max(int(both.sum()), 1),
    }


def per_group_ratios(ours: Tensors, theirs: Tensors, key: str) -> dict[str, tuple[float, float]]:
    """Per module kind or layer: (norm ratio Tether / TRL, cosine)."""
    import torch

    mine, other = grouped_norms(ours, key), grouped_norms(theirs, key)
    out = {}
    for k in mine:
        names = [
            n
            for n in ours
            if (m := LORA_NAME.search(n)) is not None
            and (m.group(1) if key == "layer" else f"{m.group(2)}.{m.group(3)}") == k
        ]
        a = torch.cat([ours[n].flatten().double() for n in names])
        b = torch.cat([theirs[n].flatten().double() for n in names])
        out[k] = (mine[k] / other[k] if other[k] > 0 else float("nan"), cosine(a, b))
    return out


def expected_ratio(batch: dict[str, Any], report: dict[str, Any]) -> float:
    """Tether's gradient / TRL's at ratio 1 for binary rewards: (TRL's rollouts / Tether's kept rollouts)
    x (sample std + 1e-4) / (population std + 1e-6), the same in every mixed group of size G."""
    g = GROUP_SIZE
    total = sum(len(group["completions"]) for group in batch["groups"])
    rewards = [c["reward"] for c in batch["groups"][0]["completions"]]
    mean = sum(rewards) / g
    pop = math.sqrt(sum((r - mean) ** 2 for r in rewards) / g)
    sample = pop * math.sqrt(g / (g - 1))
    return total / max(report["rollouts_used"], 1) * (sample + 1e-4) / (pop + 1e-6)


def summarize(batch: dict[str, Any], tether: dict[str, Any], trl: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {"versions": trl["versions"], "trl_optimizer": [trl["optimizer"], trl["optim"]]}
    summary["swap_check"] = tether["swap_check"]
    prompts = []
    for group in batch["groups"]:
        question = group["task"]["question"]
        ids = group["prompt"]["engine_ids"]
        prompts.append(
            {
                "task": group["task"]["id"],
                "engine_tokens": len(ids),
                "engine_vs_hf_template": group["prompt"]["hf_template_equal"],
                "engine_vs_ChatTemplate": group["prompt"]["chat_template_equal"],
                "engine_vs_trl_training": trl["init"]["prompt_ids"].get(question) == ids,
                "engine_vs_trl_evaluator": trl["init"]["evaluator_prompt_ids"].get(question) == ids,
            }
        )
    summary["prompts"] = prompts
    for case in CASES:
        ours, matched, theirs = tether[case]["tether"], tether[case]["tether_trl_weighting"], trl[case]
        trl_adv = {(r["group"], r["k"]): r for r in theirs["rows"]}
        completions = []
        for g, group in enumerate(batch["groups"]):
            for k, c in enumerate(group["completions"]):
                row = trl_adv[(g, k)]
                completions.append(
                    {
                        "group": g,
                        "k": k,
                        "reward": c["reward"],
                        "tokens": len(c["token_ids"]),
                        "eos": c["finish_reason"],
                        "trl_trained_tokens": row["trained"],
                        "tether_advantage": ours["advantages"].get(f"g{g}-r{k}"),
                        "trl_advantage": row["advantage"],
                    }
                )
        summary[case] = {
            "completions": completions,
            "tether_report": {
                k: ours["report"][k] for k in ("groups", "groups_used", "groups_dropped", "rollouts_used")
            },
            "expected_ratio": expected_ratio(batch, ours["report"]),
            "loss": {
                "tether": ours["metrics"]["loss"],
                "tether_trl_weighting": matched["metrics"]["loss"],
                "trl": theirs["loss"],
            },
            "grad_norm_reported": {
                "tether": ours["metrics"]["grad_norm"],
                "tether_trl_weighting": matched["metrics"]["grad_norm"],
                "trl": theirs["grad_norm"],
            },
            "tether_mean_ratio": ours["metrics"]["mean_ratio"],
            "tether_clip_fraction": ours["metrics"]["clip_fraction"],
            "grad": compare(ours["raw"], theirs["raw"]),
            "grad_trl_weighting": compare(matched["raw"], theirs["raw"]),
            "clipped_grad": compare(ours["clipped"], theirs["clipped"]),
            "delta": compare(ours["delta"], theirs["delta"]),
            "delta_trl_weighting": compare(matched["delta"], theirs["delta"]),
            "by_module": per_group_ratios(ours["raw"], theirs["raw"], "module"),
            "by_layer": per_group_ratios(ours["raw"], theirs["raw"], "layer"),
        }
        control = tether[case].get("control_temperature_1")
        if control is not None:
            summary[case]["grad_control_temperature_1"] = compare(control["raw"], theirs["raw"])
    return summary


def print_report(batch: dict[str, Any], summary: dict[str, Any]) -> None:
    v = summary["versions"]
    print(f"# grad_match: Tether PolicyTrainer vs TRL {v['trl']} GRPOTrainer, one step on one batch")
    print(f"TRL venv: transformers {v['transformers']}, torch {v['torch']}, peft {v['peft']}; ", end="")
    print(f"TRL optimizer {summary['trl_optimizer'][0]} (optim={summary['trl_optimizer'][1]})")
    print(f"temperature {batch['temperature']}, tasks tried {batch['tasks_tried']}\n")
    print("## prompt ids (engine.chat_prompt_ids against ...)")
    for p in summary["prompts"]:
        print(
            f"- {p['task']}: {p['engine_tokens']} tokens; "
            f"HF apply_chat_template {p['engine_vs_hf_template']}, "
            f"ChatTemplate {p['engine_vs_ChatTemplate']}, TRL training prompt {p['engine_vs_trl_training']}, "
            f"TRL evaluator {p['engine_vs_trl_evaluator']}"
        )
    print(f"rendered: {batch['groups'][0]['prompt']['text']!r}\n")
    for case in CASES:
        s = summary[case]
        print(f"## state {case!r}")
        print("| group | k | reward | tokens | finish | TRL trained | Tether adv | TRL adv | Tether/TRL |")
        print("|---:|---:|---:|---:|---|---:|---:|---:|---:|")
        for c in s["completions"]:
            ours = c["tether_advantage"]
            ratio = f"{ours / c['trl_advantage']:.4f}" if ours is not None and c["trl_advantage"] else "-"
            shown = f"{ours:+.4f}" if ours is not None else "dropped"
            print(
                f"| {c['group']} | {c['k']} | {c['reward']:.0f} | {c['tokens']} | {c['eos']} | "
                f"{c['trl_trained_tokens']} | {shown} | {c['trl_advantage']:+.4f} | {ratio} |"
            )
        print(f"Tether advantage report: {s['tether_report']}")
        print(f"loss: {s['loss']}")
        print(f"grad norm before clipping (as each reports): {s['grad_norm_reported']}")
        print(f"Tether mean ratio {s['tether_mean_ratio']:.6f}, clip fraction {s['tether_clip_fraction']}")
        print(f"expected gradient ratio Tether/TRL (analytic): {s['expected_ratio']:.4f}")
        labels = ("grad", "grad_trl_weighting", "grad_control_temperature_1", "clipped_grad", "delta")
        for label in (*labels, "delta_trl_weighting"):
            if label not in s:
                continue
            r = s[label]
            print(
                f"- {label}: norm Tether {r['norm_tether']:.6g}, TRL {r['norm_trl']:.6g}, ratio "
                f"{r['ratio']:.4f}, cosine {r['cosine']:.6f}, relative diff {r['relative_diff']:.3g}, "
                f"max |x| {r['max_abs_tether']:.3g} / {r['max_abs_trl']:.3g}, nonzero "
                f"{r['nonzero_tether']} / {r['nonzero_trl']}, sign agreement {r['sign_agreement']:.4f}"
            )
        modules = ", ".join(
            f"{k} {r:.4f} (cos {c:.6f})" if not math.isnan(r) else f"{k} 0 on both sides"
            for k, (r, c) in s["by_module"].items()
        )
        print(f"- gradient norm ratio Tether/TRL by module: {modules}")
        layers = [r for r, _ in s["by_layer"].values()]
        cosines = [c for _, c in s["by_layer"].values()]
        median = sorted(layers)[len(layers) // 2]
        print(
            f"- by layer ({len(layers)}): ratio min {min(layers):.4f} median {median:.4f} "
            f"max {max(layers):.4f}; cosine min {min(cosines):.6f}"
        )
        print()
    sw = summary["swap_check"]
    print(
        f"## swap check: adapter after Tether's step loaded into the engine, {sw['tokens']} sampled tokens "
        f"rescored by the learner: max |logp gap| {sw['max_abs_gap']:.3g}, mean ratio {sw['mean_ratio']:.6f}"
    )


# -- main ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.trl_side is not None:
        trl_side(args.trl_side, args.threads)
        return
    started = time.perf_counter()
    stages: dict[str, float] = {}

    def lap(name: str) -> None:
        stages[name] = time.perf_counter() - started - sum(stages.values())
        print(f"grad_match: {name} {stages[name]:.0f} s", file=sys.stderr, flush=True)

    folder = args.out or Path(tempfile.mkdtemp(prefix="grad-match-"))
    folder.mkdir(parents=True, exist_ok=True)
    import torch

    from bench import refenv
    from tether.engines.transformers_engine import TransformersEngine
    from tether.models.catalog import resolve_model

    torch.set_num_threads(args.threads)
    trl_python = refenv.ensure_trl(folder / "trl-install.log")
    tasks = make_tasks(folder / "tasks", args.seed)
    engine = TransformersEngine(MODEL, max_batch_size=32, threads=args.threads)
    lap("setup")
    try:
        batch = build_batch(engine, tasks, args.max_tasks)
        batch["model_dir"] = str(resolve_model(MODEL))
        (folder / "batch.json").write_text(json.dumps(batch))
        lap("sampling the batch")
        tether = run_tether(batch, folder, engine, args.seed)
        lap("Tether")
    finally:
        engine.close()
    script = str(Path(__file__).resolve())
    trl_args = [str(trl_python), script, "--trl-side", str(folder), "--threads", str(args.threads)]
    subprocess.run(trl_args, check=True)
    lap("TRL")
    trl = torch.load(folder / "trl.pt", weights_only=False)
    summary = summarize(batch, tether, trl)
    summary["stage_seconds"] = stages
    summary["seconds"] = time.perf_counter() - started
    (folder / "report.json").write_text(json.dumps(summary, indent=1, default=str))
    print_report(batch, summary)
    laps = ", ".join(f"{k} {v:.0f} s" for k, v in summary["stage_seconds"].items())
    print(f"\n{summary['seconds']:.0f} s ({laps}); files in {folder}")


if __name__ == "__main__":
    main()
