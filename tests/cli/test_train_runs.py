"""`tether train` runs are named from their command line: the same command again resumes the run from
its checkpoint instead of starting a new one, and --fresh starts over, keeping the old run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from tether.cli.main import main
from tether.store import RolloutStatus, SQLiteStore

AGENTS = Path(__file__).parent / "agents"


def train_args(project: Path, steps: int, sleep: float = 0) -> list[str]:
    """A GRPO run on the tiny model; the agent makes one call, then thinks for `sleep` seconds."""
    tasks = project / "tasks.jsonl"
    lines = [json.dumps({"id": f"t{i}", "q": f"q{i}", "sleep": sleep}) + "\n" for i in range(4)]
    tasks.write_text("".join(lines))
    return [
        "train",
        "--agent",
        f"{sys.executable} {AGENTS / 'one_call_agent.py'}",
        "--tasks",
        str(tasks),
        "--reward",
        f"{AGENTS / 'reward.py'}:echoed",
        "--model",
        "tiny-random",
        "--group-size",
        "2",
        "--tasks-per-step",
        "1",
        "--steps",
        str(steps),
        "--val-every",
        "0",
        "--checkpoint-every",
        "1",
        "--project-dir",
        str(project),
    ]


def train_steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_bytes().splitlines()
    return [orjson.loads(line)["step"] for line in lines if orjson.loads(line)["kind"] == "train"]


def test_the_same_command_resumes_and_fresh_starts_over(tmp_path: Path) -> None:
    assert main(train_args(tmp_path, steps=1)) == 0
    (run_dir,) = (tmp_path / ".tether" / "runs").iterdir()
    assert train_steps(run_dir) == [1]

    assert main(train_args(tmp_path, steps=2)) == 0  # --steps is not part of the run's name
    assert [p.name for p in (tmp_path / ".tether" / "runs").iterdir()] == [run_dir.name]
    assert train_steps(run_dir) == [1, 2]
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    assert store.list_runs() == [run_dir.name]
    assert len(store.list_rollouts(run=run_dir.name, limit=100)) == 4  # 2 steps x 1 task x 2 samples

    assert main([*train_args(tmp_path, steps=1), "--fresh"]) == 0
    assert sorted(p.name for p in (tmp_path / ".tether" / "runs").iterdir()) == [
        run_dir.name,
        f"{run_dir.name}~1",
    ]
    assert train_steps(run_dir) == [1]
    assert store.list_runs() == [f"{run_dir.name}~1", run_dir.name]


def recorded_calls(store: SQLiteStore) -> dict[tuple[str, int], list[tuple[str, str]]]:
    """The (trace, span) ids of the gateway's spans (model calls), by rollout and attempt."""
    calls: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for rollout in store.list_rollouts(limit=1000):
        for span in store.query_spans(rollout_id=rollout.id, limit=1000):
            if span.origin == "gateway":
                calls.setdefault((rollout.id, span.attempt), []).append((span.trace_id, span.span_id))
    return calls


