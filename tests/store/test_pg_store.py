"""What the PostgreSQL store adds to the shared suite: versioned schema migrations, changes seen from
other connections through LISTEN/NOTIFY, group-committed span writes, and clear errors."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from tests.pg import Cluster
from tether.gateway.recorder import SpanRecorder
from tether.store import StoreError, open_store
from tether.store.base import InvalidValue
from tether.store.postgres import PostgresStore
from tether.store.postgres.schema import LATEST, MIGRATIONS, SchemaTooNew, migrate, schema_version
from tether.store.records import RolloutRequest, RolloutStatus, Span, Task


def versions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT version FROM tether_schema ORDER BY version")]


def test_a_new_database_gets_every_migration_once(pg_cluster: Cluster) -> None:
    url = pg_cluster.create_database()
    open_store(url).close()
    open_store(url.replace("postgresql://", "postgres://")).close()
    assert versions(url) == [m.version for m in MIGRATIONS] and LATEST == MIGRATIONS[-1].version


def test_an_older_database_is_migrated_and_keeps_its_records(pg_cluster: Cluster) -> None:
    url = pg_cluster.create_database()
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn, "old", target=1)  # as the first release of the schema left it
        conn.execute(
            "INSERT INTO rollouts (id, task_id, input, mode, status, max_attempts, attempt_count, "
            "created_at, metadata) VALUES ('ro-old', 't', '{}', 'train', 'queued', 1, 0, 1.0, '{}')"
        )
        assert schema_version(conn) == 1
    store = PostgresStore(url)
    try:
        assert versions(url) == [1, 2]
        assert store.get_rollout("ro-old").status == RolloutStatus.queued
        # Migration 2's trigger now tells waiters: an operator's UPDATE wakes one at once.
        waiter = threading.Thread(target=lambda: pg_cluster.psql(_finish_by_hand("ro-old"), _db(url)))
        threading.Timer(0.2, waiter.start).start()
        (done,) = store.wait_for(["ro-old"], timeout=30)
        assert done.status == RolloutStatus.cancelled
    finally:
        store.close()


def test_a_database_from_a_newer_tether_is_refused_untouched(pg_cluster: Cluster) -> None:
    url = pg_cluster.create_database()
    PostgresStore(url).close()
    pg_cluster.psql(f"INSERT INTO tether_schema VALUES ({LATEST + 1}, 'from the future', 0)", _db(url))
    with pytest.raises(SchemaTooNew, match=f"schema version {LATEST + 1}, newer than this Tether.*upgrade"):
        open_store(url)
    assert versions(url) == [*range(1, LATEST + 1), LATEST + 1]


def test_changes_from_other_connections_move_the_epoch_and_wake_waiters(pg_url: str) -> None:
    mine, other = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        (rollout,) = mine.enqueue([RolloutRequest(task=Task())])
        before = mine.rollouts_epoch()
        assert other.claim("elsewhere") is not None
        deadline = time.monotonic() + 30
        while mine.rollouts_epoch() == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mine.rollouts_epoch() != before  # mine wrote nothing: the notification moved it
        threading.Timer(0.2, lambda: other.update_status(rollout.id, RolloutStatus.succeeded)).start()
        started = time.monotonic()
        (finished,) = mine.wait_for([rollout.id], timeout=60)
        assert finished.status == RolloutStatus.succeeded and time.monotonic() - started < 60
    finally:
        mine.close()
        other.close()


def test_span_writers_that_arrive_together_share_a_commit_and_a_bad_span_fails_alone(
    pg_cluster: Cluster, pg_url: str
) -> None:
    store = PostgresStore(pg_url)
    (rollout,) = store.enqueue([RolloutRequest(task=Task())])
    first = Span(rollout_id=rollout.id, name="first", start_time=0.0)
    with psycopg.connect(pg_url) as blocker:
        blocker.execute("LOCK TABLE spans IN EXCLUSIVE MODE")  # the first commit waits behind it
        leader = threading.Thread(target=store.add_spans, args=([first],))
        leader.start()
        _wait_until(lambda: _waiting_on_lock(pg_url))
        outcomes: dict[str, BaseException | None] = {}
        names = ["a", "b", "bad\x00name", "c"]
        followers = [threading.Thread(target=_write, args=(store, rollout.id, n, outcomes)) for n in names]
        for follower in followers:
            follower.start()
        _wait_until(lambda: len(store._spans._waiting) == len(names))
        commits = store.span_commits
        blocker.rollback()  # lets the first commit through
    leader.join(30)
    for follower in followers:
        follower.join(30)
    try:
        assert isinstance(outcomes.pop("bad\x00name"), InvalidValue)
        assert outcomes == {"a": None, "b": None, "c": None}
        # the first alone, then the waiting four at once, retried one by one for the bad span
        assert store.span_commits == commits + 1 + 3
        names = [s.name for s in store.query_spans(rollout_id=rollout.id)]
        assert names[0] == "first" and sorted(names[1:]) == ["a", "b", "c"]  # the group in arrival order
    finally:
        store.close()


async def test_the_gateway_recorder_answers_only_committed_spans(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    recorder = SpanRecorder(store)
    try:
        (rollout,) = store.enqueue([RolloutRequest(task=Task())])
        await recorder.record(Span(rollout_id=rollout.id, name="llm", start_time=1.0))
        with psycopg.connect(pg_url) as conn:  # another connection sees it: it was committed
            assert conn.execute("SELECT name FROM spans").fetchall() == [("llm",)]
        with pytest.raises(InvalidValue):
            await recorder.record(Span(rollout_id=rollout.id, name="x", start_time=1.0, attempt=2**70))
    finally:
        recorder.close()
        store.close()


def test_unreachable_servers_and_closed_stores_are_store_errors(pg_url: str) -> None:
    with pytest.raises(
        StoreError, match="cannot open the PostgreSQL store postgresql://u:\\*\\*\\*@127.0.0.1:9/"
    ):
        open_store("postgresql://u:secret@127.0.0.1:9/db")
    store = PostgresStore(pg_url)
    store.close()
    with pytest.raises(StoreError):
        store.list_rollouts()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u@127.0.0.1:9/db?password=pw-1", "postgresql://u@127.0.0.1:9/db?password=***"),
        (
            "postgresql:///db?host=127.0.0.1&port=9&SSLPassword=pw-1&sslmode=disable",
            "SSLPassword=***&sslmode=",
        ),
        ("postgres://u:pw-1@127.0.0.1:9/db?password=pw-2", "postgres://u:***@127.0.0.1:9/db?password=***"),
    ],
)
def test_no_password_a_url_holds_is_repeated_in_an_error(url: str, shown: str) -> None:
    """As libpq reads a URL: a password in its user info, or as its `password` or `sslpassword`."""
    with pytest.raises(StoreError) as refused:
        open_store(url)
    assert shown in str(refused.value) and "pw-" not in str(refused.value)


def _write(
    store: PostgresStore, rollout_id: str, name: str, outcomes: dict[str, BaseException | None]
) -> None:
    try:
        store.add_spans([Span(rollout_id=rollout_id, name=name, start_time=1.0)])
        outcomes[name] = None
    except BaseException as exc:  # noqa: BLE001 - the test looks at it
        outcomes[name] = exc


def _waiting_on_lock(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").fetchone()
        return bool(row and row[0])


def _wait_until(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)
    assert condition(), "timed out waiting"  # type: ignore[operator]


def _finish_by_hand(rollout_id: str) -> str:
    return f"UPDATE rollouts SET status = 'cancelled', ended_at = 2.0 WHERE id = '{rollout_id}'"


def _db(url: str) -> str:
    return url.rsplit("/", 1)[1]
