"""`tether train`: train an unmodified agent with RL (or SFT on its good runs) on this machine."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tether.cli.common import engine_kind, policy_server_options, request_caps
from tether.cli.experiment import open_experiment
from tether.cli.options import add_settings, settings_from_args, write_config
from tether.cli.plot_cmd import plot
from tether.cli.progress import held_out_score, step_progress
from tether.cli.quota_args import agent_quota
from tether.cli.reward_args import rewards_from_args
from tether.cli.rollout_cmd import load_inputs, warn_if_the_agent_user_reads
from tether.cli.secrets import JUDGE_KEY, TEACHER_KEY, add_secret_arg, secret_value
from tether.cli.trainer_args import coverage_config, curriculum_config
from tether.config.agent import AGENT_REWARDS
from tether.config.commands import TrainSettings
from tether.config.option import run_identity
from tether.contracts import POLICY_UPSTREAM
from tether.project import Project
from tether.rewards.rank import GroupScorer
from tether.runner import RewardError, TaskFileError, load_tasks
from tether.runner.rewards import check_reference_reader
from tether.trainer.policies import parse_policy

if TYPE_CHECKING:
    from tether.placement.base import Placement
    from tether.store import Store, Task
    from tether.trainer.loop import FitResult, Trainer, TrainerConfig

console = Console(stderr=True)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train an agent's policy model from its own runs (GRPO-style RL, or SFT)",
        description=(
            "Each step runs the agent --group-size times on --tasks-per-step tasks, turns the recorded model "
            "calls into transitions, credits each rollout against its group (LightningRL), and updates a "
            "LoRA adapter that the engine then serves as the next policy version. Held-out accuracy on "
            "--val-tasks is measured greedily before, every --val-every steps, and after. Metrics go to "
            ".tether/runs/NAME/metrics.jsonl and TensorBoard; the curve to curves.png. Running the same "
            "command again resumes the run from its last checkpoint; --fresh starts it over."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_settings(parser, TrainSettings())
    add_secret_arg(parser, JUDGE_KEY)
    add_secret_arg(parser, TEACHER_KEY)
    parser.set_defaults(command_main=run, rank_groups=True)


def _train_sampling(args: argparse.Namespace) -> dict[str, float]:
    forced: dict[str, float] = {}
    if args.train_temperature is not None:
        if not 0 < args.train_temperature <= 2:
            raise SystemExit("tether train: --train-temperature must be in (0, 2]: RL needs a sampled policy")
        forced["temperature"] = args.train_temperature
    if args.train_top_p is not None:
        if not 0 < args.train_top_p <= 1:
            raise SystemExit("tether train: --train-top-p must be in (0, 1]")
        forced["top_p"] = args.train_top_p
    return forced


def _fixed_agents(values: list[str]) -> dict[str, str | None]:
    fixed: dict[str, str | None] = {}
    for value in values:
        alias, _, url = value.partition("=")
        if not alias:
            raise SystemExit(f"tether train: --fixed-agent {value!r}: expected ALIAS or ALIAS=URL")
        fixed[alias] = url or None
    return fixed


def _latest_checkpointed(project: Project) -> str:
    runs = project.state_dir / "runs"
    existing = sorted(runs.glob("*/checkpoint"), key=lambda p: p.stat().st_mtime)
    if not existing:
        raise SystemExit(f"tether train: --resume found no checkpoint under {runs}")
    return existing[-1].parent.name


def _archive_folder(run_dir: Path) -> None:
    """--fresh: the old run folder moves to NAME~N, next to it."""
    if run_dir.exists():
        kept = (run_dir.with_name(f"{run_dir.name}~{number}") for number in itertools.count(1))
        run_dir.rename(next(path for path in kept if not path.exists()))


def run(args: argparse.Namespace) -> int:
    result = fit(args)
    curve = plot(result.history, result.run_dir / "curves.png", result.run_dir.name)
    _report(result, curve)
    return 0


def _rl_decay_steps(args: argparse.Namespace) -> int:
    """The RL updates a cosine schedule falls over: every optimizer step of the run's RL steps."""
    if args.rl_schedule != "cosine":
        return 0
    return args.steps * args.ppo_epochs * args.mini_batches


