"""The SQLite store on disk: reopening, several processes on one file, kill -9, read-only files."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.store.base import StoreError
from tether.store.records import Reward, RolloutRequest, RolloutStatus, Span, SpanEvent, Task
from tether.store.sqlite import SQLiteStore

CLAIMERS = 3
ROLLOUTS = 200
SPANS_PER_BATCH = 20
BATCHES_BEFORE_KILL = 25

WRITER = """
import sys
from tether.store.records import Span
from tether.store.sqlite import SQLiteStore

store = SQLiteStore(sys.argv[1])
batch = 0
while True:
    spans = [
        Span(rollout_id="ro-kill", name=f"batch-{batch}", start_time=float(batch), attributes={"i": i})
        for i in range(int(sys.argv[2]))
    ]
    store.add_spans(spans)
    print(batch, flush=True)
    batch += 1
"""

# Root ignores file modes, so the child drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH first: then the
# kernel refuses its writes exactly as it would refuse an ordinary user's.
READ_ONLY_OPENER = """
import ctypes, os, sys

class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

class Data(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]

if os.geteuid() == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()
    if libc.capget(ctypes.byref(header), data) == 0:
        for field in ("effective", "permitted", "inheritable"):
            setattr(data[0], field, getattr(data[0], field) & ~0b110)
        libc.capset(ctypes.byref(header), data)
if os.access(sys.argv[1], os.W_OK):
    print("SKIP: cannot drop the right to write")
    sys.exit(0)

from tether.store.base import StoreError
from tether.store.records import RolloutRequest, Task
from tether.store.sqlite import SQLiteStore

try:
    store = SQLiteStore(sys.argv[1])
    store.enqueue([RolloutRequest(task=Task())])
except StoreError as exc:
    print(f"StoreError: {exc}")
else:
    print("WROTE")
"""


def claim_until_empty(path: str, worker_id: str, barrier: Any, results: Any) -> None:
    store = SQLiteStore(path)
    barrier.wait(timeout=60)
    claimed = []
    while (claim := store.claim(worker_id)) is not None:
        claimed.append(claim.rollout.id)
        store.heartbeat(claim.rollout.id, claim.attempt.number)
        time.sleep(0.001)  # yields the CPU, so that the claimers interleave even on one core
    store.close()
    results.put(claimed)


def test_everything_survives_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    queued, running = store.enqueue(
        [RolloutRequest(task=Task(input={"n": n}), max_attempts=2) for n in range(2)]
    )
    claim = store.claim("w")
    assert claim is not None
    store.update_status(queued.id, RolloutStatus.failed, error="e", attempt=1)
    span = Span(
        rollout_id=running.id,
        name="llm",
        start_time=1.0,
        attributes={"ids": [1, 2]},
        events=[SpanEvent(name="e", time=1.5)],
    )
    store.add_spans([span])
    store.add_rewards([Reward(rollout_id=running.id, value=0.5, name="r", span_id=span.span_id)])
    resource = store.put_resource("prompt", "text", {"t": "hi"})
    before = (
        store.list_rollouts(),
        store.list_attempts(queued.id),
        store.query_spans(),
        store.query_rewards(running.id),
    )
    store.close()

    reopened = SQLiteStore(path)
    after = (
        reopened.list_rollouts(),
        reopened.list_attempts(queued.id),
        reopened.query_spans(),
        reopened.query_rewards(running.id),
    )
    assert after == before
    assert reopened.get_resource("prompt") == resource
    again = reopened.claim("w2")
    assert again is not None and again.rollout.id == queued.id and again.attempt.number == 2
    reopened.close()


def test_processes_sharing_a_file_never_claim_the_same_rollout(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    store = SQLiteStore(path)
    expected = {
        r.id for r in store.enqueue([RolloutRequest(task=Task(input={"n": n})) for n in range(ROLLOUTS)])
    }
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(CLAIMERS)
    results = context.Queue()
    workers = [
        context.Process(target=claim_until_empty, args=(str(path), f"proc-{n}", barrier, results))
        for n in range(CLAIMERS)
    ]
    for worker in workers:
        worker.start()
    claimed = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0

    every_claim = [rollout_id for batch in claimed for rollout_id in batch]
    assert len(every_claim) == len(set(every_claim))
    assert set(every_claim) == expected
    assert all(len(store.list_attempts(rollout_id)) == 1 for rollout_id in expected)
    assert store.list_rollouts(status=RolloutStatus.queued) == []
    store.close()


def test_kill_9_loses_no_reported_commit(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(SPANS_PER_BATCH)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    try:
        reported = []
        while len(reported) < BATCHES_BEFORE_KILL:
            line = writer.stdout.readline()
            assert line, f"the writer stopped early with exit code {writer.poll()}"
            reported.append(int(line))
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    rest = writer.stdout.read()
    reported += [int(line) for line in rest.splitlines(keepends=True) if line.endswith("\n")]
    assert writer.returncode == -signal.SIGKILL

    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store = SQLiteStore(path)
    spans = store.query_spans(rollout_id="ro-kill", limit=1_000_000)
    counts: dict[str, int] = {}
    for span in spans:
        counts[span.name] = counts.get(span.name, 0) + 1
    for batch in reported:
        assert counts.get(f"batch-{batch}") == SPANS_PER_BATCH, f"batch {batch} was reported but is missing"
    assert set(counts.values()) == {SPANS_PER_BATCH}, "a batch was committed only in part"
    store.enqueue([RolloutRequest(task=Task())])
    store.close()


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory for a database the test makes read-only; made writable again for cleanup."""
    directory = tmp_path / "read-only"
    directory.mkdir()
    yield directory
    directory.chmod(0o700)
    for child in directory.iterdir():
        child.chmod(0o600)