def kill_mid_step(command: list[str], store_path: Path) -> None:
    """Start `tether train` and kill -9 it once a rollout is running with its call recorded."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.2)
            if store_path.exists() and _a_running_rollout_has_a_call(store_path):
                break
        assert process.poll() is None, "the run ended before it could be killed mid-step"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)


def _a_running_rollout_has_a_call(store_path: Path) -> bool:
    store = SQLiteStore(store_path)
    try:
        running = store.list_rollouts(status=RolloutStatus.running, limit=100)
        return any(store.query_spans(rollout_id=r.id, attempt=r.attempt_count) for r in running)
    finally:
        store.close()


def test_a_train_run_killed_mid_step_and_run_again_loses_no_call(tmp_path: Path) -> None:
    """Both starts seed the trainer's `random` alike: the calls of one must not pass for the other's."""
    command = [sys.executable, "-m", "tether.cli.main", *train_args(tmp_path, steps=2, sleep=1.0)]
    store_path = tmp_path / ".tether" / "store.db"
    kill_mid_step(command, store_path)
    store = SQLiteStore(store_path)
    before = recorded_calls(store)

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    after = recorded_calls(store)
    assert all(set(calls) <= set(after.get(key, [])) for key, calls in before.items())
    finished = [
        (rollout.id, attempt.number)
        for rollout in store.list_rollouts(limit=1000)
        for attempt in store.list_attempts(rollout.id)
        if attempt.status == RolloutStatus.succeeded
    ]
    assert len(finished) >= 4  # at least the rerun's two steps of 2 rollouts
    assert all(len(after.get(key, [])) == 1 for key in finished)  # the one call of each attempt
    # and no call of the rerun took the ids of one of the killed run's
    ids = [pair for calls in after.values() for pair in calls]
    assert len({trace for trace, _ in ids}) == len({span for _, span in ids}) == len(ids)
    (run_dir,) = (tmp_path / ".tether" / "runs").iterdir()
    assert train_steps(run_dir)[-1] == 2


def test_a_step_that_meets_a_task_twice_runs_two_groups_of_it(tmp_path: Path) -> None:
    """3 tasks, 2 per step: the second step wraps around the list and may take a task the shuffled next
    epoch starts with; 5 per step always takes some twice. Each copy is its own group with its own keys
    (before, the second copy's rollouts collided with the first's in the store)."""
    args = train_args(tmp_path, steps=3)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "q": f"q{i}", "sleep": 0}) + "\n" for i in range(3)))
    per_step = args.index("--tasks-per-step") + 1
    args[per_step] = "5"
    assert main(args) == 0
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    rollouts = store.list_rollouts(limit=100)
    assert len(rollouts) == 3 * 5 * 2
    groups = {r.group_id for r in rollouts}
    assert len(groups) == 15 and any("~1@" in g for g in groups)


def test_time_budget_stops_updates_and_counts_resumed_starts(tmp_path: Path) -> None:
    """Each step's agent sleeps 1 s, so one step spends a 0.5 s budget: the run stops after it, short of
    --steps, and the same command again (a resume) finds the budget spent and trains no further step."""
    args = [*train_args(tmp_path, steps=5, sleep=1.0), "--time-budget", "0.5"]
    assert main(args) == 0
    (run_dir,) = (tmp_path / ".tether" / "runs").iterdir()
    assert train_steps(run_dir) == [1]
    records = [orjson.loads(line) for line in (run_dir / "metrics.jsonl").read_bytes().splitlines()]
    assert [r["step_seconds"] >= 1.0 for r in records if r["kind"] == "train"] == [True]

    assert main(args) == 0
    assert train_steps(run_dir) == [1]
    assert main([*train_args(tmp_path, steps=5, sleep=1.0), "--time-budget", "3600"]) == 0
    assert train_steps(run_dir) == [1, 2, 3, 4, 5]  # a larger budget lets --steps decide again


def test_time_budget_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--time-budget must be a positive"):
        main([*train_args(tmp_path, steps=1), "--time-budget", "0"])


def test_two_policies_from_the_command_line_train_and_name_their_run(tmp_path: Path) -> None:
    args = train_args(tmp_path, steps=1)
    args[args.index("--agent") + 1] = f"{sys.executable} {AGENTS / 'two_role_agent.py'}"
    args[args.index("--reward") + 1] = f"{AGENTS / 'reward.py'}:length"
    # Two samples of random text can end the same length (no signal, no update): sample until a group differs.
    args += ["--min-signal-groups", "1"]
    assert main([*args, "--policy", "writer=lora:r4", "--policy", "rewriter=lora:r8:lr=1e-3"]) == 0
    (run_dir,) = (tmp_path / ".tether" / "runs").iterdir()
    (record,) = [orjson.loads(line) for line in (run_dir / "metrics.jsonl").read_bytes().splitlines()]
    assert record["policy_version.writer"] == record["policy_version.rewriter"] == 1
    assert record["train.rewriter.lr"] == pytest.approx(1e-3)
    assert sorted(p.name for p in (run_dir / "policies").iterdir()) == ["rewriter", "writer"]

    with pytest.raises(SystemExit, match="only LoRA policies"):
        main([*args, "--policy", "writer=full"])
