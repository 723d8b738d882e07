"""The curriculum against a real SQLite store file: rollouts enqueued, claimed, rewarded and finished
through the Store API, as the runner does, with the trainer's group ids, keys and step metadata."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import serve_app
from tether.contracts import Meta
from tether.curriculum.cursor import TaskCursor
from tether.curriculum.pools import (
    Curriculum,
    CurriculumConfig,
    CurriculumError,
    CurriculumExhausted,
)
from tether.store import Reward, RolloutRequest, RolloutStatus, SQLiteStore, Store, StoreClient, Task
from tether.store.auth import TokenAuthority
from tether.store.server import create_store_app

RUN = "train-run"
TASKS = [Task(id=f"t{i}", input={"question": f"q{i}"}) for i in range(6)]
Verdict = Callable[[str, int, int], float]  # (task id, step, sample) -> reward


class CountingStore:
    """A real store that counts the rollout queries made through it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.queries = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def query_rollouts(self, query: Any) -> Any:
        self.queries += 1
        return self.store.query_rollouts(query)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "store.db")
    yield store
    store.close()


def record_group(
    store: Store, run: str, step: int, task: Task, rewards: Sequence[float], start: int = 1
) -> None:
    """The trainer's group of `task` at `step`: enqueued, claimed, rewarded by an evaluator, finished."""
    requests = [
        RolloutRequest(
            task=task,
            run=run,
            group_id=f"{task.id}@step{step}",
            key=f"{start}.step{step}/{task.id}#{sample}",
            sample=sample,
            metadata={Meta.STEP: step},
        )
        for sample in range(len(rewards))
    ]
    reward_of = {r.id: value for r, value in zip(store.enqueue(requests), rewards, strict=True)}
    while (claim := store.claim("node/1/worker-0", run)) is not None:
        rollout, attempt = claim.rollout.id, claim.attempt.number
        store.add_rewards(
            [Reward(rollout_id=rollout, value=reward_of[rollout], source="evaluator", attempt=attempt)]
        )
        store.update_status(rollout, RolloutStatus.succeeded, output="done", attempt=attempt)


def train(
    curriculum: Curriculum,
    store: Store,
    steps: range,
    verdict: Verdict,
    *,
    run: str = RUN,
    per_step: int = 2,
    group: int = 4,
    start: int = 1,
) -> list[list[str]]:
    """What the trainer's sync loop does with the curriculum: take, run the groups, next step."""
    taken = []
    for step in steps:
        tasks = curriculum.take(per_step, step=step)
        taken.append([task.id for task in tasks])
        for task in tasks:
            record_group(store, run, step, task, [verdict(task.id, step, s) for s in range(group)], start)
    return taken


def solves(*easy: str) -> Verdict:
    """Tasks in `easy` always solved, the others always failed."""
    return lambda task_id, step, sample: float(task_id in easy)


def half(task_id: str, step: int, sample: int) -> float:
    return float(sample % 2 == 0)


def test_without_options_it_is_the_task_cursor_and_reads_nothing(store: SQLiteStore) -> None:
    counting = CountingStore(store)
    curriculum = Curriculum(TASKS, seed=7, store=counting, run=None)  # type: ignore[arg-type]
    cursor = TaskCursor(TASKS, seed=7)
    for count in (2, 3, 4, 1, 5, 7, 2):
        assert curriculum.take(count, step=count) == cursor.take(count)
        assert curriculum.position == cursor.position
    assert curriculum.pools() == {}
    assert counting.queries == 0
    assert not CurriculumConfig(success=0.5).enabled


def test_a_task_solved_k_of_k_is_retired(store: SQLiteStore) -> None:
    counting = CountingStore(store)
    curriculum = Curriculum(TASKS, 0, counting, RUN, CurriculumConfig(retire_after=4))  # type: ignore[arg-type]
    taken = train(curriculum, store, range(9), solves("t0", "t1"), per_step=2, group=4)
    first = [i for i, step in enumerate(taken) if "t0" in step][0]
    assert all("t0" not in step for step in taken[first + 1 :])  # 4 of 4 solved: retired
    assert sum("t1" in step for step in taken) == 1
    assert {task for step in taken[3:] for task in step} <= {"t2", "t3", "t4", "t5"}
    assert curriculum.pools() == {"active": 4, "retired": 2, "parked": 0, "mixed": 0}
    assert counting.queries == 9  # one read per take


