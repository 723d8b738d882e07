"""The trainer's settings: the learner, imitation, the update, sampling, the schedule, validation and the
curriculum."""

from __future__ import annotations

from dataclasses import dataclass

from tether.config.option import Identity, option
from tether.config.run import resolved_file
from tether.contracts import ALGORITHMS, LOSS_AGGREGATIONS, TIS_LEVELS, TIS_MODES


@dataclass
class LearnerSettings:
    """The learner: the algorithm, its learning rates and the adapter it trains."""

    algorithm: str = option(
        "grpo",
        "grpo, drgrpo, rloo: group-relative RL on the rewards; sft: imitate --from-run; opd: "
        "on-policy distillation, every sampled token scored by --teacher (the per-token reverse "
        "KL is its advantage, no reward needed; groups of one work)",
        choices=tuple(ALGORITHMS),
        run="shape",
    )
    lr: float | None = option(
        None,
        "learning rate (default 1e-4 LoRA, 1e-5 full)",
    )
    rl_lr: float | None = option(
        None,
        "the learning rate of the RL updates, apart from the --sft-steps imitation updates before"
        " them (default: --lr)",
    )
    rl_warmup_steps: int = option(
        0,
        "RL's learning rate rises linearly over its first N updates",
    )
    rl_schedule: str = option(
        "constant",
        "RL's learning rate after its warm-up: constant, or cosine (it falls along a cosine to a "
        "tenth over the run's --steps)",
        choices=("constant", "cosine"),
    )
    full: bool = option(
        False,
        "full fine-tuning instead of LoRA",
        run="shape",
    )
    lora_r: int = option(
        16,
        "LoRA rank",
        run="shape",
    )
    kl_coef: float = option(
        0.0,
        "KL penalty to the base model",
    )
    micro_batch_tokens: int = option(
        2048,
        "tokens per forward/backward pass; lower it if memory runs short",
    )
    no_shared_prefixes: bool = option(
        False,
        "the update runs every sample's whole prompt, instead of each prefix that samples share "
        "(a group's prompt, a system prompt, a rollout's earlier calls) once; for comparison "
        "only, the gradient is the same",
    )
    no_merge: bool = option(
        False,
        "one transition per call, no prefix merging",
    )
    train_agent: list[str] | None = option(
        None,
        "train only the calls of this agent name (repeatable; default all). An agent is named by "
        "its X-Tether-Agent header, an enclosing OpenTelemetry span's agent name, or its model "
        "alias",
        metavar="NAME",
    )
    policy: list[str] | None = option(
        None,
        "train a LoRA adapter of its own for the agent that asks for model NAME (repeatable): "
        "each policy has its own adapter, optimizer, learning rate (default --lr), versions, "
        "weights (policies/NAME/vN) and metrics (train.NAME.*); all share the base model and "
        "decode in one batch. The rollout's reward is shared by its agents, each policy's update "
        "sees only its own calls. With --policy every model name the agent asks for must be a "
        "policy or a --fixed-agent. Default: one policy trained on every call that is not fixed",
        metavar="NAME=lora:rR[:lr=X]",
        run=Identity("shape", key="policies", unset_left_out=True, value=lambda given, _: sorted(given)),
    )
    fixed_agent: list[str] | None = option(
        None,
        "serve calls for this model alias with a fixed model that is never trained: the built-in "
        "base model, or the OpenAI-compatible server at URL (repeatable)",
        metavar="ALIAS[=URL]",
    )
    teacher: str | None = option(
        None,
        "opd: the teacher's OpenAI-compatible base URL (ending in /v1) that answers "
        "prompt_logprobs: vLLM, or `tether serve --model M [--adapter DIR]`; it must share the "
        "student's tokenizer",
        metavar="URL",
    )
    teacher_model: str = option(
        "teacher",
        "opd: the model name to ask for",
        metavar="NAME",
    )


