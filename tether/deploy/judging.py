"""A judge for the sessions nobody rated (`tether serve --judge-sessions RUBRIC.md`): in the background,
each closed session of the deployment with no reward `after_s` seconds after it closed is graded by an
LLM judge (`tether.rewards.judge.Judge`: the rubric, the session's input, its last answer and its
recorded calls), and the score is recorded as its reward `judge` with source `later:judge`. Users' and
other systems' rewards come first: a session that has one is never judged.

Every judge call is recorded with the session (a `judge.chat` span), a failed one too, with why; a
session with a judge span is not asked about again, so a judge that fails does not fail on a loop."""

from __future__ import annotations

import logging
import time
from typing import Any

from tether.contracts import JUDGE_SPAN, CallAttr, is_call_span
from tether.periodic import Periodic
from tether.rewards.judge import Judge
from tether.runner.rewards import RewardError
from tether.store import Store
from tether.store.records import Reward, RolloutQuery, RolloutRecord, RolloutStatus, Span, now

log = logging.getLogger(__name__)

JUDGE_SOURCE = "later:judge"
SCAN_LIMIT = 10_000


class SessionJudge:
    def __init__(self, store: Store, run: str, judge: Judge, after_s: float) -> None:
        self.store, self.run, self.judge, self.after_s = store, run, judge, after_s
        self._periodic = Periodic("tether-judge", self.tick)

    def due(self) -> list[str]:
        """The closed sessions without a reward that closed at least `after_s` ago, oldest first."""
        cutoff = time.time() - self.after_s
        query = RolloutQuery(
            run=self.run, status=RolloutStatus.succeeded, limit=SCAN_LIMIT, oldest_first=True
        )
        return [
            row.rollout.id
            for row in self.store.query_rollouts(query).rows
            if row.reward is None and (row.rollout.ended_at or 0.0) <= cutoff
        ]

    def tick(self) -> int:
        """Judge the sessions due that no judge was asked about: how many got a score."""
        scored = 0
        for record in self.store.read_rollouts(self.due()):
            if any(span.name == JUDGE_SPAN for span in record.spans) or record.rewards:
                continue
            calls = [span for span in record.spans if is_call_span(span.name)]
            if calls:
                scored += self._judge(record, calls)
        return scored

    def _judge(self, record: RolloutRecord, calls: list[Span]) -> int:
        rollout = record.rollout
        try:
            verdict = self.judge(dict(rollout.input), last_answer(calls[-1]), record.spans)
        except RewardError as exc:
            self._keep(rollout.id, exc.spans)
            log.warning("judge: session %s: %s", rollout.id, exc)
            return 0
        self._keep(rollout.id, verdict.spans)
        value = verdict.values["judge"]
        reward = Reward(
            rollout_id=rollout.id, attempt=1, value=value, name="judge", source=JUDGE_SOURCE, time=now()
        )
        self.store.add_rewards([reward])
        return 1

    def _keep(self, rollout_id: str, spans: list[Span]) -> None:
        self.store.add_spans(
            [span.model_copy(update={"rollout_id": rollout_id, "attempt": 1}) for span in spans]
        )

    def start(self, interval_s: float) -> None:
        self._periodic.start(interval_s)

    def stop(self) -> None:
        self._periodic.stop(120)


def last_answer(call: Span) -> str:
    """The text of a recorded call's first choice."""
    choices: Any = call.attributes.get(CallAttr.CHOICES) or []
    return str(choices[0].get("text") or "") if choices else ""
