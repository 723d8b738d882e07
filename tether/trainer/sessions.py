"""Learn from deployment: the batch an update takes from a served agent's sessions (`tether serve`'s named
sessions, `tether/gateway/sessions.py`) and the rewards posted for them later. No agent runs.

Which sessions: the finished ones of one sessions run (a deployment's own: another run's sessions never
enter), opened at or after `since`, with a final reward, less those the redaction rules leave out (a
pattern found in a model call's recorded text, or a hook's verdict) before anything is built from them.

Off-policy, by the record: each call's tokens were sampled by the policy version that served it, with
the logprobs the gateway recorded. The update's importance ratio (the learner's pi_old / mu, truncated at
`--tis-cap` as in every update) corrects for a version close to the trained one; a call more than
`version_lag` versions older than the newest in the batch is left out instead, since a truncated ratio
then hides how far the policy has moved.

RL: no two sessions share a prompt, so the baseline is the batch: every session is one member of one
group, its advantage its reward against the batch's mean (and spread, for GRPO). SFT: the sessions
rewarded at least the threshold, imitated on their own recorded tokens (nothing is re-tokenized).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from tether.adapters import Transition
from tether.adapters.build import ALL_ROWS, transitions_of
from tether.algorithms.advantages import (
    AdvantageBatch,
    advantage_method,
    assign_advantages,
    imitation_batch,
)
from tether.contracts import is_call_span
from tether.store import Store
from tether.store.records import RolloutRecord, RolloutStatus
from tether.store.reward_rule import rollout_final_reward

SESSION_GROUP = "sessions"  # the one group every session of a batch belongs to


@dataclass(frozen=True)
class SessionSource:
    run: str
    since: float | None = None
    version_lag: int = 2
    redact: tuple[str, ...] = ()
    keep: Callable[[RolloutRecord], bool] | None = None  # the redaction hook: False leaves a session out


@dataclass
class SessionReport:
    """What became of the run's sessions on the way to the batch."""

    finished: int = 0  # finished sessions of the run since `since`
    unrewarded: int = 0
    redacted: int = 0  # a pattern matched
    left_by_hook: int = 0
    stale_calls: int = 0  # calls of a policy more than `version_lag` versions older than the newest
    sessions: list[str] = field(default_factory=list)  # the rollout ids trained on

    def as_metrics(self) -> dict[str, int]:
        return {
            "sessions.finished": self.finished,
            "sessions.unrewarded": self.unrewarded,
            "sessions.redacted": self.redacted,
            "sessions.left_by_hook": self.left_by_hook,
            "sessions.stale_calls": self.stale_calls,
            "sessions.trained": len(self.sessions),
        }


def session_transitions(store: Store, source: SessionSource) -> tuple[list[Transition], SessionReport]:
    """The transitions of the run's rewarded, unredacted sessions (one `read_rollouts`), each of its own
    session in the one batch group, the stale calls left out."""
    report = SessionReport()
    finished = [
        rollout
        for rollout in store.list_rollouts(run=source.run, limit=ALL_ROWS)
        if rollout.status == RolloutStatus.succeeded
        and (source.since is None or (rollout.started_at or rollout.created_at) >= source.since)
    ]
    report.finished = len(finished)
    kept = [
        record for record in store.read_rollouts([r.id for r in finished]) if _kept(record, source, report)
    ]
    transitions = [replace(t, group_id=SESSION_GROUP) for t in transitions_of(kept, merge=True).transitions]
    known = [t.policy_version for t in transitions if t.policy_version is not None]
    if known:
        oldest = max(known) - source.version_lag
        fresh = [t for t in transitions if t.policy_version is None or t.policy_version >= oldest]
        report.stale_calls = len(transitions) - len(fresh)
        transitions = fresh
    report.sessions = sorted({t.rollout_id for t in transitions})
    return transitions, report


def _kept(record: RolloutRecord, source: SessionSource, report: SessionReport) -> bool:
    rollout = record.rollout
    if rollout_final_reward(rollout, record.rewards, rollout.attempt_count or None) is None:
        report.unrewarded += 1
        return False
    if source.redact and _matches(record, source.redact):
        report.redacted += 1
        return False
    if source.keep is not None and not source.keep(record):
        report.left_by_hook += 1
        return False
    return True


def _matches(record: RolloutRecord, patterns: Sequence[str]) -> bool:
    """Whether a redaction pattern is found in a model call's recorded request or answer."""
    texts = [
        json.dumps(span.attributes, ensure_ascii=False) for span in record.spans if is_call_span(span.name)
    ]
    return any(re.search(pattern, text) for pattern in patterns for text in texts)


def session_batch(transitions: Sequence[Transition], algorithm: str, sft_min_reward: float) -> AdvantageBatch:
    """RL: each session against the batch (`assign_advantages`, one group); SFT: those rewarded at least
    `sft_min_reward`, imitated."""
    if algorithm == "sft":
        return imitation_batch(t for t in transitions if t.reward >= sft_min_reward)
    return assign_advantages(transitions, method=advantage_method(algorithm))
