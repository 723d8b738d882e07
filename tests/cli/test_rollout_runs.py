"""`tether rollout` runs are named and resumable: `kill -9` or SIGTERM mid-run, then the same command
again, ends with every task done exactly once in that run and nothing left running; a changed task file is
refused.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tether.cli.main import main
from tether.store import RolloutStatus, SQLiteStore

AGENTS = Path(__file__).parent / "agents"
TASKS = 40


@pytest.fixture
def upstream() -> Iterator[str]:
    with serve_app(create_fake_upstream(Behaviour())) as url:
        yield url + "/v1"


def write_tasks(path: Path, count: int, changed: int | None = None) -> None:
    lines = [
        json.dumps({"id": f"t{i}", "q": f"question {i}{'!' if i == changed else ''}"}) for i in range(count)
    ]
    path.write_text("\n".join(lines) + "\n")


def rollout_args(project: Path, tasks: Path, upstream: str) -> list[str]:
    return [
        "rollout",
        "--agent",
        f"{sys.executable} {AGENTS / 'one_call_agent.py'}",
        "--tasks",
        str(tasks),
        "--reward",
        f"{AGENTS / 'reward.py'}:echoed",
        "--n-workers",
        "4",
        "--upstream",
        upstream,
        "--upstream-token-ids",
        "--project-dir",
        str(project),
    ]


def statuses(project: Path) -> dict[str, int]:
    store = SQLiteStore(project / ".tether" / "store.db")
    try:
        counts: dict[str, int] = {}
        for rollout in store.list_rollouts(limit=10_000):
            counts[rollout.status.value] = counts.get(rollout.status.value, 0) + 1
        return counts
    finally:
        store.close()


def start_and_wait_for_running(
    command: list[str], project: Path, env: dict[str, str] | None
) -> subprocess.Popen[bytes]:
    """The rollout command, once some rollouts succeeded and others are running."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if (project / ".tether" / "store.db").exists():
            counts = statuses(project)
            if counts.get("succeeded", 0) >= 8 and counts.get("running", 0) > 0:
                return process
    process.kill()
    raise AssertionError(f"no rollout was running after 120 s: {statuses(project)}")


def test_a_killed_run_resumes_to_exactly_one_success_per_task(
    tmp_path: Path, upstream: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, TASKS)
    args = rollout_args(tmp_path, tasks, upstream)
    first = start_and_wait_for_running([sys.executable, "-m", "tether.cli.main", *args], tmp_path, None)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    before = statuses(tmp_path)
    assert before.get("running", 0) > 0 and before.get("succeeded", 0) < TASKS

    assert main(args) == 0

    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    (run,) = store.list_runs()
    rollouts = store.list_rollouts(run=run, limit=10_000)
    assert len(rollouts) == TASKS
    assert {r.status for r in rollouts} == {RolloutStatus.succeeded}
    assert sorted(r.task_id for r in rollouts) == sorted(f"t{i}" for i in range(TASKS))
    assert store.list_rollouts(status=RolloutStatus.running, limit=10) == []
    lost = [r for r in rollouts if r.worker_losses]
    assert lost and all(r.attempt_count == 2 for r in lost)  # requeued without using up the attempt
    capsys.readouterr()

    listing = ["store", "--project-dir", str(tmp_path), "rollouts", "--run", run, "--json", "--limit", "0"]
    assert main(listing) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == TASKS and {row["reward"] for row in rows} == {1.0}
    assert set(rows[0]) >= {"id", "run", "task_id", "sample", "status", "attempts", "reward"}


def test_sigterm_stops_a_run_cleanly_and_the_same_command_runs_what_it_interrupted(
    tmp_path: Path, upstream: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    tasks = tmp_path / "tasks.jsonl"  # each agent thinks 1 s after its call: the run outlasts the signal
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "q": f"question {i}", "sleep": 1}) + "\n" for i in range(TASKS))
    )
    args = rollout_args(tmp_path, tasks, upstream)
    # where the sandbox and the warm agents keep their folders: a short path, which their sockets fit below
    scratch = Path(tempfile.mkdtemp(prefix="tether-test-"))
    request.addfinalizer(lambda: shutil.rmtree(scratch, ignore_errors=True))
    env = {**os.environ, "TMPDIR": str(scratch)}
    first = start_and_wait_for_running([sys.executable, "-m", "tether.cli.main", *args], tmp_path, env)
    assert any(scratch.iterdir())
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 128 + signal.SIGTERM  # its own exit, after its clean-up, not the signal's
    assert sorted(path.name for path in scratch.iterdir()) == []
    interrupted = statuses(tmp_path)
    assert "running" not in interrupted and "cancelled" not in interrupted
    assert interrupted.get("succeeded", 0) < TASKS

    monkeypatch.setenv("TMPDIR", str(scratch))
    assert main(args) == 0
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    (run,) = store.list_runs()
    rollouts = store.list_rollouts(run=run, limit=10_000)
    assert sorted(r.task_id for r in rollouts) == sorted(f"t{i}" for i in range(TASKS))
    assert {r.status for r in rollouts} == {RolloutStatus.succeeded}
    requeued = [r for r in rollouts if r.worker_losses]
    assert requeued and all(r.attempt_count == 2 for r in requeued)  # the interrupted attempt is not counted


def test_agents_run_below_a_temporary_directory_too_long_for_their_sockets(
    tmp_path: Path, upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = tmp_path / ("deep-" * 12)  # the warm agents' and the relay's sockets would pass 107 bytes below it
    long.mkdir()
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, 3)
    assert main(rollout_args(tmp_path, tasks, upstream)) == 0
    assert statuses(tmp_path) == {"succeeded": 3}


def test_a_finished_run_run_again_runs_nothing_and_a_changed_task_file_is_refused(
    tmp_path: Path, upstream: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, 3)
    args = rollout_args(tmp_path, tasks, upstream)
    assert main(args) == 0
    assert main(args) == 0
    assert statuses(tmp_path) == {"succeeded": 3}

    write_tasks(tasks, 3, changed=1)
    with pytest.raises(SystemExit, match=r"task 2 \('t1'\) has changed.*--fresh"):
        main(args)
    assert statuses(tmp_path) == {"succeeded": 3}

    assert main([*args, "--fresh"]) == 0
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    runs = store.list_runs()
    assert len(runs) == 2 and runs[0].endswith("~1")
    assert len(store.list_rollouts(run=runs[1], limit=100)) == 3


def test_a_bad_store_url_is_a_one_line_error_before_anything_runs(
    tmp_path: Path, upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, 1)
    with pytest.raises(SystemExit, match="unknown store URL scheme 'redis'"):
        main([*rollout_args(tmp_path, tasks, upstream), "--store", "redis://localhost"])
    with pytest.raises(SystemExit, match="needs the admin token"):
        main([*rollout_args(tmp_path, tasks, upstream), "--store", "http://127.0.0.1:9"])
    assert not (tmp_path / ".tether" / "store.db").exists()
    monkeypatch.setenv("TETHER_TOKEN", "tadm-anything")
    with pytest.raises(SystemExit, match="cannot open the store.*cannot reach"):
        main([*rollout_args(tmp_path, tasks, upstream), "--store", "http://127.0.0.1:9"])
