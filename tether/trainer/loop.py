"""The training loop, top to bottom: run the agent, read its traces, credit the calls, update, serve.

    sync:  [rollouts of step k with policy v_k] -> transitions -> advantages -> update -> v_{k+1}
    async: groups keep running while the trainer updates; the gateway pauses new calls, drains, swaps the
           adapter and resumes; tokens over `max_staleness` versions old are masked (`staleness.py`).

The loop knows two seams, both injected or opened by name from their registries: the policy server
(`tether.policy_server`: the version it serves, the gateway upstream, loading new weights) and the
learner (`tether.learner.base`: the update, saving weights and checkpoints). Each saved version gets
its own folder (`policies/vN`), so a server elsewhere can load N while still serving N-1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from tether.adapters import Transition, transitions_of
from tether.algorithms import AdvantageBatch, assign_advantages, imitation_batch
from tether.algorithms.advantages import UnreproducibleSampling, advantage_method
from tether.algorithms.distill import distill_advantages
from tether.contracts import DISTILLATION, POLICY_UPSTREAM, Meta
from tether.curriculum.cursor import TaskCursor
from tether.curriculum.pools import Curriculum, CurriculumExhausted
from tether.curriculum.probe import probe_record, probed
from tether.learner.base import Learner, TrainingDiverged, close_learner
from tether.placement.base import LocalPlacement, Placement
from tether.policy_server import PolicyServer, PolicyWeights, ServesSeveralPolicies
from tether.rewards.rank import GroupScorer
from tether.runner import AIRRules, Runner, RunnerConfig
from tether.runner.agents import Agent
from tether.runner.driver import without_calls
from tether.runner.pool import WorkerPool
from tether.runner.rewards import Evaluator
from tether.runner.runner import PoolFactory
from tether.runner.runs import RunRecord, cancel_queued
from tether.stack import LocalStack, local_stack
from tether.store import RolloutRequest, Store, Task
from tether.store.auth import TokenAuthority
from tether.trainer import assembly
from tether.trainer.assembly import refuse_unrouted
from tether.trainer.config import FitResult, TrainerConfig
from tether.trainer.distill import TeacherError, check_teacher, score_transitions
from tether.trainer.imitation import demonstration_batch, load_demonstrations
from tether.trainer.metrics import MetricsLog
from tether.trainer.policies import policy_of, split_batch
from tether.trainer.ranking import rank_groups
from tether.trainer.stages import agent_cpu_seconds, engine_counts, engine_stats, stage_stats_of
from tether.trainer.staleness import fresh_transitions
from tether.trainer.stats import (
    group_tags,
    no_call_warning,
    release_free_memory,
    rollout_stats,
    signal_groups,
    step_stats,
)
from tether.trainer.validation import Validator, first_score

__all__ = ["FitResult", "Trainer", "TrainerConfig", "signal_groups"]

console = Console(stderr=True)
POLICY_VERSIONS_KEPT = 3  # policy folders kept on disk: the served one, the one before, the next


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
            server = self.policy_server or assembly.placed_server(config, self.placement, opened)
            server = server or assembly.open_server(config, POLICY_UPSTREAM, opened)
            learners = assembly.open_learners(config, self.placement, self.learner, self.learners)
        try:
            upstreams, routes = assembly.fixed_upstreams(config, opened)
            trained, policy_routes = assembly.policy_upstreams(config, server)
            with local_stack(
                self.store,
                self.auth,
                [*trained, *upstreams],
                routes={**routes, **policy_routes},
                hold_limit_s=600,
                host=self.placement.host,
                agent_quota=self.config.agent_quota,
                caps=self.config.caps,
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
                        read_once=True,  # a step's rollouts read once, when the last has finished
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
            given = [self.learner, *(self.learners or {}).values()]
            for learner in learners.values():
                if not any(learner is mine for mine in given):  # the caller's to close
                    close_learner(learner)
            self.log.close()

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
    validator: Validator = field(init=False)

    def __post_init__(self) -> None:
        trainer = self.trainer
        run = None if trainer.run is None else trainer.run.name
        self.cursor = Curriculum(
            self.train_tasks, trainer.config.seed, trainer.store, run, self.config.curriculum
        )
        self.demonstrations = TaskCursor([], self.trainer.config.seed)
        self.update_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-update")
        self.validator = Validator(
            self.config,
            self.val_tasks,
            self.runner,
            trainer.store,
            trainer.record,
            trainer.log,
            self._key,
            self._refuse_unrouted,
        )

    @property
    def config(self) -> TrainerConfig:
        return self.trainer.config

    async def validate(self, before: bool = False) -> float | None:
        return await self.validator.validate(self.step, self.server.policy_version, before)

    async def run(self, resume: bool) -> FitResult:
        run = self.trainer.run
        if self.config.from_run is not None:
            self.demonstrations.tasks = await asyncio.to_thread(
                load_demonstrations, self.trainer.store, self.config, self.train_tasks, self.val_tasks
            )
        if resume or (run is not None and run.resumed):
            await self._restore()
        if run is not None and run.resumed:
            # What the dead run had queued belongs to its lost future: it is not run now.
            await asyncio.to_thread(cancel_queued, self.trainer.store, run.name, "the run was resumed")
        self.runner.start()
        try:
            val_before = (
                await self.validate(before=True) if self.step == 0 else first_score(self.trainer.history)
            )
            self.step_started = time.monotonic()
            while self.step < self.config.sft_steps and not self._out_of_time():
                await self._update(*demonstration_batch(self.demonstrations, self.config.sft_batch))
            if self.config.curriculum.probe and not probed(self.trainer.history):
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
            for task, tag in zip(tasks, group_tags(tasks), strict=True)
            for sample in range(self.config.group_size)
        ]

    async def _collect(self, requests: Sequence[RolloutRequest]) -> tuple[list[Transition], dict[str, Any]]:
        started, cpu_before, engine_before = time.monotonic(), agent_cpu_seconds(), engine_counts(self.server)
        reads_before = self.runner.stats.store_reads
        outcomes = await self.runner.run(requests)
        engine = engine_stats(engine_before, engine_counts(self.server))
        agent_cpu = agent_cpu_seconds() - cpu_before
        self._refuse_unrouted()
        scorer, store = self.group_scorer, self.trainer.store
        ranked = None if scorer is None else await rank_groups(store, scorer, requests, outcomes)
        # The driver read each rollout as it finished; a ranking records rewards after that: read again.
        records = [o.record for o in outcomes if o.record is not None]
        if ranked is not None or len(records) < len(outcomes):
            records = await asyncio.to_thread(store.read_rollouts, [o.rollout_id for o in outcomes])
            self.runner.stats.store_reads += 1
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
        stats = rollout_stats(requests, outcomes, report, rewards, seconds)
        stats.update(engine, **await asyncio.to_thread(stage_stats_of, records))
        stats["idle_seconds"] = max(seconds - stats["generation_seconds"], 0.0)
        stats["store_reads"] = self.runner.stats.store_reads - reads_before
        stats["rollouts_without_calls"] = silent = without_calls(outcomes)
        if warning := no_call_warning(silent, len(outcomes), self.step + 1, self.trainer.history):
            console.print(f"[yellow]{warning}[/]")
        if ranked is not None:
            stats["rank_failed_groups"] = ranked.failed_groups
            stats["rank_left_out_rollouts"] = len(ranked.left_out)
        if self.trainer.pools in (None, WorkerPool):  # the agents ran in this process's workers
            stats["agent_cpu_seconds"] = agent_cpu
        return report.transitions, stats

    async def _probe(self) -> None:
        """One group of every training task, not trained on (`tether.curriculum.probe`): the curriculum
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
        refuse_unrouted(self.unrouted, self.config)

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
            await self._update(transitions, step_stats(transitions, [s for _, s in groups], True))

    def _more_groups(self, transitions: Sequence[Transition], generated: int) -> int:
        """Dynamic sampling: how many more groups to launch for this step's batch (0: it is complete)."""
        wanted = self.config.min_signal_groups
        if not wanted or self.step < self.config.sft_steps or self.config.algorithm in ("sft", DISTILLATION):
            return 0
        missing = wanted - signal_groups(transitions)
        cap = self.config.max_groups_per_step or 0
        return max(0, min(missing, cap - generated))

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
                stats = step_stats(transitions, [s for _, s in done], False)
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
