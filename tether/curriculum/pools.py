"""A curriculum from the store: which tasks a training step runs, chosen from each task's recent results.

Without options the curriculum is `TaskCursor`: every task in a seeded shuffle, epoch after epoch. With
them, each task falls in one pool, from its latest rollouts (oldest first: the named earlier runs'
rollouts, then this run's; the reward of each is the reward rule's, `tether.store.reward_rule`, and a
finished rollout without one counts 0.0, as in training):

- retired (`--retire-after K`): its last K rollouts all got at least `--success-reward`. Never taken.
- parked (`--park-after M`): its last M rollouts all got less. Taken again once `--revisit-every N`
  steps have passed since its last try in this run (or since step 0), for one try; a solve there makes
  it active again.
- mixed: active, with both solves and failures among its last max(K, M) rollouts (8 when neither is
  set). A group's rollouts are in no order among themselves: K and M are best multiples of the group
  size. `--mixed-first` takes these first: their groups are the ones with reward variance to learn from.
- active: everything else.

Each take ranks the candidates: parked tasks due for their try, then (with `--mixed-first`) mixed ones
and those without any result yet (they may be mixed), then the other active tasks; within each, the one
least recently taken in this run first (never taken first), ties in this epoch's seeded shuffle order.
So the active tasks rotate, as in the plain shuffle.

Only `position` needs checkpointing: the pools are derived from the store, and a take at step S counts
only this run's rollouts enqueued before S (`Meta.STEP`), each group member once (a step redone after a
resume replaces the dead run's rollouts of the same group and sample). A resumed run therefore takes
the tasks the interrupted one took at that step.

Bad input: options that leave no task to train on at the start (every task retired or parked by the
history runs, with no revisits) raise `CurriculumError`. When the pools run dry during the run: parked
tasks are tried anyway, with one logged line per dry spell; when every task is retired, `take` raises
`CurriculumExhausted` (a `CurriculumError`): the trainer should stop, everything is solved.

The store is read once per take: `Store.query_rollouts` of this run's training rollouts from where the
last read stopped being final (SQLite: one statement; HTTP: one request); earlier runs once, at start.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tether.contracts import Meta
from tether.curriculum.cursor import TaskCursor, shuffled_order
from tether.store import RolloutStatus, Store, Task
from tether.store.records import RolloutQuery, RolloutRow

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 8  # rollouts that make a task's recent results when neither K nor M says
PAGE = 10_000  # rollouts per query (RolloutQuery's largest page)
POOLS = ("active", "retired", "parked", "mixed")
COUNTED = frozenset({RolloutStatus.succeeded, RolloutStatus.failed, RolloutStatus.timed_out})


class CurriculumError(ValueError):
    """Curriculum options that leave nothing to train on, or that cannot be used together."""


class CurriculumExhausted(CurriculumError):
    """Every task is retired: the curriculum has nothing left to train on."""


# -- options ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CurriculumConfig:
    retire_after: int | None = None  # retire a task that solved its last K rollouts (K of K)
    park_after: int | None = None  # park a task that failed its last M rollouts
    revisit_every: int = 0  # parked tasks get one try every N steps (0: never)
    mixed_first: bool = False  # take tasks with mixed recent results first
    success: float = 1.0  # the reward that counts as solved (at least this)
    history_runs: tuple[str, ...] = ()  # earlier runs whose training rollouts also count
    # Before RL's first step, one group of every task, not trained on, that the pools count
    # (`tether.curriculum.probe`).
    probe: bool = False

    def __post_init__(self) -> None:
        for flag, value in (("--retire-after", self.retire_after), ("--park-after", self.park_after)):
            if value is not None and value < 1:
                raise CurriculumError(f"{flag} must be at least 1 (got {value})")
        if self.revisit_every < 0:
            raise CurriculumError(f"--revisit-every must be >= 0 (got {self.revisit_every})")
        if self.revisit_every and self.park_after is None:
            raise CurriculumError("--revisit-every brings parked tasks back: it needs --park-after")
        if self.probe and not self.enabled:
            raise CurriculumError(
                "--probe tells the curriculum what the policy solves before RL: it needs --mixed-first, "
                "--retire-after or --park-after"
            )
        if self.history_runs and not self.enabled:
            raise CurriculumError(
                "--curriculum-from counts earlier runs' results: it needs --retire-after, --park-after "
                "or --mixed-first"
            )

    @property
    def enabled(self) -> bool:
        """False: no option is set, and the curriculum is the plain seeded shuffle."""
        return self.retire_after is not None or self.park_after is not None or self.mixed_first

    @property
    def window(self) -> int:
        """How many of a task's latest rollouts are its recent results."""
        return max(self.retire_after or 0, self.park_after or 0) or DEFAULT_WINDOW

    def flags(self) -> str:
        """The options as given on the command line, for messages."""
        parts = [
            f"{flag} {value}"
            for flag, value in (("--retire-after", self.retire_after), ("--park-after", self.park_after))
            if value is not None
        ]
        parts += [f"--revisit-every {self.revisit_every}"] if self.park_after is not None else []
        parts += ["--mixed-first"] if self.mixed_first else []
        parts += [f"--success-reward {self.success:g}"]
        parts += [f"--curriculum-from {run}" for run in self.history_runs]
        parts += ["--probe"] if self.probe else []
        return " ".join(parts)


