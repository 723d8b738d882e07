"""A training run from its settings tree: what `tether train` and `tether.train` run.

    import tether

    settings = tether.TrainSettings()
    settings.agent.command = "python my_agent.py --q {question}"
    settings.tasks.file = "train.jsonl"
    settings.rewards.reward = ["my_reward.py:score"]
    result = tether.train(settings)          # what `tether train` runs, every feature included
    print(result.val_after, result.run_dir)

The tree is the one `--print-config` prints and `--config` reads, so a run started here and one started
from the shell with the same settings are the same run (and resume each other). `fit`

reads and checks the inputs, builds the learner's and the trainer's configs, opens the experiment
(`open_experiment`), keeps the resolved settings in the run folder (`config.toml`, which reruns and
resumes the run) and trains to the end (or resumes from the last checkpoint)."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tether.config.agent import AGENT_REWARDS
from tether.config.commands import TrainSettings
from tether.config.files import write_config
from tether.config.option import Setting, run_identity, tree_settings
from tether.contracts import POLICY_UPSTREAM
from tether.curriculum.pools import CurriculumConfig
from tether.experiment.assembly import open_experiment
from tether.experiment.errors import SettingsError
from tether.experiment.inputs import agent_quota, load_inputs, request_caps, warn_if_the_agent_user_reads
from tether.experiment.progress import step_progress
from tether.experiment.rewards import rewards_of
from tether.experiment.secrets import Secrets
from tether.experiment.serving import engine_kind, policy_server_options
from tether.experiment.sessions import fit_from_sessions
from tether.project import Project
from tether.rewards.rank import GroupScorer
from tether.runner import RewardError, TaskFileError, load_tasks
from tether.runner.rewards import check_reference_reader
from tether.trainer.coverage import CoverageConfig
from tether.trainer.policies import parse_policy

if TYPE_CHECKING:
    from tether.learner.config import TrainConfig
    from tether.placement.base import Placement
    from tether.store import Store, Task
    from tether.trainer.loop import FitResult, Trainer, TrainerConfig

console = Console(stderr=True)
SESSIONS_NEED_NOT = ("agent.command", "tasks.file")  # what --from-sessions runs without


def train(settings: TrainSettings, secrets: Secrets | None = None) -> FitResult:
    """Train (or resume) the run `settings` describe, as `tether train` would; its FitResult. The keys
    (`secrets`) default to their environment variables. Bad settings or inputs raise SettingsError."""
    if not isinstance(settings, TrainSettings):
        raise TypeError(f"tether.train takes a tether.config.TrainSettings, not {type(settings).__name__}")
    missing = [s.key for s in tree_settings(TrainSettings) if s.flag.required and _unset(settings, s)]
    if settings.sessions.from_sessions is not None:  # trained on recorded sessions: no agent runs
        missing = [key for key in missing if key not in SESSIONS_NEED_NOT]
    if missing:
        raise SettingsError(f"tether train: set {', '.join(missing)}")
    try:
        return fit(settings, secrets)
    except SystemExit as exc:  # a refusal deeper down (the loop's), worded for the command line
        if isinstance(exc.code, str):
            raise SettingsError(exc.code) from None
        raise


def _unset(settings: TrainSettings, setting: Setting) -> bool:
    return getattr(getattr(settings, setting.section), setting.name) in (None, "", [])


def fit(settings: TrainSettings, secrets: Secrets | None = None) -> FitResult:
    """The run `settings` describe, trained (or resumed) to its end; SettingsError for bad input. The
    settings are copied: the caller's tree is left as it was."""
    from tether.trainer.loop import Trainer

    settings = copy.deepcopy(settings)
    if settings.sessions.from_sessions is not None:
        return fit_from_sessions(settings)
    if settings.agent.command is None or settings.tasks.file is None:
        raise SettingsError("tether train: give --agent and --tasks, or --from-sessions RUN")
    secrets = secrets or Secrets.from_environment()
    if settings.agent.n_workers is None:
        settings.agent.n_workers = settings.sampling.group_size * settings.sampling.tasks_per_step
    train_tasks, evaluator, agent = load_inputs(settings, secrets.judge_key)
    val_file = settings.validation.tasks
    try:
        val_tasks = load_tasks(val_file) if val_file else []
        check_reference_reader(evaluator, val_tasks)
        if val_file:
            warn_if_the_agent_user_reads(settings, val_file, val_tasks)
        group_scorer = _group_scorer(settings, secrets, evaluator, bool(val_tasks))
        _check_val_reward(settings, evaluator, bool(val_tasks))
    except (TaskFileError, RewardError) as exc:
        agent.close()
        raise SettingsError(f"tether: {exc}") from None
    if evaluator is None and group_scorer is None:
        console.print("[yellow]no --reward: only rewards the agent reports itself will count[/]")
    try:
        config = trainer_config(settings, secrets)
    except ValueError as exc:
        agent.close()
        raise SettingsError(f"tether train: {exc}") from None
    project = Project.at(settings.store.project_dir)
    if settings.run.resume and settings.run.name is None:
        settings.run.name = _latest_checkpointed(project)

    def check(store: Store, placement: Placement) -> None:
        if settings.ray.ray is not None and settings.ray.learner_ranks > 1 and config.policies:
            raise SettingsError(
                "tether train: several policies (--policy) are trained by the local learner for now: "
                "drop --learner-ranks, or train one policy"
            )
        if config.from_run is not None:
            _check_demonstrations(store, config, train_tasks, val_tasks)

    named, shape = run_identity(settings, "train")  # from the settings' declarations
    experiment = open_experiment(
        settings,
        "train",
        console,
        train_tasks,
        agent,
        named,
        shape,
        pool_tasks=[*train_tasks, *val_tasks],
        check=check,
    )
    store, record = experiment.store, experiment.record
    run_dir = project.state_dir / "runs" / record.name
    if settings.run.fresh:
        _archive_folder(run_dir)
    config.server_options = policy_server_options(
        settings.server,
        None,
        None,
        POLICY_UPSTREAM,
        run_dir,
        need_pause=settings.sampling.async_mode,
        lora_rank=settings.learner.lora_r,
    )
    _keep_settings(settings, record.name, run_dir)
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