def test_retirement_needs_k_solves_in_a_row_at_the_success_reward(store: SQLiteStore) -> None:
    config = CurriculumConfig(retire_after=3, success=0.5)
    curriculum = Curriculum(TASKS[:2], 0, store, RUN, config)
    record_group(store, RUN, 0, TASKS[0], [0.5, 0.7, 0.4])  # the last one failed
    record_group(store, RUN, 0, TASKS[1], [0.0, 0.9, 0.6])
    record_group(store, RUN, 1, TASKS[1], [0.5])
    assert curriculum.take(2, step=2) == [TASKS[0], TASKS[0]]  # t1 solved its last 3
    assert curriculum.pools()["retired"] == 1


def test_parked_tasks_come_back_every_n_steps_and_return_when_solved(store: SQLiteStore) -> None:
    config = CurriculumConfig(park_after=4, revisit_every=3)
    curriculum = Curriculum(TASKS[:4], 1, store, RUN, config)
    tries: list[int] = []  # the steps that took t3: it fails its first three groups, then solves half

    def verdict(task_id: str, step: int, sample: int) -> float:
        if task_id != "t3":
            return half(task_id, step, sample)
        if not tries or tries[-1] != step:
            tries.append(step)
        return half(task_id, step, sample) if len(tries) > 3 else 0.0

    train(curriculum, store, range(16), verdict, per_step=1, group=4)
    first = tries[0]
    # Parked after its first group; one try 3 steps after the last, until it is solved at the 4th.
    assert tries[:4] == [first, first + 3, first + 6, first + 9]
    assert curriculum.pools()["parked"] == 0  # solved on its revisit: active again
    assert len(tries) > 4 and tries[4] - tries[3] <= 4  # back in the rotation of 4 tasks


def test_mixed_tasks_are_taken_first(store: SQLiteStore) -> None:
    config = CurriculumConfig(mixed_first=True, retire_after=4)
    verdicts = {"t0": [1, 1, 1, 1], "t1": [0, 1, 0, 0], "t2": [0, 0, 0, 0], "t3": [1, 0, 1, 1]}
    for step, (task_id, rewards) in enumerate(verdicts.items()):
        record_group(store, RUN, step, TASKS[int(task_id[1])], [float(r) for r in rewards])
    taken = [task.id for task in Curriculum(TASKS, 3, store, RUN, config).take(4, step=4)]
    assert taken == ["t4", "t5", "t1", "t3"]  # no result yet (may be mixed), then mixed; t0 retired

    record_group(store, RUN, 4, TASKS[4], [0.0] * 4)
    record_group(store, RUN, 5, TASKS[5], [0.0] * 4)
    curriculum = Curriculum(TASKS, 3, store, RUN, config)
    assert [task.id for task in curriculum.take(4, step=6)] == ["t1", "t3", "t2", "t4"]
    assert curriculum.pools() == {"active": 5, "retired": 1, "parked": 0, "mixed": 2}
    plain = Curriculum(TASKS, 3, store, RUN, CurriculumConfig(retire_after=4))
    assert [task.id for task in plain.take(4, step=6)] == ["t1", "t2", "t3", "t4"]  # least recent first


def test_an_earlier_run_counts_when_named(store: SQLiteStore) -> None:
    record_group(store, "earlier", 0, TASKS[0], [1.0, 1.0])
    record_group(store, "earlier", 1, TASKS[1], [0.0, 0.0])
    record_group(store, "earlier", 2, TASKS[2], [1.0, 0.0])
    with_history = CurriculumConfig(retire_after=2, park_after=2, history_runs=("earlier",))
    curriculum = Curriculum(TASKS, 0, store, RUN, with_history)
    assert curriculum.pools() == {"active": 4, "retired": 1, "parked": 1, "mixed": 1}
    taken = train(curriculum, store, range(4), solves(), per_step=2, group=1)
    assert not {"t0", "t1"} & {task for step in taken for task in step}
    alone = Curriculum(TASKS, 0, store, "other-run", CurriculumConfig(retire_after=2, park_after=2))
    assert alone.pools() == {"active": 6, "retired": 0, "parked": 0, "mixed": 0}