# -- the store's record -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Row:
    """What the curriculum keeps of one training rollout."""

    id: str
    task_id: str
    slot: tuple[str, ...]  # the group member it is: a redone step's rollout replaces the earlier one
    step: int | None
    status: RolloutStatus
    reward: float | None

    @classmethod
    def of(cls, row: RolloutRow) -> _Row:
        rollout = row.rollout
        step = rollout.metadata.get(Meta.STEP)
        slot = (rollout.group_id, str(rollout.sample)) if rollout.group_id else (rollout.id,)
        return cls(
            rollout.id,
            rollout.task_id,
            slot,
            step if isinstance(step, int) else None,
            rollout.status,
            row.reward,
        )

    @property
    def outcome(self) -> float | None:
        """The reward it counts with; None: it does not count (not finished, or cancelled)."""
        if self.status not in COUNTED:
            return None
        return 0.0 if self.reward is None else self.reward


class _RunReader:
    """A run's training rollouts, oldest first. The leading finished ones are kept; each read asks the
    store only for what follows them (one query), starting one row early to check they are unchanged."""

    def __init__(self, store: Store, run: str) -> None:
        self.store = store
        self.run = run
        self.final: list[_Row] = []

    def read(self) -> list[_Row]:
        start = max(len(self.final) - 1, 0)
        rows = self._fetch(start)
        if self.final:
            if not rows or rows[0].id != self.final[-1].id:  # the run changed under us: read it again
                self.final = []
                return self.read()
            rows = rows[1:]
        # A finished rollout's status and reward no longer change.
        settled = next((i for i, row in enumerate(rows) if not row.status.finished), len(rows))
        self.final.extend(rows[:settled])
        return self.final + rows[settled:]

    def _fetch(self, offset: int) -> list[_Row]:
        rows: list[_Row] = []
        while True:
            query = RolloutQuery(
                run=self.run, mode="train", oldest_first=True, limit=PAGE, offset=offset, count_cap=0
            )
            page = self.store.query_rollouts(query).rows
            rows.extend(_Row.of(row) for row in page)
            if len(page) < PAGE:
                return rows
            offset += len(page)


def _latest_per_slot(rows: Iterable[_Row]) -> list[_Row]:
    """Each group member once, its latest rollout, in store order."""
    ordered = list(rows)
    latest = {row.slot: row.id for row in ordered}
    return [row for row in ordered if latest[row.slot] == row.id]


# -- task states --------------------------------------------------------------------------------------


@dataclass
class _TaskState:
    outcomes: list[float] = field(default_factory=list)  # rewards, oldest first
    last_taken: int | None = None  # the latest step of this run that took it

    def took(self, step: int) -> None:
        self.last_taken = step if self.last_taken is None else max(self.last_taken, step)


def _pool_of(state: _TaskState, config: CurriculumConfig) -> str:
    solved = [reward >= config.success for reward in state.outcomes]
    k, m = config.retire_after, config.park_after
    if k is not None and len(solved) >= k and all(solved[-k:]):
        return "retired"
    if m is not None and len(solved) >= m and not any(solved[-m:]):
        return "parked"
    recent = solved[-config.window :]
    return "mixed" if any(recent) and not all(recent) else "active"


def _states(history: Sequence[_Row], rows: Sequence[_Row], before: int | None) -> dict[str, _TaskState]:
    """Each task's outcomes (history, then this run's rollouts enqueued before step `before`) and the
    step that last took it."""
    states: dict[str, _TaskState] = {}
    mine = _latest_per_slot(row for row in rows if before is None or row.step is None or row.step < before)
    for row in [*history, *mine]:
        state = states.setdefault(row.task_id, _TaskState())
        if row.outcome is not None:
            state.outcomes.append(row.outcome)
    for row in mine:
        states[row.task_id].took(row.step if row.step is not None else -1)
    return states


# -- the curriculum -----------------------------------------------------------------------------------


