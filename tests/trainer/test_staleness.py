"""The per-token staleness rule of async training, on transitions built from a real store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.calls import call_span, running_rollout
from tether.adapters import Transition, build_transitions
from tether.store import SQLiteStore
from tether.trainer.staleness import fresh_transitions

PROMPT, FIRST, OBS, SECOND = [1, 10, 11], [20, 21, 2], [198, 30, 2], [22, 23]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "store.db")
    yield store
    store.close()


def merged_over_a_swap(store: SQLiteStore, old: int, new: int) -> Transition:
    """One agent's two calls, the first made under version `old`, the second under `new`."""
    rollout = running_rollout(store)
    store.add_spans(
        [
            call_span(rollout.id, PROMPT, FIRST, policy_version=old),
            call_span(rollout.id, PROMPT + FIRST + OBS, SECOND, policy_version=new),
        ]
    )
    (merged,) = build_transitions(store, [rollout], merge=True).transitions
    return merged


def test_only_the_stale_calls_tokens_leave_the_loss(store: SQLiteStore) -> None:
    merged = merged_over_a_swap(store, old=3, new=5)
    assert merged.policy_version == 3  # judged whole, the transition would be dropped at staleness 1
    [kept], report = fresh_transitions([merged], current=5, max_staleness=1)
    assert kept.loss_mask == [0] * len(FIRST) + [0] * len(OBS) + [1] * len(SECOND)
    assert kept.policy_version == 5 and kept.response_ids == merged.response_ids
    assert (report.dropped, report.masked_tokens) == (0, len(FIRST))
    assert report.mean == (2 * len(FIRST) + 0 * len(SECOND)) / (len(FIRST) + len(SECOND))


def test_fresh_tokens_are_kept_as_they_are(store: SQLiteStore) -> None:
    merged = merged_over_a_swap(store, old=4, new=5)
    [kept], report = fresh_transitions([merged], current=5, max_staleness=1)
    assert kept is merged and report.masked_tokens == 0 and report.dropped == 0


def test_a_wholly_stale_transition_is_dropped(store: SQLiteStore) -> None:
    merged = merged_over_a_swap(store, old=2, new=3)
    kept, report = fresh_transitions([merged], current=5, max_staleness=1)
    assert kept == [] and report.dropped == 1 and report.masked_tokens == 0


def test_a_transition_without_token_versions_is_judged_by_its_version(store: SQLiteStore) -> None:
    merged = merged_over_a_swap(store, old=3, new=3)
    whole = Transition(**{**merged.__dict__, "response_versions": []})
    assert fresh_transitions([whole], current=5, max_staleness=1)[1].dropped == 1
    [kept], _ = fresh_transitions([whole], current=4, max_staleness=1)
    assert kept is whole
    unknown = Transition(**{**merged.__dict__, "response_versions": [], "policy_version": None})
    assert fresh_transitions([unknown], current=9, max_staleness=0)[0] == [unknown]