def trainer_config(settings: TrainSettings, secrets: Secrets) -> TrainerConfig:
    """The trainer's config (the learner's inside it) from the settings; ValueError for a bad one."""
    from tether.trainer.loop import TrainerConfig

    s = settings
    return TrainerConfig(
        model=s.server.model,
        algorithm=s.learner.algorithm,
        steps=s.schedule.steps,
        group_size=s.sampling.group_size,
        tasks_per_step=s.sampling.tasks_per_step,
        n_workers=s.agent.n_workers or 1,
        timeout_s=s.agent.timeout,
        max_attempts=s.agent.max_attempts,
        val_every=s.validation.every,
        time_budget_s=s.schedule.time_budget,
        checkpoint_every=s.schedule.checkpoint_every,
        merge=not s.learner.no_merge,
        agents=s.learner.train_agent,
        fixed_agents=_fixed_agents(s.learner.fixed_agent or []),
        policies=[parse_policy(value) for value in s.learner.policy or []],  # PolicySpecError: a ValueError
        async_mode=s.sampling.async_mode,
        max_staleness=s.sampling.max_staleness,
        from_run=s.imitation.from_run,
        sft_steps=s.imitation.sft_steps,
        sft_batch=s.imitation.sft_batch,
        sft_threshold=s.imitation.sft_min_reward,
        seed=s.run.seed,
        primary_reward=s.rewards.primary_reward,
        val_reward=s.validation.reward,
        agent_rewards=AGENT_REWARDS[s.agent.agent_rewards],
        air=not s.agent.no_air,
        policy=learner_config(s),
        policy_server=engine_kind(s.server),
        wandb_project=s.run.wandb,
        train_sampling=_train_sampling(s),
        min_signal_groups=s.sampling.min_signal_groups,
        max_groups_per_step=s.sampling.max_groups_per_step,
        curriculum=curriculum_config(s),
        coverage=coverage_config(s),
        teacher=_teacher(s, secrets.teacher_key),
        agent_quota=agent_quota(s.quota),
        caps=request_caps(s.caps.max_tokens_cap, s.caps.n_cap, "train"),
    )


def learner_config(s: TrainSettings) -> TrainConfig:
    """The policy update's settings."""
    from tether.learner.config import TrainConfig

    rl_after_sft = s.imitation.from_run and s.learner.algorithm != "sft"
    return TrainConfig(
        model=s.server.model,
        lora=not s.learner.full,
        lora_r=s.learner.lora_r,
        lr=s.learner.lr,
        kl_coef=s.learner.kl_coef,
        micro_batch_tokens=s.learner.micro_batch_tokens,
        share_prefixes=not s.learner.no_shared_prefixes,
        seed=s.run.seed,
        clip_low=s.update.clip_low,
        clip_high=s.update.clip_high,
        tis_cap=s.update.tis_cap or None,
        tis_mode=s.update.tis_mode,
        tis_level=s.update.tis_level,
        rl_lr=s.learner.rl_lr,
        rl_warmup_steps=s.learner.rl_warmup_steps,
        rl_decay_steps=_rl_decay_steps(s),
        rl_start_step=s.imitation.sft_steps if rl_after_sft else 0,
        ppo_epochs=s.update.ppo_epochs,
        mini_batches=s.update.mini_batches,
        loss_agg=s.update.loss_agg,
    )


def coverage_config(s: TrainSettings) -> CoverageConfig:
    """The held-out coverage settings (a ValueError for a bad one)."""
    return CoverageConfig(
        k=s.validation.k,
        temperature=s.validation.temperature,
        pass_reward=s.validation.pass_reward,
        at_start=not s.validation.no_base_coverage,
    )


