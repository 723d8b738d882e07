"""Behaviour every store backend shares: SQLite on a file, SQLite in memory, and the HTTP client."""

from __future__ import annotations

import threading
import time

import pytest

from tether.store.base import InvalidTransition, NotFound, Store
from tether.store.lifecycle import MAX_WORKER_LOSSES
from tether.store.records import (
    Reward,
    Rollout,
    RolloutRecord,
    RolloutRequest,
    RolloutStatus,
    Span,
    SpanEvent,
    Task,
)
from tether.store.sql.store import READ_CHUNK


def requests(count: int, **options: object) -> list[RolloutRequest]:
    return [RolloutRequest(task=Task(input={"n": n}), **options) for n in range(count)]


def span(rollout_id: str, name: str = "llm", start: float = 100.0, **fields: object) -> Span:
    return Span(rollout_id=rollout_id, name=name, start_time=start, end_time=start + 1, **fields)


def finish_later(store: Store, rollout_id: str, delay: float = 0.2) -> threading.Thread:
    def finish() -> None:
        time.sleep(delay)
        store.update_status(rollout_id, RolloutStatus.succeeded, output="done")

    thread = threading.Thread(target=finish, daemon=True)
    thread.start()
    return thread


def without_seq(spans: list[Span]) -> list[Span]:
    return [s.model_copy(update={"seq": None}) for s in spans]


# -- rollouts -------------------------------------------------------------------------------------------


def test_enqueue_returns_queued_rollouts(store: Store) -> None:
    rollouts = store.enqueue(requests(2, mode="eval", group_id="g", max_attempts=3, metadata={"k": "v"}))
    assert [r.input for r in rollouts] == [{"n": 0}, {"n": 1}]
    assert all(r.status == RolloutStatus.queued and r.attempt_count == 0 for r in rollouts)
    assert store.get_rollout(rollouts[0].id) == rollouts[0]
    assert (rollouts[1].mode, rollouts[1].group_id, rollouts[1].max_attempts) == ("eval", "g", 3)
    assert rollouts[1].metadata == {"k": "v"}
    assert store.enqueue([]) == []


def test_claims_come_in_enqueue_order(store: Store) -> None:
    first = store.enqueue(requests(2))
    second = store.enqueue(requests(1))
    claimed = [store.claim(f"w{n}") for n in range(3)]
    assert [c.rollout.id for c in claimed if c] == [r.id for r in first + second]
    claim = claimed[0]
    assert claim is not None
    assert claim.rollout.status == RolloutStatus.running and claim.rollout.started_at is not None
    assert (claim.attempt.number, claim.attempt.worker_id, claim.attempt.status) == (1, "w0", "running")
    assert store.get_rollout(claim.rollout.id) == claim.rollout
    assert store.claim("w") is None


def test_claim_returns_none_when_queue_is_empty(store: Store) -> None:
    assert store.claim("w") is None


def test_failed_attempt_with_attempts_left_is_retried(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1, max_attempts=2))
    first = store.claim("w1")
    assert first is not None and first.attempt.number == 1
    after_first = store.update_status(rollout.id, RolloutStatus.failed, error="boom 1")
    assert after_first.status == RolloutStatus.queued
    assert after_first.ended_at is None

    second = store.claim("w2")
    assert second is not None and second.rollout.id == rollout.id and second.attempt.number == 2
    final = store.update_status(rollout.id, RolloutStatus.failed, error="boom 2", attempt=2)
    assert (final.status, final.error, final.attempt_count) == (RolloutStatus.failed, "boom 2", 2)
    assert final.ended_at is not None
    attempts = store.list_attempts(rollout.id)
    assert [(a.number, a.worker_id, a.status, a.error) for a in attempts] == [
        (1, "w1", RolloutStatus.failed, "boom 1"),
        (2, "w2", RolloutStatus.failed, "boom 2"),
    ]
    assert store.claim("w3") is None


def test_timed_out_attempt_is_retried_and_success_keeps_output(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1, max_attempts=2))
    store.claim("w")
    assert store.update_status(rollout.id, RolloutStatus.timed_out).status == RolloutStatus.queued
    store.claim("w")
    done = store.update_status(rollout.id, RolloutStatus.succeeded, output="42")
    assert (done.status, done.output, done.attempt_count) == (RolloutStatus.succeeded, "42", 2)
    assert [a.status for a in store.list_attempts(rollout.id)] == [RolloutStatus.timed_out, "succeeded"]


def test_cancelled_queued_rollout_is_never_claimed(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1, max_attempts=3))
    cancelled = store.update_status(rollout.id, RolloutStatus.cancelled)
    assert cancelled.status == RolloutStatus.cancelled and cancelled.ended_at is not None
    assert store.claim("w") is None


def test_failing_a_queued_rollout_finishes_it(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1, max_attempts=3))
    assert store.update_status(rollout.id, RolloutStatus.failed, error="bad input").status == "failed"


