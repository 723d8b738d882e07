"""The training loop, top to bottom: run the agent, read its traces, credit the calls, update, serve.

    sync:  [rollouts of step k with policy v_k] -> transitions -> advantages -> update -> v_{k+1}
    async: groups keep running while the trainer updates; before each update the gateway stops admitting
           new model calls, in-flight calls drain, the adapter is swapped, and admission resumes. Tokens
           generated more than `max_staleness` versions back are left out of the loss
           (`tether.trainer.staleness`).

The loop knows two seams, both injected or opened by name from their registries: the policy server
(`tether.policy_server`: the version it serves, the gateway upstream, loading new weights) and the
learner (`tether.trainer.learner`: the update, saving weights and checkpoints). Each saved version gets
its own folder (`policies/vN`), so a server elsewhere can load N while still serving N-1.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import shutil
import statistics
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from tether.adapters import Transition, TransitionReport, transitions_of
from tether.adapters.demonstrations import NoDemonstrations, build_demonstrations, demonstration_rollouts
from tether.algorithms import AdvantageBatch, assign_advantages, imitation_batch
from tether.algorithms.advantages import UnreproducibleSampling, advantage_method
from tether.algorithms.distill import distill_advantages
from tether.contracts import ALGORITHMS, DEFAULT_ROUTE, DISTILLATION, POLICY_UPSTREAM, Meta
from tether.gateway import HTTPUpstream, HTTPUpstreamConfig
from tether.gateway.upstreams import Upstream
from tether.limits import AgentQuota
from tether.models.chat_template import ChatTemplate
from tether.policy_server import (
    PolicyServer,
    PolicyServerOptions,
    PolicyWeights,
    ServesSeveralPolicies,
    open_policy_server,
)
from tether.rewards.rank import GroupScorer
from tether.runner import AIRRules, Runner, RunnerConfig
from tether.runner.agents import Agent
from tether.runner.driver import RolloutOutcome
from tether.runner.pool import WorkerPool
from tether.runner.rewards import Evaluator, RewardError
from tether.runner.runner import PoolFactory
from tether.runner.runs import RunRecord, cancel_queued
from tether.stack import LocalStack, local_stack
from tether.store import RolloutRequest, Store, Task
from tether.store.auth import TokenAuthority
from tether.store.reward_rule import named_reward
from tether.trainer.config import TrainConfig
from tether.trainer.coverage import CoverageConfig, greedy_record, sampled_record
from tether.trainer.curriculum import Curriculum, CurriculumConfig, CurriculumExhausted
from tether.trainer.cursor import TaskCursor
from tether.trainer.distill import Teacher, TeacherError, check_teacher, score_transitions
from tether.trainer.learner import Learner, TrainingDiverged, open_learner
from tether.trainer.metrics import MetricsLog
from tether.trainer.placement import LocalPlacement, Placement
from tether.trainer.policies import PolicySpec, check_policies, policy_of, split_batch
from tether.trainer.probe import probe_record
from tether.trainer.ranking import rank_groups
from tether.trainer.stages import agent_cpu_seconds, engine_counts, engine_stats, stage_stats_of
from tether.trainer.staleness import fresh_transitions

console = Console(stderr=True)
VAL_SAMPLES_LOGGED = 8  # rollouts of each validation in the W&B samples table
POLICY_VERSIONS_KEPT = 3  # policy folders kept on disk: the served one, the one before, the next


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
    learner: str = "local"  # a kind registered in tether.trainer.learner
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


class Trainer:
    """`Trainer(config, run_dir, store, auth).fit(agent, train_tasks, val_tasks, evaluator)` trains an
    unmodified agent. The policy server and the learner (`learners`, by policy name, with several
    policies) are opened from `config` unless given."""

    def __init__(
        self,
        config: TrainerConfig,
        run_dir: Path,
        store: Store,
        auth: TokenAuthority,
        *,
        policy_server: PolicyServer | None = None,
        learner: Learner | None = None,
        learners: dict[str, Learner] | None = None,
        run: RunRecord | None = None,
        pools: PoolFactory | None = None,
        placement: Placement | None = None,
    ) -> None:
        self.config = config
        # Where agents, the policy server and the learner run (`placement.py`); what it leaves to the
        # trainer is opened here. `pools`: the runner's own pool factory (--runner; None: worker processes).
        self.placement: Placement = placement or LocalPlacement()
        self.pools = self.placement.pools(auth, pools)
        self.run_dir = run_dir
        self.store = store
        self.auth = auth
        self.policy_server = policy_server
        self.learner = learner
        self.learners = learners  # several policies' learners, by name (else opened from config)
        self.run = run
        self.log = MetricsLog(run_dir, config.wandb_project)
        self.history: list[dict[str, Any]] = []
        self.on_step: Callable[[dict[str, Any]], None] | None = None

    # -- setup ----------------------------------------------------------------------------------------

    def fit(
        self,
        agent: Agent,
        train_tasks: Sequence[Task],
        val_tasks: Sequence[Task] = (),
        evaluator: Evaluator | None = None,
        resume: bool = False,
        group_scorer: GroupScorer | None = None,
    ) -> FitResult:
        if not train_tasks:
            raise ValueError("no training tasks")
        config = self.config
        if config.teacher is not None:
            from transformers import AutoTokenizer

            from tether.models.catalog import resolve_model

            check_teacher(config.teacher, AutoTokenizer.from_pretrained(resolve_model(config.model)))
        opened: list[PolicyServer] = []
        with console.status(f"loading {config.model} for serving and for training ..."):
            server = self.policy_server or self._placed_server(opened)
            server = server or self._open_server(POLICY_UPSTREAM, opened)
            learners = self._learners()
        try:
            upstreams, routes = self._fixed_upstreams(opened)
            policy_upstreams, policy_routes = self._policy_upstreams(server)
            with local_stack(
                self.store,
                self.auth,
                [*policy_upstreams, *upstreams],
                routes={**routes, **policy_routes},
                hold_limit_s=600,
                host=self.placement.host,
                agent_quota=self.config.agent_quota,
            ) as stack:
                runner = Runner(
                    self.store,
                    agent,
                    stack.endpoints,
                    evaluator,
                    RunnerConfig(
                        n_workers=config.n_workers,
                        timeout_s=config.timeout_s,
                        primary_reward=config.primary_reward,
                        agent_rewards=config.agent_rewards,
                        air=AIRRules() if config.air else AIRRules.off(),
                    ),
                    run=None if self.run is None else self.run.name,
                    pools=self.pools,
                )
                session = _Session(
                    self, server, learners, runner, stack, train_tasks, val_tasks, group_scorer
                )
                session.unrouted = stack.gateway.unrouted
                return asyncio.run(session.run(resume))
        finally:
            for opened_server in opened:
                opened_server.close()
            self.log.close()

    def _open_server(self, name: str, opened: list[PolicyServer], kind: str | None = None) -> PolicyServer:
        options = self.config.server_options or PolicyServerOptions(model=self.config.model)
        options = replace(
            options,
            model=self.config.model,
            name=name,
            builtin=replace(
                options.builtin, max_batch_size=self.config.n_workers, threads=self.config.engine_threads
            ),
            policies=max(1, len(self.config.policies)),
        )
        server = open_policy_server(kind or self.config.policy_server, options)
        opened.append(server)
        return server

    def _placed_server(self, opened: list[PolicyServer]) -> PolicyServer | None:
        """The placement's policy server (replicas), closed with the run; None: the trainer opens one."""
        options = self.config.server_options or PolicyServerOptions(model=self.config.model)
        options = replace(options, model=self.config.model)
        server = self.placement.policy_server(self.config.policy_server, options)
        if server is not None:
            opened.append(server)
        return server

    def _learners(self) -> dict[str, Learner]:
        """One learner per trained policy, each with its own adapter and optimizer."""
        config = self.config
        if not config.policies:
            placed = self.learner or self.placement.learner(config.policy)
            return {POLICY_UPSTREAM: placed or open_learner(config.learner, config.policy)}
        if self.learners is not None:
            if set(self.learners) != set(config.policy_names):
                raise ValueError(
                    f"learners given for {sorted(self.learners)}, policies {config.policy_names}"
                )
            return self.learners
        if self.learner is not None:
            raise ValueError("a learner given to Trainer trains one policy: give learners= for several")
        return {
            spec.name: open_learner(config.learner, spec.train_config(config.policy))
            for spec in config.policies
        }

    def _policy_upstreams(self, server: PolicyServer) -> tuple[list[Upstream], dict[str, str]]:
        """The trained policies' upstreams and routes. With several, each alias routes to its own
        adapter and no other alias is served (the default route is dropped: `unrouted` names them)."""
        if not self.config.policies:
            return [server.upstream()], {}
        if not isinstance(server, ServesSeveralPolicies):
            raise ValueError(f"{type(server).__name__} serves one policy: several need the built-in engine")
        names = self.config.policy_names
        return [server.policy_upstream(name) for name in names], {name: name for name in names}

    def _fixed_upstreams(self, opened: list[PolicyServer]) -> tuple[list[Upstream], dict[str, str]]:
        """An upstream per fixed agent's model alias, and the routes to them. The base model (a second,
        frozen copy, never given new weights) is loaded only when some fixed agent uses it."""
        upstreams: list[Upstream] = []
        routes = {} if self.config.policies else {DEFAULT_ROUTE: POLICY_UPSTREAM}
        base: PolicyServer | None = None
        for alias, url in self.config.fixed_agents.items():
            if url is None:
                if base is None:
                    # The frozen base model runs in the built-in engine, whatever serves the policy.
                    base = self._open_server("base", opened, kind="builtin")
                    upstreams.append(base.upstream())
                routes[alias] = "base"
            else:
                name = f"fixed:{alias}"
                upstreams.append(HTTPUpstream(HTTPUpstreamConfig(name=name, base_url=url)))
                routes[alias] = name
        return upstreams, routes

    def record(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        self.log.write(record)
        if self.on_step is not None:
            self.on_step(record)


@dataclass
class _Session:
    trainer: Trainer
    server: PolicyServer
    learners: dict[str, Learner]  # by policy name; one, `policy`, unless several are trained
    runner: Runner
    stack: LocalStack
    train_tasks: Sequence[Task]
    val_tasks: Sequence[Task]
    group_scorer: GroupScorer | None = None  # scores each group's rollouts together (a ranking judge)
    cursor: Curriculum = field(init=False)
    # Demonstration transitions, one list per rollout, and the cursor that walks them.
    demonstrations: TaskCursor[list[Transition]] = field(init=False)
    step: int = 0
    # Several policies: how many updates each has had (its version), and the model aliases the
    # gateway refused because no policy or fixed agent serves them.
    versions: dict[str, int] = field(default_factory=dict)
    unrouted: Counter[str] = field(default_factory=Counter)
    step_started: float = field(init=False, default=0.0)  # monotonic start of the step being collected
    # Every update runs on this one thread: torch's CPU allocations then stay in one malloc arena
    # instead of each pool thread keeping its own multi-GB arena (measured: 15 GB vs 6 GB peak).
    update_thread: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        trainer = self.trainer
        run = None if trainer.run is None else trainer.run.name
        self.cursor = Curriculum(
            self.train_tasks, trainer.config.seed, trainer.store, run, self.config.curriculum
        )
        self.demonstrations = TaskCursor([], self.trainer.config.seed)
        self.update_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-update")

    @property
    def config(self) -> TrainerConfig:
        return self.trainer.config

    async def run(self, resume: bool) -> FitResult:
        run = self.trainer.run
        if self.config.from_run is not None:
            self.demonstrations.tasks = await asyncio.to_thread(self._load_demonstrations)
        if resume or (run is not None and run.resumed):
            await self._restore()
        if run is not None and run.resumed:
            # What the dead run had queued belongs to its lost future: it is not run now.
            await asyncio.to_thread(cancel_queued, self.trainer.store, run.name, "the run was resumed")
        self.runner.start()
        try:
            val_before = await self.validate(before=True) if self.step == 0 else self._last_val()
            self.step_started = time.monotonic()
            while self.step < self.config.sft_steps and not self._out_of_time():
                await self._update(*self._demonstration_batch())
            if self.config.curriculum.probe and not self._probed():
                await self._probe()
                self.step_started = time.monotonic()  # the probe is not the first RL step's time
            await (self._train_async() if self.config.async_mode else self._train_sync())
            val_after = await self.validate() if self.val_tasks else None
        finally:
            await self.runner.stop()
            self.update_thread.shutdown(wait=True)
        return FitResult(self.trainer.run_dir, val_before, val_after, self.step, self.trainer.history)

    # -- data -----------------------------------------------------------------------------------------

    def _key(self, label: str, tag: str, sample: int) -> str | None:
        """Keys within the run; each start of the run has its own, since a resumed run's policy after
        the checkpoint is not the one that made the earlier rollouts."""
        run = self.trainer.run
        return None if run is None else f"{run.starts}.{label}/{tag}#{sample}"

    def _group_requests(self, tasks: Sequence[Task], label: str) -> list[RolloutRequest]:
        metadata: dict[str, Any] = {Meta.STEP: self.step}
        if self.config.train_sampling:
            metadata[Meta.SAMPLING_OVERRIDES] = dict(self.config.train_sampling)
        return [
            RolloutRequest(
                task=task,
                mode="train",
                group_id=f"{tag}@{label}",
                max_attempts=self.config.max_attempts,
                metadata=metadata,
                key=self._key(label, tag, sample),
                sample=sample,
            )
            for task, tag in zip(tasks, _group_tags(tasks), strict=True)
            for sample in range(self.config.group_size)
        ]

    async def _collect(self, requests: Sequence[RolloutRequest]) -> tuple[list[Transition], dict[str, Any]]:
        started, cpu_before, engine_before = time.monotonic(), agent_cpu_seconds(), engine_counts(self.server)
        outcomes = await self.runner.run(requests)
        engine = engine_stats(engine_before, engine_counts(self.server))
        agent_cpu = agent_cpu_seconds() - cpu_before
        self._refuse_unrouted()
        ranked = None
        if self.group_scorer is not None:
            ranked = await rank_groups(self.trainer.store, self.group_scorer, requests, outcomes)
        # Read after the ranking, which records rewards: this one read serves everything below.
        records = await asyncio.to_thread(self.trainer.store.read_rollouts, [o.rollout_id for o in outcomes])
        report = await asyncio.to_thread(
            transitions_of,
            records,
            merge=self.config.merge,
            agents=self.config.agents,
            exclude_agents=tuple(self.config.fixed_agents),
        )
        rewards = [o.reward if o.reward is not None else 0.0 for o in outcomes]
        if ranked is not None:
            report.transitions = [t for t in report.transitions if t.rollout_id not in ranked.left_out]
            rewards = [ranked.rewards[o.rollout_id] for o in outcomes if o.rollout_id in ranked.rewards]
        seconds = time.monotonic() - started
        stats = {
            "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
            "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            "rollouts": len(outcomes),
            "groups": len({request.group_id for request in requests}),
            "failed_rollouts": sum(o.status.value != "succeeded" for o in outcomes),
            "calls": report.calls,
            "merged_calls": report.merged,
            "merge_breaks": sum(report.merge_breaks.values()),
            "response_length": statistics.fmean(len(t.response_ids) for t in report.transitions)
            if report.transitions
            else 0.0,
            "rollout_seconds": seconds,
            "rollouts_per_s": len(outcomes) / max(seconds, 1e-9),
            **_per_agent(report),
            **engine,
            **await asyncio.to_thread(stage_stats_of, records),
        }
        stats["idle_seconds"] = max(seconds - stats["generation_seconds"], 0.0)
        if ranked is not None:
            stats["rank_failed_groups"] = ranked.failed_groups
            stats["rank_left_out_rollouts"] = len(ranked.left_out)
        if self.trainer.pools in (None, WorkerPool):  # the agents ran in this process's workers
            stats["agent_cpu_seconds"] = agent_cpu
        return report.transitions, stats

    def _probed(self) -> bool:
        """Whether this run (a resumed one included) has probed already."""
        return any(record.get("kind") == "probe" for record in self.trainer.history)

    async def _probe(self) -> None:
        """One group of every training task, not trained on (`tether.trainer.probe`): the curriculum
        counts them as rollouts of the step before RL's first."""
        started = time.monotonic()
        requests = [
            request.model_copy(update={"metadata": {**request.metadata, Meta.STEP: self.step - 1}})
            for request in self._group_requests(self.train_tasks, f"probe{self.step}")
        ]
        outcomes = await self.runner.run(requests)
        self._refuse_unrouted()
        record = probe_record(outcomes, self.config.curriculum.success)
        self.trainer.record(
            {"kind": "probe", "step": self.step, **record, "probe_seconds": time.monotonic() - started}
        )

    def _refuse_unrouted(self) -> None:
        """With several policies, an agent label (model alias) that maps to none and is not fixed stops
        the run after the first rollouts that asked for it, naming the labels seen and the known ones."""
        if not self.unrouted:
            return
        seen = ", ".join(f"{name!r} ({count} calls)" for name, count in sorted(self.unrouted.items()))
        fixed = ", ".join(self.config.fixed_agents) or "none"
        raise SystemExit(
            f"tether train: the agent asked for models that map to no policy and are not fixed: {seen}. "
            f"Policies: {', '.join(self.config.policy_names)}; fixed agents: {fixed}. Give each a "
            "--policy NAME=lora:rR or a --fixed-agent NAME."
        )

    def _load_demonstrations(self) -> list[list[Transition]]:
        """The demonstration run's transitions, grouped by rollout; only the training tasks' rollouts,
        and none at all if the run holds a held-out task's."""
        config = self.config
        assert config.from_run is not None
        rollouts = demonstration_rollouts(
            self.trainer.store,
            config.from_run,
            min_reward=config.sft_threshold,
            task_ids={task.id for task in self.train_tasks},
            held_out={task.id for task in self.val_tasks},
        )
        cache = Path(config.policy.cache_dir) if config.policy.cache_dir else None
        report = build_demonstrations(
            self.trainer.store,
            rollouts,
            ChatTemplate.for_model(config.model, cache),
            merge=config.merge,
            agents=config.agents,
            exclude_agents=tuple(config.fixed_agents),
        )
        console.print(f"demonstrations from run {config.from_run}: {report.summary()}")
        by_rollout: dict[str, list[Transition]] = {}
        for transition in report.transitions:
            by_rollout.setdefault(transition.rollout_id, []).append(transition)
        if not by_rollout:
            raise NoDemonstrations(f"run {config.from_run!r}: no call of its rollouts could be rendered")
        return list(by_rollout.values())

    def _demonstration_batch(self) -> tuple[list[Transition], dict[str, Any]]:
        picked = self.demonstrations.take(self.config.sft_batch)
        transitions = [t for rollout in picked for t in rollout]
        stats = {
            "phase": "sft",
            "reward_mean": statistics.fmean(rollout[0].reward for rollout in picked),
            "reward_std": 0.0,
            "rollouts": len(picked),
            "failed_rollouts": 0,
            "calls": sum(t.merged_calls for t in transitions),
            "merged_calls": sum(t.merged_calls - 1 for t in transitions),
            "merge_breaks": 0,
            "response_length": statistics.fmean(len(t.response_ids) for t in transitions),
            "rollout_seconds": 0.0,
            "rollouts_per_s": 0.0,
        }
        return transitions, stats

    async def _advantages(self, transitions: list[Transition], stats: dict[str, Any]) -> AdvantageBatch:
        if self.config.algorithm == "sft" or self.step < self.config.sft_steps:
            return imitation_batch(
                t for t in transitions if t.demonstration or t.reward >= self.config.sft_threshold
            )
        try:
            if self.config.algorithm == DISTILLATION:
                return await self._distilled(transitions, stats)
            return assign_advantages(transitions, method=advantage_method(self.config.algorithm))
        except (UnreproducibleSampling, TeacherError) as exc:
            raise SystemExit(f"tether train: step {self.step + 1}: {exc}") from None

    async def _distilled(self, transitions: list[Transition], stats: dict[str, Any]) -> AdvantageBatch:
        """On-policy distillation: the teacher scores the batch's tokens (`tether.algorithms.distill`)."""
        assert self.config.teacher is not None
        started = time.monotonic()
        scores = await score_transitions(self.config.teacher, transitions)
        batch, reverse_kl = distill_advantages(transitions, scores)
        stats["opd.reverse_kl"] = reverse_kl
        stats["opd.teacher_seconds"] = time.monotonic() - started
        return batch

    # -- one update -----------------------------------------------------------------------------------

    async def _update(self, transitions: list[Transition], stats: dict[str, Any]) -> None:
        batch = await self._advantages(transitions, stats)
        record: dict[str, Any] = {
            "kind": "train",
            "step": self.step + 1,
            **stats,
            "groups_used": batch.report.groups_used,
            "groups_zero_variance": batch.report.groups_zero_variance,
            "samples": len(batch.samples),
            "policy_version": self.server.policy_version,
            **{f"curriculum.{k}": v for k, v in self.cursor.pools().items()},
        }
        if batch.samples:
            parts = (
                split_batch(batch, self.config.policy_names)
                if self.config.policies
                else {POLICY_UPSTREAM: batch}
            )
            saved = [await self._update_policy(name, part, record) for name, part in parts.items()]
            swap_started = time.monotonic()
            await self._swap(saved)
            record["swap_seconds"] = time.monotonic() - swap_started
        else:
            record["skipped"] = "every group had the same reward: nothing to learn from this batch"
        self.step += 1
        record["policy_version_after"] = self.server.policy_version
        if self.config.policies:
            record.update(
                {f"policy_version.{name}": self.versions.get(name, 0) for name in self.config.policy_names}
            )
        record["step_seconds"] = time.monotonic() - self.step_started
        self.trainer.record(record)
        if self.step < self.config.total_steps and (
            (self.config.val_every and self.step % self.config.val_every == 0)
            or self.step == self.config.sft_steps
        ):
            await self.validate()
        if self.config.checkpoint_every and self.step % self.config.checkpoint_every == 0:
            await self._on_update_thread(self._checkpoint)
        self.step_started = time.monotonic()

    async def _update_policy(
        self, name: str, batch: AdvantageBatch, record: dict[str, Any]
    ) -> tuple[str, PolicyWeights]:
        """One policy's update on its share of the batch, and its next version's weights (not served
        yet). A run of one policy keeps its metrics' names (`train.loss`); several prefix them with the
        policy (`train.writer.loss`)."""
        prefix = f"{name}." if self.config.policies else ""
        try:
            update_started = time.monotonic()
            metrics = await self._on_update_thread(self.learners[name].step, batch)
            record["update_seconds"] = record.get("update_seconds", 0.0) + time.monotonic() - update_started
        except TrainingDiverged as exc:
            raise SystemExit(
                f"training diverged at step {self.step + 1}{f' (policy {name})' if prefix else ''}: {exc}. "
                f"The last good checkpoint is in {self.trainer.run_dir / 'checkpoint'}."
            ) from None
        record.update({f"train.{prefix}{k}": v for k, v in metrics.to_dict().items() if k != "step"})
        if prefix:
            record[f"samples.{name}"] = len(batch.samples)
        version = self.versions.get(name, 0) + 1 if prefix else self.step + 1
        return name, await self._on_update_thread(self._save_weights, version, name)

    async def _on_update_thread(self, function: Callable[..., Any], *args: Any) -> Any:
        result = await asyncio.get_running_loop().run_in_executor(self.update_thread, function, *args)
        release_free_memory()
        return result

    def _save_weights(self, version: int, name: str = POLICY_UPSTREAM) -> PolicyWeights:
        folder = self.trainer.run_dir / "policies"
        if self.config.policies:
            folder = folder / name
        weights = self.learners[name].save_weights(folder / f"v{version}", version)
        versions = sorted(folder.glob("v*"), key=lambda f: int(f.name[1:]) if f.name[1:].isdigit() else -1)
        for old in versions[:-POLICY_VERSIONS_KEPT]:
            shutil.rmtree(old, ignore_errors=True)
        return weights

    async def _swap(self, saved: list[tuple[str, PolicyWeights]]) -> None:
        """Serve the policies' new weights, all under one pause."""
        async with self.stack.paused() if self.config.async_mode else contextlib.nullcontext():
            await self._load(saved)

    async def _load(self, saved: list[tuple[str, PolicyWeights]]) -> None:
        await self.server.pause()
        try:
            for name, weights in saved:
                if self.config.policies:
                    assert isinstance(self.server, ServesSeveralPolicies)
                    self.versions[name] = await self.server.load_policy(weights, name)
                else:
                    await self.server.load(weights)
        finally:
            await self.server.resume()

    def _take(self, count: int) -> list[Task] | None:
        """The next tasks, or None when the curriculum has retired every one."""
        try:
            return self.cursor.take(count, step=self.step)
        except CurriculumExhausted as exc:
            console.print(f"[green]stopping at step {self.step}: {exc}[/]")
            return None

    def _out_of_time(self) -> bool:
        """Whether --time-budget is spent: the steps' own seconds in the history, so a resumed run counts
        what its earlier starts trained, and validations do not count."""
        budget = self.config.time_budget_s
        if budget is None:
            return False
        spent = sum(r.get("step_seconds", 0.0) for r in self.trainer.history if r.get("kind") == "train")
        if spent < budget:
            return False
        console.print(f"[green]stopping at step {self.step}: the time budget of {budget:g} s is spent[/]")
        return True

    async def _train_sync(self) -> None:
        while self.step < self.config.total_steps and not self._out_of_time():
            groups: list[tuple[list[Transition], dict[str, Any]]] = []
            wanted = self.config.tasks_per_step
            while wanted > 0:
                tasks = self._take(wanted)
                if tasks is None:
                    return
                label = f"step{self.step}" + (f".{len(groups)}" if groups else "")
                groups.append(await self._collect(self._group_requests(tasks, label)))
                generated = sum(stats["groups"] for _, stats in groups)
                wanted = self._more_groups([t for part, _ in groups for t in part], generated)
            transitions = [t for part, _ in groups for t in part]
            await self._update(transitions, self._sampling_stats(transitions, [s for _, s in groups], True))

    def _more_groups(self, transitions: Sequence[Transition], generated: int) -> int:
        """Dynamic sampling: how many more groups to launch for this step's batch (0: it is complete)."""
        wanted = self.config.min_signal_groups
        if not wanted or self.step < self.config.sft_steps or self.config.algorithm in ("sft", DISTILLATION):
            return 0
        missing = wanted - signal_groups(transitions)
        cap = self.config.max_groups_per_step or 0
        return max(0, min(missing, cap - generated))

    def _sampling_stats(
        self, transitions: Sequence[Transition], parts: list[dict[str, Any]], sequential: bool
    ) -> dict[str, Any]:
        """The step's metrics from its rounds of groups (`sequential`: one after another, in sync mode; else
        overlapping, in async mode), with dynamic sampling's counts and the harness's ratio."""
        stats = _merge_stats(parts, sequential) if len(parts) > 1 else dict(parts[0])
        if stats.get("generation_seconds"):
            stats["harness_ratio"] = stats["rollout_seconds"] / stats["generation_seconds"]
        generated = sum(p["groups"] for p in parts)
        with_signal = signal_groups(transitions)
        stats.update(
            groups_generated=generated,
            groups_with_signal=with_signal,
            zero_variance_fraction=1 - with_signal / generated if generated else 0.0,
        )
        return stats

    async def _train_async(self) -> None:
        in_flight: deque[asyncio.Task[tuple[list[Transition], dict[str, Any]]]] = deque()

        def fill() -> None:
            while len(in_flight) < self.config.groups_ahead and (tasks := self._take(1)) is not None:
                label = f"g{self.cursor.position}"
                in_flight.append(asyncio.create_task(self._collect(self._group_requests(tasks, label))))

        try:
            while self.step < self.config.total_steps and not self._out_of_time():
                fill()
                done: list[tuple[list[Transition], dict[str, Any]]] = []
                while in_flight:
                    done.append(await in_flight.popleft())
                    if len(done) < self.config.tasks_per_step:
                        continue
                    if not self._more_groups([t for group, _ in done for t in group], len(done)):
                        break
                    fill()  # dynamic sampling: extra groups, in the places of those consumed
                if not done:
                    return
                transitions = [t for group, _ in done for t in group]
                fresh, staleness = fresh_transitions(
                    transitions, self._version_now, self.config.max_staleness
                )
                stats = self._sampling_stats(transitions, [s for _, s in done], False)
                stats["stale_dropped"] = staleness.dropped
                stats["stale_tokens_masked"] = staleness.masked_tokens
                stats["staleness_mean"] = staleness.mean
                await self._update(fresh, stats)
        finally:
            for task in in_flight:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*in_flight, return_exceptions=True)

    # -- validation and checkpoints -------------------------------------------------------------------

    async def validate(self, before: bool = False) -> float | None:
        if not self.val_tasks:
            return None
        started = time.monotonic()
        outcomes, rewards = await self._val_run("", self.config.val_temperature, 1)
        score = statistics.fmean(rewards) if rewards else 0.0
        from tether.rewards.intervals import bootstrap_interval

        # The 95% bootstrap interval of the score, and each task's reward, so that two validations can
        # be compared task by task (tether.rewards.intervals.paired_difference_interval).
        low, high = await asyncio.to_thread(bootstrap_interval, rewards) if rewards else (score, score)
        by_task = {o.task_id: r for o, r in zip(outcomes, rewards, strict=True)}
        record = {
            "kind": "val",
            "step": self.step,
            "val_score": score,
            "val_ci_low": low,
            "val_ci_high": high,
            "val_rewards": by_task,
            "val_rollouts": len(rewards),
            "policy_version": self.server.policy_version,
            **await asyncio.to_thread(greedy_record, by_task, self.config.coverage.pass_reward),
        }
        coverage = self.config.coverage
        if coverage.k and (coverage.at_start or not before):
            record.update(await self._sampled_coverage())
        record["val_seconds"] = time.monotonic() - started
        self.trainer.record(record)
        rows = await asyncio.to_thread(_sample_rows, self.trainer.store, outcomes[:VAL_SAMPLES_LOGGED])
        self.trainer.log.samples(self.step, rows)
        return score

    async def _sampled_coverage(self) -> dict[str, Any]:
        """pass@k and mean@k: each held-out task sampled k times at the coverage temperature."""
        coverage = self.config.coverage
        outcomes, rewards = await self._val_run("k", coverage.temperature, coverage.k)
        samples: dict[str, list[float]] = {}
        for outcome, reward in zip(outcomes, rewards, strict=True):
            samples.setdefault(outcome.task_id, []).append(reward)
        return await asyncio.to_thread(sampled_record, samples, coverage)

    async def _val_run(
        self, tag: str, temperature: float, samples: int
    ) -> tuple[list[RolloutOutcome], list[float]]:
        """`samples` held-out rollouts of every task at `temperature` (group `TASK@valSTEP<tag>`), and
        their scores."""
        label = f"val{self.step}{tag}"
        overrides = {"temperature": temperature}
        requests = [
            RolloutRequest(
                task=task,
                mode="val",
                group_id=f"{task.id}@{label}",
                metadata={Meta.SAMPLING_OVERRIDES: overrides, Meta.STEP: self.step},
                key=self._key(label, task.id, sample),
                sample=sample,
            )
            for task in self.val_tasks
            for sample in range(samples)
        ]
        outcomes = await self.runner.run(requests)
        self._refuse_unrouted()
        return outcomes, await self._val_rewards(outcomes)

    async def _val_rewards(self, outcomes: Sequence[RolloutOutcome]) -> list[float]:
        """Each held-out rollout's score: its reward, or the one named `val_reward`; 0.0 when it has none."""
        name = self.config.val_reward
        if name is None:
            return [o.reward if o.reward is not None else 0.0 for o in outcomes]
        store = self.trainer.store
        named = await asyncio.to_thread(lambda: [(o, store.query_rewards(o.rollout_id)) for o in outcomes])
        # An agent's own rewards never count here: it could report one under the name validation reads.
        values = [named_reward(found, o.attempts or None, name, agent_rewards=False) for o, found in named]
        if outcomes and all(v is None for v in values):
            seen = sorted({r.name for _, found in named for r in found if r.span_id is None})
            raise RewardError(
                f"--val-reward {name}: no held-out rollout has a reward named {name!r} (their rewards are "
                f"named {seen}); give --reward a source that records it"
            )
        return [v if v is not None else 0.0 for v in values]

    def _last_val(self) -> float | None:
        scores = [r["val_score"] for r in self.trainer.history if r.get("kind") == "val"]
        return scores[0] if scores else None

    def _version_now(self, transition: Transition) -> int:
        """The version the transition's policy serves now (what its staleness is measured against)."""
        if not self.config.policies:
            return self.server.policy_version or 0  # a trained server always knows its version
        name = policy_of(transition, self.config.policy_names)
        return self.versions.get(name, 0) if name is not None else 0

    def _checkpoint(self) -> None:
        extra = {
            "step": self.step,
            "position": self.cursor.position,
            "demonstration_position": self.demonstrations.position,
            "versions": dict(self.versions),
            "config": json.loads(json.dumps(asdict(self.config), default=str)),  # paths as text
            "history": self.trainer.history,
        }
        for name, learner in self.learners.items():
            learner.save_checkpoint(self._checkpoint_folder(name), extra)

    def _checkpoint_folder(self, name: str) -> Path:
        folder = self.trainer.run_dir / "checkpoint"
        return folder / name if self.config.policies else folder

    async def _restore(self) -> None:
        folder = self.trainer.run_dir / "checkpoint"
        if not folder.exists():
            console.print(f"[yellow]no checkpoint in {folder}; starting from step 0[/]")
            self.trainer.log.rewrite([])
            return
        for name, learner in self.learners.items():
            extra = await self._on_update_thread(learner.load_checkpoint, self._checkpoint_folder(name))
        self.step = int(extra["step"])
        self.versions = {name: int(v) for name, v in (extra.get("versions") or {}).items()}
        self.cursor.position = int(extra["position"])
        self.demonstrations.position = int(extra.get("demonstration_position", 0))
        self.trainer.history = list(extra.get("history") or [])
        self.trainer.log.rewrite(self.trainer.history)
        if self.config.policies:
            saved = [
                (name, await self._on_update_thread(self._save_weights, version, name))
                for name, version in self.versions.items()
                if version
            ]
            await self._load(saved)
        elif self.step:
            await self._load([(POLICY_UPSTREAM, await self._on_update_thread(self._save_weights, self.step))])
        console.print(f"resumed from step {self.step}")