@dataclass
class ImitationSettings:
    """Imitation: the demonstrations SFT learns from, before RL or alone."""

    from_run: str | None = option(
        None,
        "demonstrations: imitate the successful rollouts of run NAME (e.g. a `tether rollout "
        "--upstream` run against a teacher), their recorded messages tokenized with the policy's "
        "chat template; every step with --algorithm sft, else the first --sft-steps updates "
        "before RL",
        metavar="NAME",
        run="shape",
    )
    sft_steps: int = option(
        0,
        "with --from-run and an RL algorithm: imitation updates before RL",
        run="shape",
    )
    sft_batch: int = option(
        8,
        "demonstration rollouts per imitation update",
    )
    sft_min_reward: float = option(
        1.0,
        "sft: imitate only rollouts whose reward is at least this",
    )


@dataclass
class UpdateSettings:
    """The update: how each batch is used (tether/learner/loss.py has the loss)."""

    ppo_epochs: int = option(
        1,
        "passes over each batch",
    )
    mini_batches: int = option(
        1,
        "optimizer steps per pass (whole rollouts each); more than one pass or step measures the "
        "importance ratio against the policy at the start of the update",
    )
    loss_agg: str = option(
        "rollout",
        "rollout: every rollout counts once (token mean within each); token: one mean over every "
        "trained token of the batch (DAPO)",
        choices=LOSS_AGGREGATIONS,
    )
    clip_low: float = option(
        0.2,
        "ratio clip below 1: 1 - clip-low",
    )
    clip_high: float = option(
        0.28,
        "ratio clip above 1: 1 + clip-high",
    )
    tis_cap: float = option(
        2.0,
        "cap on the importance weight pi_old / mu (engine mismatch and staleness); 0 disables it",
    )
    tis_mode: str = option(
        "truncate",
        "truncate the weight at --tis-cap, or drop tokens whose weight leaves [1/cap, cap]",
        choices=TIS_MODES,
    )
    tis_level: str = option(
        "token",
        "what one weight covers: each token; each sample's sequence (the product of its tokens' "
        "weights); or its geometric mean: a whole sequence truncated or masked together",
        choices=TIS_LEVELS,
    )


@dataclass
class SamplingSettings:
    """Sampling: what the training rollouts sample, and how many."""

    group_size: int = option(
        8,
        "rollouts per task in a step (a group)",
        run="shape",
    )
    tasks_per_step: int = option(
        4,
        "groups per update",
        run="shape",
    )
    train_temperature: float | None = option(
        None,
        "force this temperature on every training call, whatever the agent asks (1.0 samples the "
        "policy itself; default: the agent's own settings, which the learner reproduces exactly)",
        run=Identity("shape", key="temperature", unset_left_out=True),  # named only when forced
    )
    train_top_p: float | None = option(
        None,
        "force this top-p on every training call",
        run=Identity("shape", key="top_p", unset_left_out=True),
    )
    min_signal_groups: int = option(
        0,
        "dynamic sampling: keep launching groups until the batch has N groups whose rewards vary "
        "(0: off, the batch is --tasks-per-step groups whatever their rewards)",
    )
    max_groups_per_step: int | None = option(
        None,
        "with --min-signal-groups: at most this many groups generated per step (default 3 x "
        "--tasks-per-step)",
    )
    async_mode: bool = option(
        False,
        "keep agents running during updates (pause, drain, swap, resume)",
        flags=("--async",),
    )
    max_staleness: int = option(
        1,
        "async: how many policy versions generation may run ahead of the learner. At most (N + 1)"
        " x --tasks-per-step groups generate at once, so a group is consumed within N updates "
        "instead of being dropped. Each token is judged by the version that generated it: tokens "
        "more than N versions behind the learner (in a rollout whose calls spanned swaps) are "
        "masked out of the loss",
        metavar="N",
    )


