"""`tether rollout` runs are named and resumable: `kill -9` mid-run, then the same command again, ends
with every task done exactly once in that run and nothing left running; a changed task file is refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
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


def test_a_killed_run_resumes_to_exactly_one_success_per_task(
    tmp_path: Path, upstream: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, TASKS)
    args = rollout_args(tmp_path, tasks, upstream)
    command = [sys.executable, "-m", "tether.cli.main", *args]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if (tmp_path / ".tether" / "store.db").exists():
            counts = statuses(tmp_path)
            if counts.get("succeeded", 0) >= 8 and counts.get("running", 0) > 0:
                break
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
