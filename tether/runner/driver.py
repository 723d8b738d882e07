"""The driver: enqueues a run's rollouts and learns their outcomes from the store.

Outcomes are read from the store (status, rewards by `tether.store.reward_rule`, call spans), never from
the workers' memory, so a rollout finished by any worker anywhere counts: a pool in this process, another
process sharing the store file, or a worker on another host talking to the store over HTTP. Waiting uses
the store's change notification (a condition variable in process, a long-poll over HTTP).
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.contracts import CallAttr, Meta, is_call_span
from tether.limits import ATTEMPT_SPANS_READ
from tether.store.base import Store
from tether.store.records import Reward, Rollout, RolloutRecord, RolloutRequest, RolloutStatus, Span
from tether.store.reward_rule import rollout_final_reward

# How often a wait returns to report progress (and to check that the workers are alive) while rollouts
# are still running. Finishing the last rollout wakes it at once.
PROGRESS_S = 1.0


@dataclass
class RolloutOutcome:
    rollout_id: str
    status: RolloutStatus
    attempts: int
    reward: float | None
    calls: int
    completion_tokens: int
    error: str | None = None
    task_id: str = ""
    sample: int = 0
    cut_by_default: int = 0  # calls cut at the server's own output cap: their request named no max_tokens
    # Everything recorded for the rollout, read once when it finished: what consumes the outcome (the
    # trainer's transitions) reads it from here, not from the store again. None where not read whole.
    record: RolloutRecord | None = field(default=None, repr=False, compare=False)


@dataclass
class RunnerStats:
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    store_reads: int = 0  # reads of finished rollouts' records: one per batch that finished together
    rewards: list[float] = field(default_factory=list)

    @property
    def mean_reward(self) -> float | None:
        return statistics.fmean(self.rewards) if self.rewards else None


def read_outcome(store: Store, rollout: Rollout) -> RolloutOutcome:
    """A finished rollout's outcome, as the store has it."""
    attempt = rollout.attempt_count
    read = ATTEMPT_SPANS_READ
    spans = store.query_spans(rollout_id=rollout.id, attempt=attempt, limit=read) if attempt else []
    return _outcome(rollout, store.query_rewards(rollout.id), spans)


def outcomes_of(records: Sequence[RolloutRecord]) -> list[RolloutOutcome]:
    """Finished rollouts' outcomes from their records (one `Store.read_rollouts`), each keeping its record."""
    found = []
    for record in records:
        attempt = record.rollout.attempt_count
        spans = [span for span in record.spans if span.attempt == attempt] if attempt else []
        outcome = _outcome(record.rollout, record.rewards, spans)
        outcome.record = record
        found.append(outcome)
    return found


def _outcome(rollout: Rollout, rewards: Sequence[Reward], spans: Sequence[Span]) -> RolloutOutcome:
    attempt = rollout.attempt_count
    reward = rollout_final_reward(rollout, list(rewards), attempt or None)
    calls = [s for s in spans if is_call_span(s.name)]
    tokens = sum(int((s.attributes.get(CallAttr.USAGE) or {}).get("completion_tokens") or 0) for s in calls)
    return RolloutOutcome(
        rollout.id,
        rollout.status,
        attempt,
        reward,
        len(calls),
        tokens,
        rollout.error,
        rollout.task_id,
        rollout.sample,
        sum(_cut_by_default(span) for span in calls),
    )


OUTPUT_CAPS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
DEFAULT_CAP_HINT = (
    "stopped at the policy server's own output cap, their requests naming none (the built-in engine's is "
    "512 tokens): set max_tokens in the agent's client or its framework's output-token setting"
)


def _cut_by_default(span: Span) -> bool:
    request = span.attributes.get(CallAttr.REQUEST)
    if not isinstance(request, dict) or any(request.get(key) is not None for key in OUTPUT_CAPS):
        return False
    choices = span.attributes.get(CallAttr.CHOICES) or []
    return any(isinstance(c, dict) and c.get("finish_reason") == "length" for c in choices)