def curriculum_config(s: TrainSettings) -> CurriculumConfig:
    """The curriculum settings; raises CurriculumError for a bad combination."""
    c = s.curriculum
    return CurriculumConfig(
        retire_after=c.retire_after,
        park_after=c.park_after,
        revisit_every=c.revisit_every,
        mixed_first=c.mixed_first,
        success=c.success_reward,
        history_runs=tuple(dict.fromkeys(c.curriculum_from or ())),
        probe=c.probe,
    )


def _rl_decay_steps(s: TrainSettings) -> int:
    """The RL updates a cosine schedule falls over: every optimizer step of the run's RL steps."""
    if s.learner.rl_schedule != "cosine":
        return 0
    return s.schedule.steps * s.update.ppo_epochs * s.update.mini_batches


def _train_sampling(s: TrainSettings) -> dict[str, float]:
    forced: dict[str, float] = {}
    temperature, top_p = s.sampling.train_temperature, s.sampling.train_top_p
    if temperature is not None:
        if not 0 < temperature <= 2:
            raise SettingsError(
                "tether train: --train-temperature must be in (0, 2]: RL needs a sampled policy"
            )
        forced["temperature"] = temperature
    if top_p is not None:
        if not 0 < top_p <= 1:
            raise SettingsError("tether train: --train-top-p must be in (0, 1]")
        forced["top_p"] = top_p
    return forced


def _fixed_agents(values: list[str]) -> dict[str, str | None]:
    fixed: dict[str, str | None] = {}
    for value in values:
        alias, _, url = value.partition("=")
        if not alias:
            raise SettingsError(f"tether train: --fixed-agent {value!r}: expected ALIAS or ALIAS=URL")
        fixed[alias] = url or None
    return fixed


def _latest_checkpointed(project: Project) -> str:
    runs = project.state_dir / "runs"
    existing = sorted(runs.glob("*/checkpoint"), key=lambda p: p.stat().st_mtime)
    if not existing:
        raise SettingsError(f"tether train: --resume found no checkpoint under {runs}")
    return existing[-1].parent.name


def _archive_folder(run_dir: Path) -> None:
    """--fresh: the old run folder moves to NAME~N, next to it."""
    if run_dir.exists():
        kept = (run_dir.with_name(f"{run_dir.name}~{number}") for number in itertools.count(1))
        run_dir.rename(next(path for path in kept if not path.exists()))


def _keep_settings(settings: TrainSettings, name: str, run_dir: Path) -> None:
    """The run folder's config.toml: these settings, naming the run, so that `tether train --config
    RUN_DIR/config.toml` resumes it."""
    kept = copy.deepcopy(settings)
    kept.run.name, kept.run.fresh, kept.run.resume = name, False, False
    write_config(kept, run_dir / "config.toml", "train")


def _check_demonstrations(
    store: Store, config: TrainerConfig, train_tasks: list[Task], val_tasks: list[Task]
) -> None:
    """Before any model loads: the --from-run run has rollouts to imitate, of training tasks only."""
    from tether.adapters.demonstrations import NoDemonstrations
    from tether.trainer.imitation import demonstrated_rollouts

    try:
        found = demonstrated_rollouts(store, config, train_tasks, val_tasks)
    except NoDemonstrations as exc:
        raise SettingsError(f"tether train: --from-run: {exc}") from None
    console.print(f"imitating {len(found)} successful rollouts of run {config.from_run}")


def _check_val_reward(settings: TrainSettings, evaluator: Any, validates: bool) -> None:
    if settings.validation.reward is None:
        return
    if not validates:
        raise RewardError("--val-reward names the reward of held-out rollouts: give --val-tasks")
    if evaluator is None:
        raise RewardError(
            "--val-reward reads a reward that a --reward source records (the agent's own never count)"
        )


def _group_scorer(
    settings: TrainSettings, secrets: Secrets, evaluator: Any, validates: bool
) -> GroupScorer | None:
    """The --reward that ranks whole groups, if one does; RewardError where it cannot be used."""
    scorer = rewards_of(settings.rewards, secrets.judge_key, rank_groups=True)[1]
    if scorer is None:
        return None
    if settings.learner.algorithm == "sft":
        raise RewardError("--algorithm sft imitates demonstrations: a ranking judge has no group to rank")
    if validates and evaluator is None:
        raise RewardError(
            "a held-out rollout is scored alone, and judge-rank:... ranks groups: add a --reward that scores "
            "each rollout (an evaluator, or judge:RUBRIC.md) for --val-tasks"
        )
    return scorer


def _teacher(s: TrainSettings, teacher_key: str | None) -> Any:
    from tether.trainer.distill import Teacher

    if s.learner.teacher is None:
        return None
    return Teacher(url=s.learner.teacher, model=s.learner.teacher_model, api_key=teacher_key or "none")


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
        raise SettingsError(f"tether train: {exc}") from None