def test_finished_rollouts_reject_further_transitions(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1))
    store.claim("w")
    store.update_status(rollout.id, RolloutStatus.succeeded)
    for status in (RolloutStatus.failed, RolloutStatus.cancelled, RolloutStatus.succeeded):
        with pytest.raises(InvalidTransition, match="already succeeded"):
            store.update_status(rollout.id, status)
    assert store.get_rollout(rollout.id).status == RolloutStatus.succeeded


def test_queued_and_running_cannot_be_set_directly(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1))
    for status in (RolloutStatus.queued, RolloutStatus.running):
        with pytest.raises(InvalidTransition):
            store.update_status(rollout.id, status)


def test_stale_attempt_cannot_finish_its_replacement(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1, max_attempts=2))
    store.claim("w1")
    time.sleep(0.01)
    assert store.requeue_stale(0.0) == [rollout.id]
    store.claim("w2")
    with pytest.raises(InvalidTransition, match="attempt 1"):
        store.update_status(rollout.id, RolloutStatus.succeeded, attempt=1)
    assert store.get_rollout(rollout.id).status == RolloutStatus.running


def test_unknown_ids_raise_not_found(store: Store) -> None:
    with pytest.raises(NotFound) as caught:
        store.get_rollout("ro-missing")
    assert (caught.value.what, caught.value.key) == ("rollout", "ro-missing")
    with pytest.raises(NotFound):
        store.update_status("ro-missing", RolloutStatus.succeeded)
    with pytest.raises(NotFound):
        store.heartbeat("ro-missing", 1)
    with pytest.raises(NotFound):
        store.list_attempts("ro-missing")
    with pytest.raises(NotFound):
        store.add_rewards([Reward(rollout_id="ro-missing", value=1.0)])
    with pytest.raises(NotFound):
        store.wait_for(["ro-missing"], timeout=0.1)
    with pytest.raises(NotFound) as caught:
        store.get_resource("nothing")
    assert (caught.value.what, caught.value.key) == ("resource", "nothing")
    store.put_resource("prompt", "text", "hi")
    with pytest.raises(NotFound, match="prompt@7"):
        store.get_resource("prompt", 7)


def test_heartbeats_touch_only_the_running_attempt(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1))
    claim = store.claim("w")
    assert claim is not None
    store.heartbeat(rollout.id, 1)
    (attempt,) = store.list_attempts(rollout.id)
    assert attempt.heartbeat_at >= claim.attempt.heartbeat_at
    with pytest.raises(NotFound) as caught:
        store.heartbeat(rollout.id, 2)
    assert caught.value.what == "running attempt"
    store.update_status(rollout.id, RolloutStatus.succeeded)
    with pytest.raises(NotFound):
        store.heartbeat(rollout.id, 1)


def test_requeue_stale_requeues_without_using_up_attempts_until_the_loss_allowance_ends(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1, max_attempts=1))
    store.claim("w1")
    assert store.requeue_stale(3600.0) == []
    for lost in range(1, MAX_WORKER_LOSSES + 1):
        time.sleep(0.01)
        assert store.requeue_stale(0.0) == [rollout.id]
        requeued = store.get_rollout(rollout.id)
        assert (requeued.status, requeued.worker_losses) == (RolloutStatus.queued, lost)
        claim = store.claim(f"w{lost + 1}")
        assert claim is not None and claim.attempt.number == lost + 1
    first = store.list_attempts(rollout.id)[0]
    assert (first.status, first.error) == (RolloutStatus.timed_out, "heartbeat lost")
    time.sleep(0.01)
    assert store.requeue_stale(0.0) == [rollout.id]
    final = store.get_rollout(rollout.id)
    assert (final.status, final.error) == (RolloutStatus.timed_out, "heartbeat lost")


def test_a_lost_worker_does_not_count_against_max_attempts_but_a_failure_does(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1, max_attempts=2))
    claim = store.claim("w1")
    assert claim is not None
    store.abandon(rollout.id, claim.attempt.number, "worker lost: killed")
    claim = store.claim("w2")
    assert claim is not None and claim.attempt.number == 2
    assert store.update_status(rollout.id, RolloutStatus.failed, attempt=2).status == RolloutStatus.queued
    claim = store.claim("w3")
    assert claim is not None and claim.attempt.number == 3
    assert store.update_status(rollout.id, RolloutStatus.failed, attempt=3).status == RolloutStatus.failed
    with pytest.raises(InvalidTransition):
        store.abandon(rollout.id, 3, "too late")


