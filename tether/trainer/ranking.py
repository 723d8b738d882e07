"""Group rewards: once a step's groups are done, a `GroupScorer` (`--reward judge-rank:RUBRIC.md`) scores
each group's rollouts together, and its scores become their training rewards.

A score is recorded as the rollout's primary reward `judge_rank` (source `judge`), after the evaluator's,
so it is the one the batch reads (`tether.store.reward_rule`: the last primary reward). The scorer's
spans are recorded with every rollout of the group. Only succeeded rollouts are compared; a group with
fewer than two, or whose ranking failed, is left out of the batch: its rollouts keep the evaluator's
rewards in the store, which are on another scale than the ranked ones beside them in the batch.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape

from tether.rewards.rank import GroupScorer
from tether.runner.driver import RolloutOutcome
from tether.runner.rewards import RewardError, attributed
from tether.store import RolloutRequest, RolloutStatus, Store
from tether.store.records import Reward, RolloutRecord, Span

console = Console(stderr=True, highlight=False)


@dataclass
class Ranked:
    """What ranking a step's groups gave."""

    rewards: dict[str, float] = field(default_factory=dict)  # rollout id -> its ranked reward
    left_out: set[str] = field(default_factory=set)  # rollouts of groups left out of the batch
    failed_groups: int = 0  # groups whose ranking failed


async def rank_groups(
    store: Store,
    scorer: GroupScorer,
    requests: Sequence[RolloutRequest],
    outcomes: Sequence[RolloutOutcome],
) -> Ranked:
    """Rank every group of `requests` (their `outcomes`, in order) concurrently. The succeeded rollouts,
    the only ones compared, are read in one `Store.read_rollouts`."""
    groups: dict[str, list[tuple[RolloutRequest, RolloutOutcome]]] = {}
    for request, outcome in zip(requests, outcomes, strict=True):
        groups.setdefault(request.group_id or outcome.rollout_id, []).append((request, outcome))
    succeeded = [o.rollout_id for o in outcomes if o.status == RolloutStatus.succeeded]
    records = {r.rollout.id: r for r in await asyncio.to_thread(store.read_rollouts, succeeded)}
    ranked = Ranked()
    await asyncio.gather(
        *(_rank_one(store, scorer, group, members, records, ranked) for group, members in groups.items())
    )
    return ranked


async def _rank_one(
    store: Store,
    scorer: GroupScorer,
    group: str,
    members: list[tuple[RolloutRequest, RolloutOutcome]],
    records: dict[str, RolloutRecord],
    ranked: Ranked,
) -> None:
    done = [(r, o) for r, o in members if o.status == RolloutStatus.succeeded]
    if len(done) < 2:
        ranked.left_out.update(o.rollout_id for _, o in members)
        return
    outputs = [records[o.rollout_id].rollout.output for _, o in done]
    traces = [[span for span in records[o.rollout_id].spans if span.attempt == o.attempts] for _, o in done]
    task = done[0][0].task.input
    try:
        scores, spans = await asyncio.to_thread(scorer.score_group, task, outputs, traces, group)
    except RewardError as exc:
        await asyncio.to_thread(store.add_spans, _for_each(exc.spans, done))
        console.print(
            f"[yellow]group {escape(group)}: left out of the batch: its ranking failed: {escape(str(exc))}[/]"
        )
        ranked.left_out.update(o.rollout_id for _, o in members)
        ranked.failed_groups += 1
        return
    await asyncio.to_thread(store.add_spans, _for_each(spans, done))
    rewards = [
        Reward(rollout_id=o.rollout_id, attempt=o.attempts, name=scorer.name, value=score, source="judge")
        for (_, o), score in zip(done, scores, strict=True)
    ]
    await asyncio.to_thread(store.add_rewards, rewards)
    ranked.rewards.update((o.rollout_id, score) for (_, o), score in zip(done, scores, strict=True))
    ranked.left_out.update(o.rollout_id for _, o in members if o.rollout_id not in ranked.rewards)


def _for_each(spans: Sequence[Span], done: Sequence[tuple[RolloutRequest, RolloutOutcome]]) -> list[Span]:
    """The scorer's spans as every compared rollout's (each copy its own span id)."""
    copies = []
    for _, outcome in done:
        for span in attributed(spans, outcome.rollout_id, outcome.attempts):
            copies.append(span.model_copy(update={"span_id": uuid.uuid4().hex[:16]}))
    return copies
