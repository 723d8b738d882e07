"""`tether store migrate`: a SQLite project copied into PostgreSQL (and back) loses nothing; a target that
has records is refused unless --force, which adds without duplicating."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.pg import Cluster
from tether.cli.main import main
from tether.store.base import Store
from tether.store.postgres import PostgresStore
from tether.store.records import Reward, RolloutRequest, RolloutStatus, Span, SpanEvent, Task
from tether.store.sqlite import SQLiteStore
from tether.store.tables import TABLES, open_tables

ALL = 1_000_000


def fill(store: Store) -> None:
    """A project with every kind of record: runs, retried and finished rollouts, a session, spans with
    events, rewards, several versions of a resource."""
    tasks = [Task(id=f"t{i}", input={"q": f"question {i}", "n": i}, dataset="calc") for i in range(6)]
    requests = [
        RolloutRequest(task=t, run="run-a", key=f"{t.id}#0", max_attempts=2, group_id="g", metadata={"i": 1})
        for t in tasks[:4]
    ] + [RolloutRequest(task=t, mode="eval") for t in tasks[4:]]
    rollouts = store.enqueue(requests)
    for number in range(3):
        claim = store.claim(f"worker-{number}")
        assert claim is not None
        store.add_spans(
            [
                Span(
                    rollout_id=claim.rollout.id,
                    attempt=1,
                    name="llm.chat",
                    start_time=10.0 + number,
                    end_time=11.5 + number,
                    origin="gateway",
                    attributes={"prompt_token_ids": [1, 2, number], "text": "héllo ✓"},
                    events=[SpanEvent(name="first_token", time=10.25, attributes={"i": number})],
                )
                for _ in range(2)
            ]
        )
        store.add_rewards([Reward(rollout_id=claim.rollout.id, value=0.5 * number, attempt=1, time=20.0)])
    store.update_status(rollouts[0].id, RolloutStatus.failed, error="boom", attempt=1)  # requeued
    store.update_status(rollouts[1].id, RolloutStatus.succeeded, output="42", attempt=1)
    store.add_rewards(
        [Reward(rollout_id=rollouts[1].id, value=-1, name="length", source="judge", primary=False)]
    )
    session = store.start_session({"by": "hand"})
    store.add_spans([Span(rollout_id=session.rollout.id, name="tool", start_time=1.0)])
    store.rename_run("run-a", "run-a~1")
    for version in range(3):
        store.put_resource("prompt", "template", {"text": f"v{version}"})
    store.put_resource("endpoint", "url", "http://127.0.0.1:1")


def everything(store: Store) -> dict[str, Any]:
    rollouts = store.list_rollouts(limit=ALL)
    resources = {r.name: r.version for r in store.list_resources()}
    return {
        "rollouts": rollouts,
        "runs": store.list_runs(),
        "attempts": {r.id: store.list_attempts(r.id) for r in rollouts if r.attempt_count},
        "spans": store.query_spans(limit=ALL),
        "rewards": {r.id: store.query_rewards(r.id) for r in rollouts},
        "resources": [store.get_resource(n, v) for n, last in resources.items() for v in range(1, last + 1)],
    }


def raw_rows(url: str, project: Path) -> dict[str, list[tuple[Any, ...]]]:
    tables = open_tables(url, project)
    try:
        return {table: [row for rows in tables.read(table) for row in rows] for table in TABLES}
    finally:
        tables.close()


def migrate(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`tether store migrate` as a process: its exit status and its output."""
    command = [sys.executable, "-m", "tether.cli.main", "store", "--project-dir", str(project), "migrate"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def migrate_here(capsys: pytest.CaptureFixture[str], project: Path, *args: str) -> tuple[int, str, str]:
    """The same command in this process (quicker): its exit status (or message) and its output."""
    try:
        status: int | str = main(["store", "--project-dir", str(project), "migrate", *args])
    except SystemExit as exc:
        status = str(exc.code)
    out = capsys.readouterr()
    return (
        (status if isinstance(status, int) else 1),
        out.out,
        out.err + (status if isinstance(status, str) else ""),
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    fill(store)
    store.close()
    return tmp_path


def test_sqlite_to_postgresql_and_back_loses_nothing(
    project: Path, pg_cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    source = f"sqlite://{project / '.tether' / 'store.db'}"
    target = pg_cluster.create_database()
    done = migrate(project, "--from", source, "--to", target)
    assert done.returncode == 0, done.stderr
    assert "copying spans: 7/7" in done.stderr and "copied 7 tasks, 7 rollouts" in done.stdout

    assert raw_rows(target, project) == raw_rows(source, project)
    sqlite, postgres = SQLiteStore(project / ".tether" / "store.db"), PostgresStore(target)
    try:
        assert everything(postgres) == everything(sqlite)
        # The copy is a working store: the queue and the counters carry on where the source left off.
        claim = postgres.claim("after-copy")
        assert claim is not None and claim.rollout.id == sqlite.claim("after-copy").rollout.id  # type: ignore[union-attr]
        (rollout,) = postgres.enqueue([RolloutRequest(task=Task(id="new"))])
        postgres.add_spans([Span(rollout_id=rollout.id, name="later", start_time=99.0)])
        assert postgres.query_spans(name="later")[0].seq == 8
        assert postgres.put_resource("prompt", "template", "v4").version == 4
    finally:
        sqlite.close()
        postgres.close()

    back = project / "back.db"
    status, _, err = migrate_here(capsys, project, "--from", target, "--to", f"sqlite://{back}")
    assert status == 0, err
    assert raw_rows(f"sqlite://{back}", project) == raw_rows(target, project)


def test_a_target_with_records_is_refused_unless_forced(
    project: Path, pg_cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    target = pg_cluster.create_database()
    other = PostgresStore(target)
    (mine,) = other.enqueue([RolloutRequest(task=Task(id="already-there"))])
    other.add_spans([Span(rollout_id=mine.id, name="mine", start_time=0.0)])
    other.close()

    status, _, err = migrate_here(capsys, project, "--to", target)
    assert status != 0
    assert "is not empty (1 tasks, 1 rollouts, 1 spans)" in err and "--force" in err
    assert (
        raw_rows(target, project)["rollouts"][0][0] == mine.id
        and len(raw_rows(target, project)["spans"]) == 1
    )

    for _ in range(2):  # a second forced copy finds every row there already
        status, out, err = migrate_here(capsys, project, "--to", target, "--force")
        assert status == 0, err
    rows = raw_rows(target, project)
    source = raw_rows(str(project / ".tether" / "store.db"), project)
    assert len(rows["rollouts"]) == len(source["rollouts"]) + 1
    assert len(rows["spans"]) == len(source["spans"]) + 1
    assert "already there, skipped" in out


def test_copying_a_store_onto_itself_or_from_nowhere_is_a_clear_error(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(project / ".tether" / "store.db")
    status, _, err = migrate_here(capsys, project, "--from", path, "--to", f"sqlite://{path}")
    assert status != 0 and "the source and the target are the same store" in err
    status, _, err = migrate_here(capsys, project, "--from", str(project / "none.db"), "--to", "x.db")
    assert status != 0 and "no store database at" in err
    status, _, err = migrate_here(capsys, project, "--to", "http://127.0.0.1:9")
    assert status != 0 and "copy the database it serves" in err