def test_start_session_opens_a_running_rollout(store: Store) -> None:
    claim = store.start_session({"q": "hello"}, worker_id="me")
    assert claim.rollout.status == RolloutStatus.running and claim.rollout.metadata == {"session": True}
    assert claim.rollout.input == {"q": "hello"}
    assert (claim.attempt.number, claim.attempt.worker_id) == (1, "me")
    assert store.get_rollout(claim.rollout.id).status == RolloutStatus.running
    assert store.claim("w") is None
    assert claim.rollout.mode == "session"
    assert store.start_session(mode="optimizer").rollout.mode == "optimizer"


def test_list_rollouts_by_status_and_time_window(store: Store) -> None:
    store.enqueue(requests(3))
    time.sleep(0.01)
    store.enqueue(requests(2))
    everything = store.list_rollouts()
    assert len(everything) == 5
    assert [r.created_at for r in everything] == sorted(r.created_at for r in everything)
    claim = store.claim("w")
    assert claim is not None
    assert [r.id for r in store.list_rollouts(status=RolloutStatus.running)] == [claim.rollout.id]
    assert claim.rollout.id not in [r.id for r in store.list_rollouts(status=RolloutStatus.queued)]
    assert len(store.list_rollouts(status=RolloutStatus.queued)) == 4

    cut = everything[3].created_at
    assert [r.id for r in store.list_rollouts(since=cut)] == [r.id for r in everything if r.created_at >= cut]
    assert [r.id for r in store.list_rollouts(until=cut)] == [r.id for r in everything if r.created_at < cut]
    assert len(store.list_rollouts(limit=2)) == 2
    assert store.list_rollouts(status=RolloutStatus.cancelled) == []


def test_wait_for_returns_when_another_thread_finishes(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1))
    store.claim("w")
    finisher = finish_later(store, rollout.id)
    (finished,) = store.wait_for([rollout.id], timeout=30.0)
    finisher.join()
    assert (finished.id, finished.status, finished.output) == (rollout.id, RolloutStatus.succeeded, "done")


def test_wait_for_returns_the_finished_part_on_timeout(store: Store) -> None:
    done, pending = store.enqueue(requests(2))
    store.update_status(done.id, RolloutStatus.cancelled)
    finished = store.wait_for([done.id, pending.id], timeout=0.2)
    assert [r.id for r in finished] == [done.id]
    assert store.wait_for([], timeout=0.1) == []


# -- spans and rewards ----------------------------------------------------------------------------------


def test_spans_round_trip_in_order(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1))
    spans = [
        span(
            rollout.id,
            "llm",
            start=10.0,
            attempt=1,
            kind="client",
            status="error",
            status_message="rate limited",
            attributes={"prompt_ids": [1, 2, 3], "nested": {"a": [None, True, 1.5]}, "text": "héllo ✓"},
            events=[
                SpanEvent(name="first_token", time=10.5, attributes={"i": 0}),
                SpanEvent(name="x", time=11),
            ],
        ),
        span(rollout.id, "tool", start=5.0, parent_id="abc"),
        span(rollout.id, "llm", start=20.0),
    ]
    store.add_spans(spans)
    got = store.query_spans(rollout_id=rollout.id)
    assert without_seq(got) == spans
    seqs = [s.seq for s in got]
    assert all(seq is not None for seq in seqs) and seqs == sorted(seqs)
    store.add_spans([])


def test_query_spans_by_rollout_attempt_name_and_time(store: Store) -> None:
    a, b = store.enqueue(requests(2))
    store.add_spans(
        [
            span(a.id, "llm", start=1.0, attempt=1),
            span(a.id, "tool", start=2.0, attempt=1),
            span(b.id, "llm", start=3.0, attempt=2),
            span(a.id, "llm", start=4.0, attempt=2),
        ]
    )

    def starts(**query: object) -> list[float]:
        return [s.start_time for s in store.query_spans(**query)]

    assert starts(rollout_id=a.id) == [1.0, 2.0, 4.0]
    assert starts(name="llm") == [1.0, 3.0, 4.0]
    assert starts(rollout_id=a.id, attempt=2) == [4.0]
    assert starts(since=2.0, until=4.0) == [2.0, 3.0]
    assert starts(limit=2) == [1.0, 2.0]
    assert starts(rollout_id="ro-none") == []


def test_duplicate_span_ids_are_ignored(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1))
    original = span(rollout.id, "llm", attributes={"v": 1})
    store.add_spans([original])
    store.add_spans([original.model_copy(update={"attributes": {"v": 2}}), span(rollout.id, "other")])
    got = store.query_spans(rollout_id=rollout.id)
    assert [(s.name, s.attributes) for s in got] == [("llm", {"v": 1}), ("other", {})]


def test_rewards_keep_names_sources_and_span_links(store: Store) -> None:
    a, b = store.enqueue(requests(2))
    rewards = [
        Reward(rollout_id=a.id, value=1.0, time=5.0),
        Reward(
            rollout_id=a.id, value=-0.5, name="length", source="judge", attempt=1, span_id="s1", primary=False
        ),
        Reward(rollout_id=b.id, value=0.25, time=6.0),
    ]
    store.add_rewards(rewards)
    assert store.query_rewards(a.id) == rewards[:2]
    assert store.query_rewards(b.id) == rewards[2:]
    assert store.query_rewards("ro-none") == []
    store.add_rewards([])


