"""The trainer's configuration (`TrainerConfig`: what the loop runs, for how long, on which parts) and what a
fit returns (`FitResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.contracts import ALGORITHMS, DEFAULT_MAX_TOKENS_CAP, DEFAULT_N_CAP, DISTILLATION, POLICY_UPSTREAM
from tether.curriculum.pools import CurriculumConfig
from tether.learner.config import TrainConfig
from tether.limits import AgentQuota
from tether.policy_server import PolicyServerOptions
from tether.trainer.coverage import CoverageConfig
from tether.trainer.distill import Teacher
from tether.trainer.policies import PolicySpec, check_policies


@dataclass
class TrainerConfig:
    model: str = "smollm2-135m"
    algorithm: str = "grpo"
    steps: int = 20
    group_size: int = 8
    tasks_per_step: int = 4
    n_workers: int = 32
    timeout_s: float = 120.0
    max_attempts: int = 1
    val_every: int = 5  # 0: only before and after
    # Stop updating once the training steps (rollouts, teacher, update, swap; not validation) have taken
    # this many wall-clock seconds in all, resumed starts included. None: `steps` alone decides.
    time_budget_s: float | None = None
    val_temperature: float = 0.0
    checkpoint_every: int = 5
    merge: bool = True
    agents: list[str] | None = None  # train only these agents' calls (default: all)
    # Agents (model aliases) served by a fixed model and never trained: alias -> an OpenAI-compatible
    # base URL, or None for the built-in base model without the adapter being trained.
    fixed_agents: dict[str, str | None] = field(default_factory=dict)
    async_mode: bool = False
    max_staleness: int = 1
    sft_threshold: float = 1.0  # sft: train on rollouts whose reward is at least this
    # Demonstrations: the run whose successful rollouts (another model's calls, tokenized with the
    # policy's chat template) are imitated for `sft_steps` updates before the `steps` of `algorithm`;
    # with algorithm "sft" every step imitates them. `sft_batch` rollouts per update.
    from_run: str | None = None
    sft_steps: int = 0
    sft_batch: int = 8
    seed: int = 0
    primary_reward: str | None = None  # which named reward of an evaluator's dict is the reward
    # Held-out rollouts scored by this named reward instead of their final one (train on a judge, validate
    # with the evaluator kept beside it).
    val_reward: str | None = None
    agent_rewards: bool | None = None  # agents' own rewards count (None: only without an evaluator)
    air: bool = True  # automatic intermediate rewards
    engine_threads: int | None = None
    policy_server: str = "builtin"  # a kind registered in tether.policy_server
    # What the kind needs beyond the model (vLLM: URLs or replicas to start, its Python, ...).
    server_options: PolicyServerOptions | None = None
    learner: str = "local"  # a kind registered in tether.learner.base
    policy: TrainConfig = field(default_factory=lambda: TrainConfig(model="smollm2-135m"))
    wandb_project: str | None = None  # also log to this Weights & Biases project
    # Sampling parameters forced on every training call ({"temperature": 1.0}); validation keeps its own.
    train_sampling: dict[str, float] = field(default_factory=dict)
    # Dynamic sampling: groups keep being launched until a batch holds this many groups whose rewards
    # vary, up to `max_groups_per_step` generated (default 3 x tasks_per_step). 0: off.
    min_signal_groups: int = 0
    max_groups_per_step: int | None = None
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    # Held-out coverage: each validation also samples every task k times (pass@k, mean@k).
    coverage: CoverageConfig = field(default_factory=CoverageConfig)
    # What an agent may send with its token: request bodies, spans per attempt (`tether.limits`).
    agent_quota: AgentQuota = field(default_factory=AgentQuota)
    # The tokens and the choices one model call may ask the gateway for (`--max-tokens-cap`, `--n-cap`).
    caps: tuple[int, int] = (DEFAULT_MAX_TOKENS_CAP, DEFAULT_N_CAP)
    # algorithm "opd": the teacher that scores every token the policy samples (`tether.trainer.distill`).
    teacher: Teacher | None = None
    # Several trained policies, a LoRA adapter each, named by the model alias routed to it
    # (`tether.trainer.policies`); empty: one policy, `policy`, for every alias that is not fixed.
    policies: list[PolicySpec] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {self.algorithm!r}: choose one of {', '.join(ALGORITHMS)}")
        if self.steps < 0 or self.group_size < 1 or self.tasks_per_step < 1 or self.n_workers < 1:
            raise ValueError("steps >= 0, group size, tasks per step and workers >= 1")
        self._check_demonstrations()
        if (self.algorithm == DISTILLATION) != (self.teacher is not None):
            raise ValueError(
                "--algorithm opd distills from a teacher: give --teacher URL"
                if self.teacher is None
                else "--teacher is the teacher of --algorithm opd: give --algorithm opd, or drop --teacher"
            )
        if self.algorithm not in ("sft", DISTILLATION) and self.group_size < 2:
            raise ValueError(f"{self.algorithm} compares rollouts of a task: --group-size must be at least 2")
        self.policy.model = self.model
        if not self.policy.lora and self.policy_server == "builtin":
            raise ValueError(
                "full fine-tuning needs a policy server that loads full weights; the built-in engine "
                "hot-swaps LoRA adapters only (drop --full)"
            )
        self._check_sampling()
        both = sorted(set(self.agents or ()) & set(self.fixed_agents))
        if both:
            raise ValueError(f"agents both trained and fixed: {', '.join(both)}")
        check_policies(self.policies, self.fixed_agents)
        if self.policies and self.learner != "local":
            raise ValueError(
                "several policies (--policy) are trained by the local learner for now: drop the Ray "
                "learner, or train one policy"
            )

    @property
    def policy_names(self) -> list[str]:
        return [spec.name for spec in self.policies] or [POLICY_UPSTREAM]

    def _check_sampling(self) -> None:
        if self.min_signal_groups < 0:
            raise ValueError("--min-signal-groups must be >= 0")
        if self.max_groups_per_step is None:
            self.max_groups_per_step = 3 * max(self.tasks_per_step, self.min_signal_groups)
        if self.min_signal_groups and self.max_groups_per_step < self.min_signal_groups:
            raise ValueError(
                f"--max-groups-per-step {self.max_groups_per_step} cannot hold --min-signal-groups "
                f"{self.min_signal_groups}"
            )
        if self.max_staleness < 0:
            raise ValueError("--max-staleness must be >= 0")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ValueError("--time-budget must be a positive number of seconds")

    @property
    def groups_ahead(self) -> int:
        """Async: how many groups may be generating at once. A group launched now is consumed at the
        latest by the update `max_staleness` versions on, so no sample is too stale to use (the
        capacity rule: generation is throttled instead of thrown away)."""
        return (self.max_staleness + 1) * self.tasks_per_step

    def _check_demonstrations(self) -> None:
        if self.sft_steps < 0 or self.sft_batch < 1:
            raise ValueError("--sft-steps must be >= 0 and --sft-batch >= 1")
        if self.from_run is None:
            if self.sft_steps:
                raise ValueError("--sft-steps imitates demonstrations: name their run with --from-run")
            return
        if self.algorithm == "sft":
            if self.sft_steps not in (0, self.steps):
                raise ValueError("with --algorithm sft every step imitates --from-run: drop --sft-steps")
            self.sft_steps = self.steps
        elif self.sft_steps == 0:
            raise ValueError(
                f"--from-run with --algorithm {self.algorithm}: give --sft-steps N, the imitation updates "
                "before RL (RL itself trains only on the policy's own rollouts)"
            )

    @property
    def total_steps(self) -> int:
        """Every update: the imitation warm start, then the algorithm's steps."""
        return self.steps if self.algorithm == "sft" and self.from_run else self.sft_steps + self.steps


@dataclass
class FitResult:
    run_dir: Path
    val_before: float | None
    val_after: float | None
    steps: int
    history: list[dict[str, Any]]