class Curriculum:
    """`TaskCursor`'s interface (`tasks`, `position`, `take`) over the store's record of `run`.

    `take(count, step=S)` returns the tasks of step S; `pools()` the pool sizes of the last take. With
    `config.enabled` false it is exactly `TaskCursor(tasks, seed, position)` and never reads the store.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        seed: int,
        store: Store,
        run: str | None,
        config: CurriculumConfig | None = None,
        position: int = 0,
    ) -> None:
        if not tasks:
            raise CurriculumError("no training tasks")
        self.tasks = list(tasks)
        self.seed = seed
        self.position = position
        self.step: int | None = None  # the step being taken for; None: count every rollout of the run
        self.config = config or CurriculumConfig()
        self._handed: dict[str, int] = {}  # task id -> the latest step this object took it for
        self._pools: dict[str, int] = {}
        self._dry = False
        self._history: list[_Row] = []
        self._reader: _RunReader | None = None
        if self.config.enabled:
            self._open(store, run)

    def _open(self, store: Store, run: str | None) -> None:
        if run is None:
            raise CurriculumError(
                f"the curriculum ({self.config.flags()}) reads the run's own rollouts: it needs a named run"
            )
        if run in self.config.history_runs:
            raise CurriculumError(f"--curriculum-from {run}: that is this run; name an earlier one")
        for name in self.config.history_runs:
            rows = _latest_per_slot(_RunReader(store, name).read())
            if not rows:
                known = ", ".join(store.list_runs()) or "none"
                raise CurriculumError(f"--curriculum-from {name}: no training rollouts (runs: {known})")
            self._history.extend(rows)
        self._reader = _RunReader(store, run)
        self._check_start()

    def _check_start(self) -> None:
        """Raise if the earlier runs alone leave no task to train on."""
        pools = self._count(_states(self._history, [], None))
        if pools["active"] or (pools["parked"] and self.config.revisit_every):
            return
        revisit = " and parked tasks are never revisited (--revisit-every 0)" if pools["parked"] else ""
        raise CurriculumError(
            f"the curriculum leaves no task to train on: of {len(self.tasks)} tasks, {pools['retired']} "
            f"are retired and {pools['parked']} parked by the results of earlier runs{revisit} "
            f"({self.config.flags()})"
        )

    # -- the interface -------------------------------------------------------------------------------

    def take(self, count: int, step: int | None = None) -> list[Task]:
        """The next `count` tasks, for training step `step` (default: the `step` attribute)."""
        if step is not None:
            self.step = step
        if not self.config.enabled:
            shuffled = TaskCursor(self.tasks, self.seed, self.position).take(count)
            self.position += count
            return shuffled
        states = self._read_states()
        order = self._ranked(states)
        picked = [order[i % len(order)] for i in range(count)]
        for index in picked:
            self._handed[self.tasks[index].id] = self._now(states)
        self.position += count
        return [self.tasks[index] for index in picked]

    def pools(self) -> dict[str, int]:
        """Pool sizes (`active`, `retired`, `parked`, `mixed`; mixed tasks are also active) as of the
        last take, or now before any; empty when no option is set (nothing to log)."""
        if not self.config.enabled:
            return {}
        if not self._pools:
            self._pools = self._count(self._read_states())
        return dict(self._pools)

    # -- internals -----------------------------------------------------------------------------------

    def _read_states(self) -> dict[str, _TaskState]:
        assert self._reader is not None
        states = _states(self._history, self._reader.read(), self.step)
        for task_id, step in self._handed.items():
            states.setdefault(task_id, _TaskState()).took(step)
        return states

    def _now(self, states: dict[str, _TaskState]) -> int:
        """The step being taken for; unknown: the one after the latest this run has rollouts of."""
        if self.step is not None:
            return self.step
        taken = [s.last_taken for s in states.values() if s.last_taken is not None]
        return max(taken) + 1 if taken else 0

    def _count(self, states: dict[str, _TaskState]) -> dict[str, int]:
        counts = dict.fromkeys(POOLS, 0)
        for task in self.tasks:
            pool = _pool_of(states.get(task.id, _TaskState()), self.config)
            counts["active" if pool == "mixed" else pool] += 1
            counts["mixed"] += pool == "mixed"
        return counts

    def _ranked(self, states: dict[str, _TaskState]) -> list[int]:
        """Indices of the tasks to take, best first; raises when every task is retired."""
        self._pools = self._count(states)
        now = self._now(states)
        epoch = self.position // len(self.tasks)
        rank = {index: r for r, index in enumerate(shuffled_order(len(self.tasks), self.seed, epoch))}
        keyed: list[tuple[int, int, int, int]] = []
        parked: list[tuple[int, int, int, int]] = []
        for index, task in enumerate(self.tasks):
            state = states.get(task.id, _TaskState())
            pool = _pool_of(state, self.config)
            last = state.last_taken if state.last_taken is not None else -1
            key = (self._tier(pool, state, now), last, rank[index], index)
            if pool == "parked":
                parked.append(key)
            if key[0] >= 0:
                keyed.append(key)
        if not keyed:
            keyed = self._dry_spell(parked)
        else:
            self._dry = False
        return [key[-1] for key in sorted(keyed)]

    def _tier(self, pool: str, state: _TaskState, now: int) -> int:
        """0: a parked task due for its try; 1 (with mixed_first): mixed, or no result yet (it may be);
        2: active; -1: not taken."""
        if pool == "retired":
            return -1
        if pool == "parked":
            every = self.config.revisit_every
            due = every > 0 and now - max(state.last_taken or 0, 0) >= every
            return 0 if due else -1
        return 1 if self.config.mixed_first and (pool == "mixed" or not state.outcomes) else 2

    def _dry_spell(self, parked: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
        if not parked:
            raise CurriculumExhausted(
                f"every one of the {len(self.tasks)} tasks is retired ({self.config.flags()}): "
                "nothing is left to train on"
            )
        if not self._dry:
            log.warning(
                "curriculum: no active task (%d retired, %d parked, none due for a revisit): trying "
                "parked tasks",
                self._pools["retired"],
                self._pools["parked"],
            )
            self._dry = True
        return parked