@dataclass
class ScheduleSettings:
    """How long the run trains, and how often it checkpoints."""

    steps: int = option(
        20,
        "policy updates",
    )
    time_budget: float | None = option(
        None,
        "stop updating once the training steps (rollouts, teacher scoring, updates; not "
        "validations) have taken this many wall-clock seconds, whichever of this and --steps "
        "comes first; a resumed run counts its earlier starts' steps. Compares algorithms at "
        "equal time",
        metavar="SECONDS",
    )
    checkpoint_every: int = option(
        5,
        "checkpoint every N steps",
    )


@dataclass
class ValidationSettings:
    """Validation on held-out tasks: when, with which reward, and with how many samples."""

    tasks: str | None = option(
        None,
        "held-out tasks scored before, during and after",
        metavar="FILE",
        flags=("--val-tasks",),
        dest="val_tasks",
        run=Identity("name", value=lambda path, _: resolved_file(path)),
    )
    every: int = option(
        5,
        "validate every N steps (0: before/after only)",
        flags=("--val-every",),
        dest="val_every",
    )
    reward: str | None = option(
        None,
        "score held-out rollouts by this named reward, not the one training uses: train on a "
        "judge, validate with the evaluator (--reward judge:RUBRIC.md --reward evaluator.py:fn "
        "--reward-weights judge=1 --val-reward fn)",
        metavar="NAME",
        flags=("--val-reward",),
        dest="val_reward",
    )
    k: int = option(
        0,
        "each validation also samples every held-out task K times at --val-k-temperature and "
        "records pass@K (a task passes when one sample does) and mean@K, with their 95% "
        "intervals: what RL can sharpen beyond greedy pass@1. 0: greedy only",
        metavar="K",
        flags=("--val-k",),
        dest="val_k",
    )
    temperature: float = option(
        1.0,
        "the temperature of the --val-k samples",
        flags=("--val-k-temperature",),
        dest="val_k_temperature",
    )
    no_base_coverage: bool = option(
        False,
        "skip the --val-k samples at the validation before training (greedy pass@1 still runs): "
        "the base model's coverage is the same for every seed, so one run of a sweep measures it",
    )
    pass_reward: float = option(
        1.0,
        "a held-out rollout passes (pass@1, pass@K) when its reward is at least this",
        flags=("--val-pass-reward",),
        dest="val_pass_reward",
    )


@dataclass
class CurriculumSettings:
    """The curriculum: which tasks a step samples."""

    retire_after: int | None = option(
        None,
        "retire a task once its last K training rollouts all solved it (K of K): it is not "
        "trained on again. A group's rollouts have no order among themselves: use a multiple of "
        "--group-size (K = group size: one whole group solved)",
        metavar="K",
    )
    park_after: int | None = option(
        None,
        "park a task whose last M training rollouts all failed (a multiple of --group-size, as "
        "for K): it is set aside (see --revisit-every); tried anyway only when no other task is "
        "left",
        metavar="M",
    )
    revisit_every: int = option(
        0,
        "give each parked task one try N steps after its last one (0: never); a solve makes it active again",
        metavar="N",
    )
    mixed_first: bool = option(
        False,
        "take tasks whose recent rollouts both solved and failed first (their groups have reward "
        "variance to learn from); recent: the last max(K, M) rollouts, or 8",
    )
    success_reward: float = option(
        1.0,
        "the reward that counts as solving a task (this or more)",
        metavar="R",
    )
    probe: bool = option(
        False,
        "before RL's first step (after the --sft-steps updates), sample one group of every "
        "training task and train on none of it: the pools start from what the policy already "
        "solves (mixed tasks first with --mixed-first; solved ones retired with --retire-after "
        "the group size). Like a validation, its seconds are no step's and do not count against "
        "--time-budget",
    )
    curriculum_from: list[str] | None = option(
        None,
        "also count the training rollouts of this earlier run (repeatable), e.g. to start with "
        "the tasks it solved retired",
        metavar="RUN",
    )