def fit(args: argparse.Namespace) -> FitResult:
    """The run the command line describes, trained (or resumed) to its end; SystemExit for bad input."""
    from tether.learner.config import TrainConfig
    from tether.trainer.loop import Trainer, TrainerConfig

    if args.n_workers is None:
        args.n_workers = args.group_size * args.tasks_per_step
    train_tasks, evaluator, agent = load_inputs(args)
    try:
        val_tasks = load_tasks(args.val_tasks) if args.val_tasks else []
        check_reference_reader(evaluator, val_tasks)
        if args.val_tasks:
            warn_if_the_agent_user_reads(args, args.val_tasks, val_tasks)
        group_scorer = _group_scorer(args, evaluator, bool(val_tasks))
        _check_val_reward(args, evaluator, bool(val_tasks))
    except (TaskFileError, RewardError) as exc:
        raise SystemExit(f"tether: {exc}") from None
    if evaluator is None and group_scorer is None:
        console.print("[yellow]no --reward: only rewards the agent reports itself will count[/]")
    try:
        policy = TrainConfig(
            model=args.model,
            lora=not args.full,
            lora_r=args.lora_r,
            lr=args.lr,
            kl_coef=args.kl_coef,
            micro_batch_tokens=args.micro_batch_tokens,
            share_prefixes=not args.no_shared_prefixes,
            seed=args.seed,
            clip_low=args.clip_low,
            clip_high=args.clip_high,
            tis_cap=args.tis_cap or None,
            tis_mode=args.tis_mode,
            tis_level=args.tis_level,
            rl_lr=args.rl_lr,
            rl_warmup_steps=args.rl_warmup_steps,
            rl_decay_steps=_rl_decay_steps(args),
            rl_start_step=args.sft_steps if args.from_run and args.algorithm != "sft" else 0,
            ppo_epochs=args.ppo_epochs,
            mini_batches=args.mini_batches,
            loss_agg=args.loss_agg,
        )
        config = TrainerConfig(
            model=args.model,
            algorithm=args.algorithm,
            steps=args.steps,
            group_size=args.group_size,
            tasks_per_step=args.tasks_per_step,
            n_workers=args.n_workers,
            timeout_s=args.timeout,
            max_attempts=args.max_attempts,
            val_every=args.val_every,
            time_budget_s=args.time_budget,
            checkpoint_every=args.checkpoint_every,
            merge=not args.no_merge,
            agents=args.train_agent,
            fixed_agents=_fixed_agents(args.fixed_agent or []),
            policies=[parse_policy(value) for value in args.policy or []],  # PolicySpecError is a ValueError
            async_mode=args.async_mode,
            max_staleness=args.max_staleness,
            from_run=args.from_run,
            sft_steps=args.sft_steps,
            sft_batch=args.sft_batch,
            sft_threshold=args.sft_min_reward,
            seed=args.seed,
            primary_reward=args.primary_reward,
            val_reward=args.val_reward,
            agent_rewards=AGENT_REWARDS[args.agent_rewards],
            air=not args.no_air,
            policy=policy,
            policy_server=engine_kind(args),
            wandb_project=args.wandb,
            train_sampling=_train_sampling(args),
            min_signal_groups=args.min_signal_groups,
            max_groups_per_step=args.max_groups_per_step,
            curriculum=curriculum_config(args),
            coverage=coverage_config(args),
            teacher=_teacher(args),
            agent_quota=agent_quota(args),
            caps=request_caps(args),
        )
    except ValueError as exc:
        raise SystemExit(f"tether train: {exc}") from None
    project = Project.at(args.project_dir)
    if args.resume and args.run is None:
        args.run = _latest_checkpointed(project)

    def check(store: Store, placement: Placement) -> None:
        if args.ray is not None and args.learner_ranks > 1:  # the placement's learner: ranks on Ray
            if config.policies:
                raise SystemExit(
                    "tether train: several policies (--policy) are trained by the local learner for now: "
                    "drop --learner-ranks, or train one policy"
                )
        if config.from_run is not None:
            _check_demonstrations(store, config, train_tasks, val_tasks)

    named, shape = run_identity(settings_from_args(args), "train")  # from the settings' declarations
    all_tasks = [*train_tasks, *val_tasks]
    experiment = open_experiment(
        args, "train", console, train_tasks, agent, named, shape, pool_tasks=all_tasks, check=check
    )
    store, record = experiment.store, experiment.record
    run_dir = project.state_dir / "runs" / record.name
    if args.fresh:
        _archive_folder(run_dir)
    config.server_options = policy_server_options(args, POLICY_UPSTREAM, run_dir)
    _keep_settings(args, record.name, run_dir)
    trainer = Trainer(
        config,
        run_dir,
        store,
        experiment.authority,
        run=record,
        pools=experiment.pools,
        placement=experiment.placement,
    )
    console.print(f"run folder: {run_dir}")
    try:
        with step_progress(console, config.total_steps) as show:
            trainer.on_step = show
            result = _fit(trainer, agent, train_tasks, val_tasks, evaluator, group_scorer=group_scorer)
    finally:
        agent.close()
    store.close()
    return result