# -- records ------------------------------------------------------------------------------------------


def per_rollout_record(store: Store, rollout_id: str) -> RolloutRecord:
    """What `read_rollouts` answers for one rollout, from the per-rollout queries."""
    return RolloutRecord(
        rollout=store.get_rollout(rollout_id),
        attempts=store.list_attempts(rollout_id),
        spans=store.query_spans(rollout_id=rollout_id, limit=1_000_000),
        rewards=store.query_rewards(rollout_id),
    )


def test_read_rollouts_answers_what_the_per_rollout_queries_do(store: Store) -> None:
    (retried,) = store.enqueue(requests(1, max_attempts=2))
    for worker in ("w1", "w2"):  # two failed attempts, each with a call span, started later than the last
        claim = store.claim(worker)
        assert claim is not None and claim.rollout.id == retried.id
        number = claim.attempt.number
        store.add_spans([span(retried.id, "llm", start=10.0 - number, attempt=number)])
        store.update_status(retried.id, RolloutStatus.failed, attempt=number)
    plain, bare = store.enqueue(requests(2))
    claim = store.claim("w3")
    assert claim is not None and claim.rollout.id == plain.id
    store.add_spans(
        [
            span(plain.id, "tool", start=3.0),
            span(retried.id, "tool", start=0.5),
            span(plain.id, "llm", start=2.0),
        ]
    )
    store.update_status(plain.id, RolloutStatus.succeeded, output="done")
    store.add_rewards(
        [
            Reward(rollout_id=plain.id, value=1.0, time=5.0),
            Reward(rollout_id=retried.id, value=0.5, attempt=2, time=1.0),
            Reward(rollout_id=plain.id, value=-0.2, name="length", primary=False, time=4.0),
        ]
    )

    ids = [plain.id, bare.id, retried.id, plain.id]
    records = store.read_rollouts(ids)

    assert records == [per_rollout_record(store, rollout_id) for rollout_id in ids]
    shapes = [(len(r.attempts), len(r.spans), len(r.rewards)) for r in records]
    assert shapes == [(1, 2, 2), (0, 0, 0), (2, 3, 1), (1, 2, 2)]
    assert [s.start_time for s in records[2].spans] == [9.0, 8.0, 0.5]  # insertion order, not time order
    assert store.read_rollouts([]) == []


def test_read_rollouts_of_an_unknown_id_is_not_found(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1))
    with pytest.raises(NotFound) as caught:
        store.read_rollouts([rollout.id, "ro-missing"])
    assert (caught.value.what, caught.value.key) == ("rollout", "ro-missing")


def test_read_rollouts_of_more_rollouts_than_one_statement_reads(store: Store) -> None:
    rollouts = list(reversed(store.enqueue(requests(2 * READ_CHUNK + 1))))  # asked for in another order
    edges = [rollouts[n] for n in (0, READ_CHUNK - 1, READ_CHUNK, -1)]  # first and last of the statements
    store.add_spans([span(r.id, "llm", start=float(n)) for n, r in enumerate(edges)])
    store.add_rewards([Reward(rollout_id=r.id, value=float(n)) for n, r in enumerate(edges)])

    records = store.read_rollouts([r.id for r in rollouts])

    assert [r.rollout for r in records] == rollouts
    by_id = {r.rollout.id: r for r in records}
    assert {r.rollout.id for r in records if r.spans or r.rewards} == {r.id for r in edges}
    for n, rollout in enumerate(edges):
        assert by_id[rollout.id] == per_rollout_record(store, rollout.id)
        assert [s.start_time for s in by_id[rollout.id].spans] == [float(n)]


# -- resources ------------------------------------------------------------------------------------------


def test_resources_are_versioned(store: Store) -> None:
    first = store.put_resource("prompts/system", "prompt", {"text": "v1", "vars": ["a"]})
    second = store.put_resource("prompts/system", "prompt", {"text": "v2"})
    other = store.put_resource("endpoint", "url", "http://x")
    assert (first.version, second.version, other.version) == (1, 2, 1)
    assert store.get_resource("prompts/system") == second
    assert store.get_resource("prompts/system", 1) == first
    assert store.list_resources() == [other, second]
    assert store.put_resource("numbers", "list", [1, 2.5, None]).value == [1, 2.5, None]


def test_rollout_round_trips_through_every_query(store: Store) -> None:
    (rollout,) = store.enqueue(requests(1))
    assert store.list_rollouts() == [rollout]
    assert isinstance(store.get_rollout(rollout.id), Rollout)
