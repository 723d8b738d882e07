"""Difficulty filtering as Agent Lightning's coding recipe does it (tasks the policy already solves k of
k are not trained on), through the CLI: a probe run of `tether rollout --group-size K` with the policy,
then `tether train --curriculum-from PROBE --retire-after K`; `--park-after K` also leaves out the tasks
it never solves, so only the mixed ones are trained on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tether.cli.main import main
from tether.store import SQLiteStore

AGENTS = Path(__file__).parent / "agents"
K = 2
SOLVED, MIXED, UNSOLVED = ["solved-0", "solved-1"], ["mixed-0", "mixed-1"], ["unsolved-0", "unsolved-1"]


def write_inputs(project: Path) -> tuple[Path, Path]:
    """Tasks whose reward the evaluator decides by kind, whatever the (tiny, random) model says: solved
    always, unsolved never, mixed the first time the evaluator scores it (the probe's group: 1, 0)."""
    project.mkdir()
    tasks = project / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": t, "q": t}) + "\n" for t in SOLVED + MIXED + UNSOLVED))
    reward = project / "by_kind.py"
    reward.write_text(
        "_scored = set()  # the mixed tasks this evaluator has scored once\n\n"
        "def by_kind(task, output):\n"
        "    if task['q'].startswith('mixed'):\n"
        "        first = task['q'] not in _scored\n"
        "        _scored.add(task['q'])\n"
        "        return float(first)\n"
        "    return float(task['q'].startswith('solved'))\n"
    )
    return tasks, reward


def common(project: Path, tasks: Path, reward: Path) -> list[str]:
    return [
        "--agent", f"{sys.executable} {AGENTS / 'one_call_agent.py'}",
        "--tasks", str(tasks),
        "--reward", f"{reward}:by_kind",
        "--model", "tiny-random",
        "--group-size", str(K),
        "--project-dir", str(project),
        "--n-workers", "2",
    ]  # fmt: skip


def trained_tasks(project: Path, run: str) -> set[str]:
    store = SQLiteStore(project / ".tether" / "store.db")
    try:
        return {r.task_id for r in store.list_rollouts(run=run, limit=1000) if r.mode == "train"}
    finally:
        store.close()


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A project with the probe run made: K rollouts of every task with the policy."""
    project = tmp_path_factory.mktemp("filter") / "project"
    tasks, reward = write_inputs(project)
    options = common(project, tasks, reward)
    assert main(["rollout", *options, "--run", "probe"]) == 0
    return project, options


def train_after_probe(probed: tuple[Path, list[str]], run: str, steps: int, *curriculum: str) -> set[str]:
    """The tasks a training run took, one per step; untaken tasks come before any repeat."""
    project, options = probed
    args = ["train", *options, "--steps", str(steps), "--tasks-per-step", "1", "--val-every", "0"]
    args += ["--checkpoint-every", "0", "--run", run, "--curriculum-from", "probe", *curriculum]
    assert main(args) == 0
    return trained_tasks(project, run)


def pool_sizes(project: Path, run: str) -> list[dict[str, int]]:
    """The curriculum's pool sizes each train record of the run's metrics.jsonl carries (the dashboard
    charts them), in step order."""
    lines = (project / ".tether" / "runs" / run / "metrics.jsonl").read_text().splitlines()
    steps = [record for record in map(json.loads, lines) if record["kind"] == "train"]
    assert [record["step"] for record in steps] == list(range(1, len(steps) + 1))
    pools = []
    for record in steps:
        sizes = {
            key.removeprefix("curriculum."): v for key, v in record.items() if key.startswith("curriculum.")
        }
        assert set(sizes) == {"active", "retired", "parked", "mixed"}
        assert sizes["active"] + sizes["retired"] + sizes["parked"] == len(SOLVED + MIXED + UNSOLVED)
        assert 0 <= sizes["mixed"] <= sizes["active"]  # mixed tasks are counted among the active ones
        pools.append(sizes)
    return pools


def test_tasks_solved_k_of_k_in_the_probe_are_not_trained_on(probed: tuple[Path, list[str]]) -> None:
    # 5 steps over 6 tasks would take 5 different ones, a solved one among them, without the filter
    trained = train_after_probe(probed, "retired", 5, "--retire-after", str(K))
    assert trained == set(MIXED + UNSOLVED)
    pools = pool_sizes(probed[0], "retired")
    assert len(pools) == 5
    # From the probe: the solved tasks retired, the mixed ones (1, 0) mixed, nothing parked without
    # --park-after; no task is solved twice in a row in training, so none retires later.
    assert pools[0] == {"active": 4, "retired": 2, "parked": 0, "mixed": 2}
    assert all(sizes["retired"] == 2 and sizes["parked"] == 0 for sizes in pools)


def test_with_park_after_only_the_mixed_tasks_are_trained_on(probed: tuple[Path, list[str]]) -> None:
    trained = train_after_probe(probed, "mixed", 3, "--retire-after", str(K), "--park-after", str(K))
    assert trained == set(MIXED)
    pools = pool_sizes(probed[0], "mixed")
    assert len(pools) == 3
    assert pools[0] == {"active": 2, "retired": 2, "parked": 2, "mixed": 2}  # the never-solved parked


def test_probe_samples_every_task_before_rl_and_only_the_mixed_ones_are_trained_on(tmp_path: Path) -> None:
    # The same filter inside one run: --probe samples a group of every task from the policy as it is
    # (here before the first step; after the SFT updates in a pipeline), trains on none of it, and the
    # pools start from it.
    project = tmp_path / "project"
    options = common(project, *write_inputs(project))
    # Two steps, one task each: without the probe, two of the six tasks in the seeded shuffle; after it,
    # the two mixed ones (this evaluator scores a mixed task 1 only the first time, so later they fail).
    args = ["train", *options, "--steps", "2", "--tasks-per-step", "1", "--val-every", "0"]
    args += ["--checkpoint-every", "0", "--run", "probed", "--probe", "--retire-after", str(K)]
    assert main([*args, "--park-after", str(K)]) == 0
    store = SQLiteStore(project / ".tether" / "store.db")
    try:
        rollouts = [r for r in store.list_rollouts(run="probed", limit=1000) if r.mode == "train"]
    finally:
        store.close()
    probe = [r for r in rollouts if r.group_id and r.group_id.endswith("@probe0")]
    assert sorted(r.task_id for r in probe) == sorted((SOLVED + MIXED + UNSOLVED) * K)
    assert {r.task_id for r in rollouts if r not in probe} == set(MIXED)
    lines = (project / ".tether" / "runs" / "probed" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["kind"] for r in records if r["kind"] != "val"] == ["probe", "train", "train"]
    probed = next(r for r in records if r["kind"] == "probe")
    assert [probed[f"probe_{pool}"] for pool in ("solved", "mixed", "unsolved")] == [2, 2, 2]
    assert pool_sizes(project, "probed")[0] == {"active": 2, "retired": 2, "parked": 2, "mixed": 2}


def test_probe_without_a_curriculum_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "project"
    options = common(project, *write_inputs(project))
    with pytest.raises(SystemExit, match="--probe tells the curriculum"):
        main(["train", *options, "--steps", "1", "--probe"])