class Driver:
    def __init__(
        self,
        store: Store,
        run: str | None = None,
        on_change: Callable[[], None] | None = None,
        agent_rewards: bool = True,
        read_once: bool = False,
    ):
        self.store = store
        self.run = run
        self.on_change = on_change
        self.agent_rewards = agent_rewards
        # False: each batch of rollouts that finish together is read as it finishes (a live reward
        # mean); True: statuses as they finish, and one read of every record once all have (a step's).
        self.read_once = read_once
        self.stats = RunnerStats()
        self._counted: set[str] = set()
        self._rewarded: set[str] = set()

    async def submit(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        """Enqueue the requests under this driver's run. Keyed requests that the run already has are
        not queued again: the store gives back the existing rollouts."""
        owned = [self._own(request) for request in requests]
        return await asyncio.to_thread(self.store.enqueue, owned)

    def _own(self, request: RolloutRequest) -> RolloutRequest:
        metadata = {Meta.AGENT_REWARDS: self.agent_rewards, **request.metadata}
        return request.model_copy(update={"run": self.run, "metadata": metadata})

    async def wait(
        self, rollout_ids: Sequence[str], failure: Callable[[], str | None] | None = None
    ) -> list[RolloutOutcome]:
        """Wait until every rollout is finished; their outcomes in the given order. `failure` says why
        waiting is hopeless (e.g. every local worker died): it raises RuntimeError with that reason."""
        ids = list(rollout_ids)
        outcomes: dict[str, RolloutOutcome] = {}
        done: set[str] = set()
        while len(done) < len(set(ids)):
            pending = [i for i in dict.fromkeys(ids) if i not in done]
            finished = await asyncio.to_thread(self.store.wait_for, pending, PROGRESS_S)
            done.update(rollout.id for rollout in finished)
            if finished and not self.read_once:  # one read of what finished since the last
                read = await self._read([r.id for r in finished])
                outcomes.update(read)
                self._count_rewards(read.values())
            for rollout in finished:
                self._count_status(rollout.id, rollout.status)
            if finished and self.on_change is not None:
                self.on_change()
            reason = failure() if failure is not None and len(done) < len(set(ids)) else None
            if reason is not None:
                raise RuntimeError(reason)
        if self.read_once:
            outcomes = await self._read(list(dict.fromkeys(ids)))
            self._count_rewards(outcomes.values())
        return [outcomes[i] for i in ids]

    async def _read(self, rollout_ids: list[str]) -> dict[str, RolloutOutcome]:
        """Everything recorded for these finished rollouts, in one read, as their outcomes."""
        records = await asyncio.to_thread(self.store.read_rollouts, rollout_ids)
        self.stats.store_reads += 1
        return {outcome.rollout_id: outcome for outcome in outcomes_of(records)}

    def _count_rewards(self, outcomes: Iterable[RolloutOutcome]) -> None:
        for outcome in outcomes:
            if outcome.reward is not None and outcome.rollout_id not in self._rewarded:
                self._rewarded.add(outcome.rollout_id)
                self.stats.rewards.append(outcome.reward)

    def _count_status(self, rollout_id: str, status: RolloutStatus) -> None:
        if rollout_id in self._counted:
            return
        self._counted.add(rollout_id)
        if status == RolloutStatus.succeeded:
            self.stats.succeeded += 1
        else:
            self.stats.failed += 1


# Why a finished rollout has no model call: its agent never reached the gateway.
NO_CALLS_HINT = (
    "made no model call: the agent answered without the gateway (an agent-side cache such as DSPy's, a "
    "client with a hard-coded base URL or key, or a base URL other than $OPENAI_BASE_URL); such rollouts "
    "give no training data"
)


def without_calls(outcomes: Sequence[RolloutOutcome]) -> int:
    """Finished rollouts that succeeded without one model call recorded."""
    return sum(o.status == RolloutStatus.succeeded and o.calls == 0 for o in outcomes)


def summarize(outcomes: Sequence[RolloutOutcome]) -> dict[str, Any]:
    total = len(outcomes)
    rewards = [o.reward for o in outcomes if o.reward is not None]
    succeeded = sum(o.status == RolloutStatus.succeeded for o in outcomes)
    return {
        "rollouts": total,
        "succeeded": succeeded,
        "failed": total - succeeded,
        "success_rate": succeeded / total if total else 0.0,
        "mean_reward": statistics.fmean(rewards) if rewards else None,
        "calls_per_rollout": statistics.fmean(o.calls for o in outcomes) if total else 0.0,
        "completion_tokens": sum(o.completion_tokens for o in outcomes),
        "without_calls": without_calls(outcomes),
        "cut_by_default": sum(o.cut_by_default for o in outcomes),
    }