def test_options_that_leave_nothing_fail_at_start(store: SQLiteStore) -> None:
    for task in TASKS[:3]:
        record_group(store, "solved-all", 0, task, [1.0, 1.0, 1.0])
    config = CurriculumConfig(retire_after=3, history_runs=("solved-all",))
    with pytest.raises(CurriculumError, match=r"of 3 tasks, 3 are retired and 0 parked.*--retire-after 3"):
        Curriculum(TASKS[:3], 0, store, RUN, config)
    record_group(store, "failed-some", 0, TASKS[0], [0.0, 0.0])
    record_group(store, "failed-some", 0, TASKS[1], [1.0, 1.0, 1.0])
    parking = CurriculumConfig(retire_after=3, park_after=2, history_runs=("failed-some",))
    with pytest.raises(CurriculumError, match=r"1 are retired and 1 parked.*never revisited.*--park-after 2"):
        Curriculum(TASKS[:2], 0, store, RUN, parking)
    revisiting = CurriculumConfig(
        retire_after=3, park_after=2, revisit_every=2, history_runs=("failed-some",)
    )
    Curriculum(TASKS[:2], 0, store, RUN, revisiting)  # parked tasks will be tried again: no error
    with pytest.raises(CurriculumError, match=r"--curriculum-from nope: no training rollouts"):
        Curriculum(TASKS, 0, store, RUN, CurriculumConfig(mixed_first=True, history_runs=("nope",)))
    with pytest.raises(CurriculumError, match="needs a named run"):
        Curriculum(TASKS, 0, store, None, CurriculumConfig(mixed_first=True))


def test_bad_option_combinations_are_refused() -> None:
    with pytest.raises(CurriculumError, match="--retire-after must be at least 1"):
        CurriculumConfig(retire_after=0)
    with pytest.raises(CurriculumError, match="needs --park-after"):
        CurriculumConfig(revisit_every=3)
    with pytest.raises(CurriculumError, match="--curriculum-from"):
        CurriculumConfig(history_runs=("a",))


def test_dry_pools_try_parked_tasks_with_one_line_then_exhaustion_raises(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = TASKS[:2]
    curriculum = Curriculum(tasks, 0, store, RUN, CurriculumConfig(park_after=2))
    with caplog.at_level(logging.WARNING, logger="tether.curriculum.pools"):
        taken = train(curriculum, store, range(4), solves(), per_step=2, group=2)
    assert taken[0] == ["t0", "t1"] or sorted(taken[0]) == ["t0", "t1"]
    assert all(sorted(step) == ["t0", "t1"] for step in taken[1:])  # both parked: tried anyway
    lines = [r.getMessage() for r in caplog.records if "no active task" in r.getMessage()]
    assert lines == [
        "curriculum: no active task (0 retired, 2 parked, none due for a revisit): trying parked tasks"
    ]

    retiring = Curriculum(tasks, 0, store, "easy", CurriculumConfig(retire_after=2))
    train(retiring, store, range(1), solves("t0", "t1"), run="easy", per_step=2, group=2)
    with pytest.raises(CurriculumExhausted, match="every one of the 2 tasks is retired"):
        retiring.take(2, step=1)


def test_a_new_curriculum_with_the_saved_position_resumes_the_same_sequence(store: SQLiteStore) -> None:
    config = CurriculumConfig(retire_after=4, park_after=4, revisit_every=2, mixed_first=True)

    def verdict(task_id: str, step: int, sample: int) -> float:
        return {"t0": 1.0, "t1": 0.0, "t2": float(sample < 2)}.get(task_id, float(step > 4 and sample == 0))

    first = Curriculum(TASKS, 5, store, RUN, config)
    before = train(first, store, range(5), verdict, per_step=2, group=4)
    saved = first.position  # the checkpoint at step 5
    lost_future = train(first, store, range(5, 9), verdict, per_step=2, group=4)  # then the run died
    assert first.pools()["retired"] >= 1 and before

    resumed = Curriculum(TASKS, 5, store, RUN, config, position=saved)
    redone = train(resumed, store, range(5, 9), verdict, per_step=2, group=4, start=2)
    assert redone == lost_future
    assert resumed.position == first.position


def test_the_curriculum_reads_a_store_over_http(store: SQLiteStore) -> None:
    auth = TokenAuthority.generate()
    with serve_app(create_store_app(store, auth)) as url:
        client = StoreClient(url, auth.admin_token, timeout=10.0)
        curriculum = Curriculum(TASKS[:3], 0, client, RUN, CurriculumConfig(retire_after=2))
        taken = train(curriculum, client, range(4), solves("t0"), per_step=1, group=2)
        assert sum("t0" in step for step in taken) == 1
        assert curriculum.pools()["retired"] == 1
        client.close()
