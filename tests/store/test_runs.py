"""Runs in the store: keyed rollouts are enqueued once, claims stay within their run, runs are renamed
and listed, and the rollout epoch moves whenever a rollout changes. Every backend, over HTTP too."""

from __future__ import annotations

import pytest

from tether.store.base import Store
from tether.store.records import RolloutRequest, RolloutStatus, Task


def keyed(run: str, count: int, prefix: str = "t") -> list[RolloutRequest]:
    return [
        RolloutRequest(task=Task(id=f"{prefix}{i}", input={"i": i}), run=run, key=f"{prefix}{i}#0")
        for i in range(count)
    ]


def test_enqueueing_a_run_again_returns_its_rollouts_and_creates_none(store: Store) -> None:
    first = store.enqueue(keyed("a", 3))
    store.claim("w", run="a")
    again = store.enqueue([*keyed("a", 4)])
    assert [r.id for r in again[:3]] == [r.id for r in first]
    assert again[3].id not in {r.id for r in first} and again[3].key == "t3#0"
    assert again[0].status == RolloutStatus.running  # the existing rollout, as it is now
    assert len(store.list_rollouts(run="a", limit=100)) == 4
    other = store.enqueue(keyed("b", 1))
    assert other[0].id != first[0].id and other[0].run == "b"


def test_claims_take_only_the_named_runs_rollouts(store: Store) -> None:
    store.enqueue(keyed("a", 1))
    (b,) = store.enqueue(keyed("b", 1))
    claim = store.claim("w", run="b")
    assert claim is not None and claim.rollout.id == b.id
    assert store.claim("w", run="b") is None
    assert store.claim("w", run="nope") is None
    anyone = store.claim("w")
    assert anyone is not None and anyone.rollout.run == "a"


def test_runs_are_listed_and_renamed_with_all_their_rollouts(store: Store) -> None:
    store.enqueue(keyed("first", 2))
    store.enqueue(keyed("second", 1))
    assert store.list_runs() == ["first", "second"]
    assert store.rename_run("first", "first~1") == 2
    assert store.list_runs() == ["first~1", "second"]
    assert store.list_rollouts(run="first", limit=10) == []
    # the name is free again: the same keys make new rollouts
    assert len({r.id for r in store.enqueue(keyed("first", 2))} & {r.id for r in store.list_rollouts()}) == 2
    assert len(store.list_rollouts(limit=100)) == 5


def test_list_rollouts_pages_with_offset(store: Store) -> None:
    made = store.enqueue(keyed("p", 5))
    page = store.list_rollouts(run="p", limit=2, offset=2)
    assert [r.id for r in page] == [r.id for r in made[2:4]]


@pytest.mark.parametrize("change", ["claim", "close", "rename"])
def test_the_rollout_epoch_moves_when_a_rollout_changes(store: Store, change: str) -> None:
    (rollout,) = store.enqueue(keyed("e", 1))
    claim = store.claim("w")
    assert claim is not None
    before = store.rollouts_epoch()
    if change == "claim":
        store.enqueue(keyed("e", 2, prefix="u"))
        store.claim("w")
    elif change == "close":
        store.update_status(rollout.id, RolloutStatus.succeeded, attempt=1)
    else:
        store.rename_run("e", "e2")
    # Over HTTP the epoch is a clock (the client cannot see the server's changes): at most a second.
    if type(store).__name__ == "StoreClient":
        import time

        time.sleep(1.05)
    assert store.rollouts_epoch() != before