def _keep_settings(args: argparse.Namespace, name: str, run_dir: Path) -> None:
    """The run folder's config.toml: this command line's settings, naming the run, so that
    `tether train --config RUN_DIR/config.toml` resumes it."""
    settings = settings_from_args(args)
    settings.run.name, settings.run.fresh, settings.run.resume = name, False, False
    write_config(settings, run_dir / "config.toml", "train")


def _check_demonstrations(
    store: Store, config: TrainerConfig, train_tasks: list[Task], val_tasks: list[Task]
) -> None:
    """Before any model loads: the --from-run run has rollouts to imitate, of training tasks only."""
    from tether.adapters.demonstrations import NoDemonstrations
    from tether.trainer.imitation import demonstrated_rollouts

    try:
        found = demonstrated_rollouts(store, config, train_tasks, val_tasks)
    except NoDemonstrations as exc:
        store.close()
        raise SystemExit(f"tether train: --from-run: {exc}") from None
    console.print(f"imitating {len(found)} successful rollouts of run {config.from_run}")


def _check_val_reward(args: argparse.Namespace, evaluator: Any, validates: bool) -> None:
    if args.val_reward is None:
        return
    if not validates:
        raise RewardError("--val-reward names the reward of held-out rollouts: give --val-tasks")
    if evaluator is None:
        raise RewardError(
            "--val-reward reads a reward that a --reward source records (the agent's own never count)"
        )


def _group_scorer(args: argparse.Namespace, evaluator: Any, validates: bool) -> GroupScorer | None:
    """The --reward that ranks whole groups, if one does; RewardError where it cannot be used."""
    scorer = rewards_from_args(args)[1]
    if scorer is None:
        return None
    if args.algorithm == "sft":
        raise RewardError("--algorithm sft imitates demonstrations: a ranking judge has no group to rank")
    if validates and evaluator is None:
        raise RewardError(
            "a held-out rollout is scored alone, and judge-rank:... ranks groups: add a --reward that scores "
            "each rollout (an evaluator, or judge:RUBRIC.md) for --val-tasks"
        )
    return scorer


def _teacher(args: argparse.Namespace) -> Any:
    from tether.trainer.distill import Teacher

    if args.teacher is None:
        return None
    return Teacher(
        url=args.teacher, model=args.teacher_model, api_key=secret_value(args, TEACHER_KEY) or "none"
    )


def _fit(trainer: Trainer, *inputs: Any, **options: Any) -> FitResult:
    """`trainer.fit`, with a policy server that cannot start, or a learner rank lost, reported in one
    line."""
    from tether.curriculum.pools import CurriculumError
    from tether.learner.errors import LearnerLost
    from tether.policy_server import PolicyServerError
    from tether.trainer.distill import TeacherError

    try:
        return trainer.fit(*inputs, **options)
    except (PolicyServerError, LearnerLost, CurriculumError, TeacherError, RewardError) as exc:
        raise SystemExit(f"tether train: {exc}") from None


def _report(result: FitResult, curve: Path) -> None:
    validations = [r for r in result.history if r.get("kind") == "val"]
    first, last = (validations[0], validations[-1]) if validations else (None, None)
    Console().print(
        f"\n[bold]held-out accuracy before: {held_out_score(result.val_before, first)}   "
        f"after: {held_out_score(result.val_after, last)}[/]  "
        f"({result.steps} steps; metrics {result.run_dir / 'metrics.jsonl'}; curve {curve})"
    )
