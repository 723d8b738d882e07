"""The runner: a pool of workers that claim rollouts, run the agent, score it and close the rollout.

Each rollout gets its own base URL and rollout-scoped key, a timeout, a heartbeat, and up to
`max_attempts` attempts (the store requeues failed attempts). Rewards are written before the rollout
is marked finished, so whoever waits on the rollout sees its rewards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from tether.auth import TokenAuthority
from tether.runner.agents import LLM, Agent, AgentResult
from tether.runner.rewards import AIRRules, Evaluator, RewardError, air_rewards, evaluate
from tether.store.base import InvalidTransition, NotFound, Store
from tether.store.models import FINISHED_STATUSES, Claim, Reward, Rollout, RolloutRequest, RolloutStatus, Span

log = logging.getLogger(__name__)
IDLE_RECHECK_S = 1.0


@dataclass(frozen=True)
class AgentEndpoints:
    """Where agents reach the gateway, and the credentials each rollout gets."""

    server_url: str
    auth: TokenAuthority
    model: str = "policy"

    def llm(self, rollout_id: str, attempt: int) -> LLM:
        base = f"{self.server_url.rstrip('/')}/rollouts/{rollout_id}/attempts/{attempt}/v1"
        return LLM(base_url=base, api_key=self.auth.rollout_token(rollout_id), model=self.model)

    def env(self, rollout: Rollout, attempt: int) -> dict[str, str]:
        llm = self.llm(rollout.id, attempt)
        server = self.server_url.rstrip("/")
        return {
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_BASE": llm.base_url,
            "OPENAI_API_KEY": llm.api_key,
            "OPENAI_MODEL": llm.model,
            "TETHER_TASK": orjson.dumps(rollout.input).decode(),
            "TETHER_ROLLOUT_ID": rollout.id,
            "TETHER_ATTEMPT": str(attempt),
            "TETHER_SERVER": server,
            "TETHER_URL": f"{server}/rollouts/{rollout.id}",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{server}/rollouts/{rollout.id}/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"Authorization=Bearer%20{llm.api_key}",
        }


@dataclass
class RunnerConfig:
    n_workers: int = 4
    timeout_s: float = 300.0
    heartbeat_s: float = 10.0
    primary_reward: str | None = None
    air: AIRRules = field(default_factory=AIRRules)
    worker_prefix: str = "worker"


@dataclass
class RolloutOutcome:
    rollout_id: str
    status: RolloutStatus
    attempts: int
    reward: float | None
    calls: int
    completion_tokens: int
    error: str | None = None


@dataclass
class RunnerStats:
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    rewards: list[float] = field(default_factory=list)

    @property
    def mean_reward(self) -> float | None:
        return statistics.fmean(self.rewards) if self.rewards else None


def _call_stats(spans: Sequence[Span]) -> tuple[int, int]:
    calls = [s for s in spans if s.name.startswith("llm.")]
    tokens = sum(int((s.attributes.get("usage") or {}).get("completion_tokens") or 0) for s in calls)
    return len(calls), tokens


class Runner:
    def __init__(
        self,
        store: Store,
        agent: Agent,
        endpoints: AgentEndpoints,
        evaluator: Evaluator | None = None,
        config: RunnerConfig | None = None,
        on_update: Callable[[Runner], None] | None = None,
    ) -> None:
        self.store = store
        self.agent = agent
        self.endpoints = endpoints
        self.evaluator = evaluator
        self.config = config or RunnerConfig()
        self.on_update = on_update
        self.stats = RunnerStats()
        self.outcomes: dict[str, RolloutOutcome] = {}
        self._workers: list[asyncio.Task[None]] = []
        self._work = asyncio.Event()
        # Claimed by this runner and not yet settled: the store can say "finished" a moment before the
        # worker has recorded the outcome.
        self._unsettled: dict[str, asyncio.Event] = {}

    # -- pool -----------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._workers:
            return
        self._work = asyncio.Event()
        self._workers = [
            asyncio.create_task(self._worker(f"{self.config.worker_prefix}-{i}"), name=f"tether-worker-{i}")
            for i in range(self.config.n_workers)
        ]

    async def stop(self) -> None:
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    async def enqueue(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        rollouts = await asyncio.to_thread(self.store.enqueue, list(requests))
        self._work.set()
        return rollouts

    async def wait(self, rollout_ids: Sequence[str]) -> list[Rollout]:
        while True:
            finished = await asyncio.to_thread(self.store.wait_for, list(rollout_ids), 5.0)
            if len(finished) == len(rollout_ids):
                for rollout_id in rollout_ids:
                    if rollout_id in self._unsettled:
                        await self._unsettled[rollout_id].wait()
                return finished
            if self._workers and all(worker.done() for worker in self._workers):
                errors = [w.exception() for w in self._workers if not w.cancelled() and w.exception()]
                raise RuntimeError(f"all runner workers stopped: {errors[0] if errors else 'cancelled'}")

    async def run(self, requests: Sequence[RolloutRequest]) -> list[RolloutOutcome]:
        """Run these rollouts to completion with the worker pool; returns their outcomes in order."""
        self.start()
        rollouts = await self.enqueue(requests)
        await self.wait([r.id for r in rollouts])
        return [self.outcomes[r.id] for r in rollouts if r.id in self.outcomes]

    # -- one worker -----------------------------------------------------------------------------------

    async def _worker(self, worker_id: str) -> None:
        while True:
            claim = await asyncio.to_thread(self.store.claim, worker_id)
            if claim is None:
                self._work.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._work.wait(), IDLE_RECHECK_S)
                continue
            settled = self._unsettled.setdefault(claim.rollout.id, asyncio.Event())
            await self._run_claim(claim)
            if claim.rollout.id in self.outcomes:
                settled.set()
                del self._unsettled[claim.rollout.id]

    async def _run_claim(self, claim: Claim) -> None:
        rollout, attempt = claim.rollout, claim.attempt.number
        self.stats.running += 1
        self._notify()
        heartbeat = asyncio.create_task(self._heartbeat(rollout.id, attempt))
        result: AgentResult | None = None
        try:
            env = self.endpoints.env(rollout, attempt)
            result = await self.agent.run(
                rollout.input, env, self.endpoints.llm(rollout.id, attempt), self.config.timeout_s
            )
        except asyncio.CancelledError:
            await asyncio.shield(self._close(rollout, attempt, RolloutStatus.cancelled, None, "interrupted"))
            raise
        finally:
            heartbeat.cancel()
            self.stats.running -= 1
        try:
            await self._finish(rollout, attempt, result)
        except Exception as exc:  # never let one rollout's bookkeeping kill the worker
            log.exception("finishing rollout %s failed", rollout.id)
            closed = await self._close(rollout, attempt, RolloutStatus.failed, None, f"runner error: {exc}")
            if closed is not None and closed.status in FINISHED_STATUSES:
                self._record(closed, attempt, None, [])
        self._notify()

    async def _heartbeat(self, rollout_id: str, attempt: int) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            with contextlib.suppress(NotFound):
                await asyncio.to_thread(self.store.heartbeat, rollout_id, attempt)

    async def _finish(self, rollout: Rollout, attempt: int, result: AgentResult) -> None:
        spans = await asyncio.to_thread(
            lambda: self.store.query_spans(rollout_id=rollout.id, attempt=attempt, limit=1_000_000)
        )
        rewards: list[Reward] = air_rewards(spans, self.config.air, rollout.id, attempt)
        error = result.error
        if result.ok and self.evaluator is not None:
            try:
                rewards += await asyncio.to_thread(
                    evaluate,
                    self.evaluator,
                    rollout.id,
                    attempt,
                    rollout.input,
                    result.output,
                    spans,
                    self.config.primary_reward,
                )
            except (RewardError, Exception) as exc:  # the user's evaluator may raise anything
                error = f"evaluator failed: {type(exc).__name__}: {exc}"
        if rewards:
            await asyncio.to_thread(self.store.add_rewards, rewards)
        if result.timed_out:
            status = RolloutStatus.timed_out
        else:
            status = RolloutStatus.succeeded if error is None else RolloutStatus.failed
        closed = await self._close(rollout, attempt, status, result.output, error)
        if closed is None:  # finished by someone else meanwhile (e.g. cancelled)
            closed = await asyncio.to_thread(self.store.get_rollout, rollout.id)
        if closed.status not in FINISHED_STATUSES:
            return  # requeued for another attempt
        all_rewards = await asyncio.to_thread(self.store.query_rewards, rollout.id)
        primary = [r.value for r in all_rewards if r.primary and r.attempt in (None, attempt)]
        self._record(closed, attempt, primary[-1] if primary else None, spans)

    def _record(self, closed: Rollout, attempt: int, reward: float | None, spans: Sequence[Span]) -> None:
        calls, tokens = _call_stats(spans)
        self.outcomes[closed.id] = RolloutOutcome(
            closed.id, closed.status, attempt, reward, calls, tokens, closed.error
        )
        if closed.status == RolloutStatus.succeeded:
            self.stats.succeeded += 1
        else:
            self.stats.failed += 1
        if reward is not None:
            self.stats.rewards.append(reward)

    async def _close(
        self, rollout: Rollout, attempt: int, status: RolloutStatus, output: str | None, error: str | None
    ) -> Rollout | None:
        try:
            return await asyncio.to_thread(
                lambda: self.store.update_status(
                    rollout.id, status, output=output, error=error, attempt=attempt
                )
            )
        except (InvalidTransition, NotFound):
            return None

    def _notify(self) -> None:
        if self.on_update is not None:
            self.on_update(self)


def summarize(outcomes: Sequence[RolloutOutcome]) -> dict[str, Any]:
    total = len(outcomes)
    rewards = [o.reward for o in outcomes if o.reward is not None]
    return {
        "rollouts": total,
        "succeeded": sum(o.status == RolloutStatus.succeeded for o in outcomes),
        "failed": sum(o.status != RolloutStatus.succeeded for o in outcomes),
        "success_rate": (sum(o.status == RolloutStatus.succeeded for o in outcomes) / total)
        if total
        else 0.0,
        "mean_reward": statistics.fmean(rewards) if rewards else None,
        "calls_per_rollout": statistics.fmean(o.calls for o in outcomes) if total else 0.0,
        "completion_tokens": sum(o.completion_tokens for o in outcomes),
    }