def signal_groups(transitions: Sequence[Transition]) -> int:
    """Groups whose rollouts' rewards are not all equal: those an advantage can learn from."""
    rewards: dict[str | None, set[float]] = {}
    for t in transitions:
        rewards.setdefault(t.group_id, set()).add(t.reward)
    return sum(len(values) > 1 for values in rewards.values())


def _group_tags(tasks: Sequence[Task]) -> list[str]:
    """A name per group of a step: the task's id, with ~K on its K-th repeat (a step that wraps around
    the task list, or asks for more tasks than there are, meets a task twice: two groups, not one)."""
    seen: Counter[str] = Counter()
    tags = []
    for task in tasks:
        tags.append(task.id if not seen[task.id] else f"{task.id}~{seen[task.id]}")
        seen[task.id] += 1
    return tags


def _sample_rows(store: Store, outcomes: Sequence[RolloutOutcome]) -> list[list[Any]]:
    """Rows of the validation samples table: rollout, task, input, output, reward, status."""
    rows = []
    for outcome in outcomes:
        rollout = store.get_rollout(outcome.rollout_id)
        task_input = orjson.dumps(rollout.input).decode()
        rows.append(
            [rollout.id, rollout.task_id, task_input, rollout.output, outcome.reward, outcome.status.value]
        )
    return rows