@pytest.mark.parametrize("dir_writable", [False, True], ids=["read-only-dir", "writable-dir"])
def test_read_only_database_file_gives_store_error(read_only_dir: Path, dir_writable: bool) -> None:
    path = read_only_dir / "store.db"
    store = SQLiteStore(path)
    store.enqueue([RolloutRequest(task=Task())])
    store.close()
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    if not dir_writable:
        read_only_dir.chmod(0o555)

    result = subprocess.run(
        [sys.executable, "-c", READ_ONLY_OPENER, str(path)], capture_output=True, text=True, timeout=60
    )
    if result.stdout.startswith("SKIP"):
        pytest.skip(result.stdout.strip())
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("StoreError: "), result.stdout + result.stderr
    assert str(path) in result.stdout and "readonly" in result.stdout.replace("read-only", "readonly")


def test_writes_to_a_read_only_connection_give_store_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    (rollout,) = store.enqueue([RolloutRequest(task=Task())])
    store._db.execute("PRAGMA query_only=ON")
    with pytest.raises(StoreError, match="cannot write to store database .*readonly"):
        store.enqueue([RolloutRequest(task=Task())])
    with pytest.raises(StoreError, match="readonly"):
        store.add_spans([Span(rollout_id=rollout.id, name="s", start_time=0.0)])
    assert store.get_rollout(rollout.id) == rollout
    store._db.execute("PRAGMA query_only=OFF")
    assert store.claim("w") is not None
    store.close()


def test_a_closed_store_raises_store_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    store.close()
    with pytest.raises(StoreError):
        store.list_rollouts()
    with pytest.raises(StoreError):
        store.enqueue([RolloutRequest(task=Task())])


def test_a_store_from_before_span_origins_is_upgraded_on_open(tmp_path: Path) -> None:

    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(
        """
        CREATE TABLE spans (
            seq INTEGER PRIMARY KEY AUTOINCREMENT, rollout_id TEXT NOT NULL, attempt INTEGER,
            trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_id TEXT, name TEXT NOT NULL,
            kind TEXT NOT NULL, start_time REAL NOT NULL, end_time REAL, status TEXT NOT NULL,
            status_message TEXT, attributes TEXT NOT NULL, events TEXT NOT NULL,
            UNIQUE (trace_id, span_id)
        );
        CREATE INDEX spans_rollout ON spans (rollout_id, seq);
        INSERT INTO spans (rollout_id, attempt, trace_id, span_id, name, kind, start_time, status,
                           attributes, events)
        VALUES ('ro-1', 1, 't', 's', 'llm.chat', 'client', 1.0, 'ok', '{}', '[]');
        """
    )
    old.commit()
    old.close()
    store = SQLiteStore(path)
    (span,) = store.query_spans(rollout_id="ro-1")
    assert (span.name, span.origin, span.seq) == ("llm.chat", "gateway", 1)
    store.add_spans([span.model_copy(update={"rollout_id": "ro-2", "seq": None, "origin": "agent"})])
    assert [s.origin for s in store.query_spans(rollout_id="ro-2")] == ["agent"]
    store.close()
    assert SQLiteStore(path).query_spans(rollout_id="ro-1")[0].origin == "gateway"
