"""The worker pool: N workers that claim rollouts from the store, run the agent, score it and close it.

A pool works for one run: its workers claim only that run's rollouts, so two runs sharing a store never
take each other's work. Rewards are written before the rollout is closed, so whoever waits on the
rollout sees its rewards. The pool knows nothing of who enqueued the work or who waits for it: that is
the driver's part (`tether.runner.driver`), and it may live in another process or on another host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from tether.contracts import AGENT_OUTPUT_SPAN, Origin, agent_task
from tether.limits import ATTEMPT_SPANS_READ
from tether.runner.agents import LLM, Agent, AgentResult
from tether.runner.rewards import AIRRules, Evaluator, RewardError, air_rewards, attributed, evaluate
from tether.store.auth import TokenAuthority
from tether.store.base import InvalidTransition, NotFound, Store
from tether.store.records import Claim, Reward, Rollout, RolloutStatus, Span

log = logging.getLogger(__name__)
STOP_RECANCEL_S = 1.0
IDLE_RECHECK_S = 1.0


@dataclass(frozen=True)
class AgentEndpoints:
    """Where agents reach the gateway, and the credentials each attempt gets (a token of its own)."""

    server_url: str
    auth: TokenAuthority
    model: str = "policy"

    def llm(self, rollout_id: str, attempt: int) -> LLM:
        base = f"{self.server_url.rstrip('/')}/rollouts/{rollout_id}/attempts/{attempt}/v1"
        return LLM(base_url=base, api_key=self.auth.rollout_token(rollout_id, attempt), model=self.model)

    def env(self, rollout: Rollout, attempt: int) -> dict[str, str]:
        llm = self.llm(rollout.id, attempt)
        server = self.server_url.rstrip("/")
        return {
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_BASE": llm.base_url,
            "OPENAI_API_KEY": llm.api_key,
            "OPENAI_MODEL": llm.model,
            # The Anthropic SDK adds /v1/messages to its base URL itself, and sends the key as x-api-key.
            "ANTHROPIC_BASE_URL": llm.base_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": llm.api_key,
            "TETHER_TASK": orjson.dumps(agent_task(rollout.input)).decode(),
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
    # Whether rewards the agent reports itself count as its reward; None: only without an evaluator.
    agent_rewards: bool | None = None
    air: AIRRules = field(default_factory=AIRRules)
    worker_prefix: str = "worker"
    # How the driver reads finished rollouts: as each batch finishes (a live reward mean), or all of a
    # run's request at once when the last has finished (a training step's one store read).
    read_once: bool = False


def worker_id(prefix: str, index: int) -> str:
    """`host/pid/prefix-i`: the recovery sweeper on the same host can tell when the process is gone."""
    return f"{socket.gethostname()}/{os.getpid()}/{prefix}-{index}"


def worker_node(worker: str) -> str:
    """The node a worker id names: the label of a Ray node (prefix `ray:...`), else the host."""
    host, _, rest = worker.partition("/")
    prefix = rest.partition("/")[2].rpartition("-")[0]
    return prefix if prefix.startswith("ray:") else host


class WorkerPool:
    def __init__(
        self,
        store: Store,
        agent: Agent,
        endpoints: AgentEndpoints,
        evaluator: Evaluator | None = None,
        config: RunnerConfig | None = None,
        run: str | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.agent = agent
        self.endpoints = endpoints
        self.evaluator = evaluator
        self.config = config or RunnerConfig()
        self.run = run
        self.on_change = on_change
        self.running = 0
        # A worker cancelled by no stop() (the process interrupted under asyncio) queues its rollout again.
        self._requeue_on_stop = True
        self._workers: list[asyncio.Task[None]] = []
        self._work = asyncio.Event()

    def start(self) -> None:
        if self._workers:
            return
        self._work = asyncio.Event()
        self._workers = [
            asyncio.create_task(
                self._worker(worker_id(self.config.worker_prefix, i)), name=f"tether-worker-{i}"
            )
            for i in range(self.config.n_workers)
        ]

    async def stop(self, requeue: bool = False) -> None:
        self._requeue_on_stop = requeue
        workers, self._workers = self._workers, []
        while workers:  # cancelled again while one lives on: code it awaits may have swallowed a cancel
            for worker in workers:
                worker.cancel()
            done, pending = await asyncio.wait(workers, timeout=STOP_RECANCEL_S)
            for worker in done:
                if not worker.cancelled():
                    worker.exception()  # retrieved: how a worker ended is of no interest once stopped
            workers = list(pending)

    def wake(self) -> None:
        """New work was enqueued: idle workers claim now instead of at their next recheck."""
        self._work.set()

    def failure(self) -> str | None:
        """Why the pool can no longer work (every worker stopped), or None while it can."""
        if not self._workers or not all(worker.done() for worker in self._workers):
            return None
        errors = [w.exception() for w in self._workers if not w.cancelled() and w.exception()]
        return f"all runner workers stopped: {errors[0] if errors else 'cancelled'}"

    # -- one worker -----------------------------------------------------------------------------------

    async def _worker(self, worker: str) -> None:
        while True:
            claim = await self._claim(worker)
            if claim is None:
                self._work.clear()
                # Not wait_for: on Python 3.11 it swallows a cancel that lands as the event is set (a
                # wake() beside stop()), and the worker then idles forever while stop() waits for it.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IDLE_RECHECK_S):
                        await self._work.wait()
                continue
            await self._run_claim(claim)

    async def _claim(self, worker: str) -> Claim | None:
        claiming = asyncio.ensure_future(asyncio.to_thread(self.store.claim, worker, self.run))
        try:
            return await asyncio.shield(claiming)
        except asyncio.CancelledError:  # stopped while the store claimed: its thread finishes regardless
            claim = await claiming
            if claim is not None:
                await self._interrupted(claim.rollout, claim.attempt.number)
            raise

    async def _interrupted(self, rollout: Rollout, attempt: int) -> None:
        """The pool stopped under this attempt: the rollout ends `cancelled`, or goes back to the queue."""
        if self._requeue_on_stop:
            await asyncio.shield(self._abandon(rollout, attempt, "interrupted: runs again on resume"))
        else:
            await asyncio.shield(self._close(rollout, attempt, RolloutStatus.cancelled, None, "interrupted"))

    async def _run_claim(self, claim: Claim) -> None:
        rollout, attempt = claim.rollout, claim.attempt.number
        self._count(+1)
        heartbeat = asyncio.create_task(self._heartbeat(rollout.id, attempt))
        result: AgentResult | None = None
        try:
            env = self.endpoints.env(rollout, attempt)
            # The agent gets the task without its reference; the evaluator (in `_finish`) the whole task.
            task = agent_task(rollout.input)
            result = await self.agent.run(
                task, env, self.endpoints.llm(rollout.id, attempt), self.config.timeout_s
            )
        except asyncio.CancelledError:
            await self._interrupted(rollout, attempt)
            raise
        except Exception as exc:  # launching the agent failed: this attempt fails, never the run
            log.warning("rollout %s: the agent could not run: %s", rollout.id, exc)
            result = AgentResult(None, None, error=f"the agent could not run: {type(exc).__name__}: {exc}")
        finally:
            heartbeat.cancel()
            self._count(-1)
        settling = asyncio.ensure_future(self._settle(rollout, attempt, result))
        try:
            await asyncio.shield(settling)
        except asyncio.CancelledError:  # stopped as the agent ended: its result is recorded first
            await settling
            raise

    async def _settle(self, rollout: Rollout, attempt: int, result: AgentResult) -> None:
        try:
            if result.runner_lost:
                await self._abandon(rollout, attempt, result.error or "the runner lost the agent")
            else:
                await self._finish(rollout, attempt, result)
        except Exception as exc:  # never let one rollout's bookkeeping kill the worker
            log.exception("finishing rollout %s failed", rollout.id)
            await self._close(rollout, attempt, RolloutStatus.failed, None, f"runner error: {exc}")

    def _count(self, delta: int) -> None:
        self.running += delta
        if self.on_change is not None:
            self.on_change()

    async def _heartbeat(self, rollout_id: str, attempt: int) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            with contextlib.suppress(NotFound):
                await asyncio.to_thread(self.store.heartbeat, rollout_id, attempt)

    async def _finish(self, rollout: Rollout, attempt: int, result: AgentResult) -> None:
        spans = await asyncio.to_thread(
            self.store.query_spans, rollout_id=rollout.id, attempt=attempt, limit=ATTEMPT_SPANS_READ
        )
        rewards: list[Reward] = air_rewards(spans, self.config.air, rollout.id, attempt)
        error = result.error
        if result.ok and self.evaluator is not None:
            scoring: list[Span] = []
            try:
                verdict, scoring = await asyncio.to_thread(
                    evaluate,
                    self.evaluator,
                    rollout.id,
                    attempt,
                    rollout.input,
                    result.output,
                    spans,
                    self.config.primary_reward,
                )
                rewards += verdict
            except RewardError as exc:
                scoring = attributed(exc.spans, rollout.id, attempt)
                error = f"evaluator failed: {type(exc).__name__}: {exc}"
            except Exception as exc:  # the user's evaluator may raise anything
                error = f"evaluator failed: {type(exc).__name__}: {exc}"
            if scoring:  # how the verdict was reached (a judge's calls), kept even when it failed
                await asyncio.to_thread(self.store.add_spans, scoring)
        if rewards:
            await asyncio.to_thread(self.store.add_rewards, rewards)
        if not result.ok and (result.stdout or result.stderr):
            await asyncio.to_thread(self.store.add_spans, [_output_span(rollout.id, attempt, result)])
        if result.timed_out:
            status = RolloutStatus.timed_out
        else:
            status = RolloutStatus.succeeded if error is None else RolloutStatus.failed
        await self._close(rollout, attempt, status, result.output, error)

    async def _abandon(self, rollout: Rollout, attempt: int, error: str) -> None:
        """The runner failed under the agent (not the agent itself): the attempt ends with `error` and the
        rollout gets a new attempt that does not use up one of its own, as after a lost worker."""
        log.warning("rollout %s: attempt %d lost: %s; it gets a new attempt", rollout.id, attempt, error)
        with contextlib.suppress(InvalidTransition, NotFound):
            await asyncio.to_thread(self.store.abandon, rollout.id, attempt, error)

    async def _close(
        self, rollout: Rollout, attempt: int, status: RolloutStatus, output: str | None, error: str | None
    ) -> Rollout | None:
        try:
            return await asyncio.to_thread(
                self.store.update_status, rollout.id, status, output=output, error=error, attempt=attempt
            )
        except (InvalidTransition, NotFound):  # finished by someone else meanwhile (e.g. cancelled)
            return None


def _output_span(rollout_id: str, attempt: int, result: AgentResult) -> Span:
    """What a failed agent printed, kept for whoever runs it (`tether store show`, the dashboard): the
    error names one line, this holds the rest. Never shown to scorers, never trained on."""
    at = time.time()
    return Span(
        rollout_id=rollout_id,
        attempt=attempt,
        name=AGENT_OUTPUT_SPAN,
        start_time=at,
        end_time=at,
        status="error",
        origin=Origin.RUNNER,
        attributes={"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr},
    )