def release_free_memory() -> None:
    """Give freed heap pages back to the OS after an update (glibc keeps them otherwise)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


SECONDS_KEYS = ("rollout_seconds", "generation_seconds", "idle_seconds", "agent_cpu_seconds")
SUMMED_KEYS = ("rollouts", "groups", "failed_rollouts", "calls", "merged_calls", "merge_breaks")


def _merge_stats(parts: list[dict[str, Any]], sequential: bool) -> dict[str, Any]:
    """Counts add up, means are weighted by rollouts; stage times add up over sequential rounds, while of
    overlapping groups (async) the longest one's stands for the step."""
    rollouts = sum(p["rollouts"] for p in parts) or 1
    merged: dict[str, Any] = {}
    keys = dict.fromkeys(key for part in parts for key in part)  # per-node and per-agent keys may differ
    for key in keys:
        values = [p.get(key, 0) for p in parts]
        if key in SUMMED_KEYS or key.startswith(("nodes.", "agent.", "engine.")):
            merged[key] = sum(values)
        elif key in SECONDS_KEYS:
            merged[key] = sum(values) if sequential else max(values)
        else:
            merged[key] = sum(p.get(key, 0) * p["rollouts"] for p in parts) / rollouts
    return merged


def _per_agent(report: TransitionReport) -> dict[str, int]:
    """Calls and transitions per agent name, for the metrics log (`agent.<name>.calls`, ...)."""
    transitions = Counter(str(t.agent) for t in report.transitions)
    stats: dict[str, int] = {}
    for agent in sorted(report.calls_by_agent):
        stats[f"agent.{agent}.calls"] = report.calls_by_agent[agent]
        stats[f"agent.{agent}.transitions"] = transitions[agent]
    return stats
