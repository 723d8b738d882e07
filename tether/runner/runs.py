"""Runs: every `rollout`, `train` and `optimize-prompt` run has a name, and its rollouts belong to it.

A run's record is a store resource (`run:NAME`, kind `run`): the command, its tasks (id and a digest of
each input), the settings that shape its rollouts, how often it was started, and the process running it.
Re-running the same command finds the record and resumes: rollouts are keyed within the run (task id and
sample index), so enqueueing them again returns the existing ones and only what is missing runs.
`--fresh` archives the old run under `NAME~N` (nothing is deleted) and starts over.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from tether.contracts import RUN_RESOURCE_KIND
from tether.store.base import InvalidTransition, NotFound, Store
from tether.store.records import RolloutStatus, Task
from tether.store.recovery import local_process_gone

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class RunError(ValueError):
    """A run that cannot be started or resumed as asked; the message says why and what to do."""


def task_digest(task: Task) -> str:
    return hashlib.sha256(orjson.dumps(task.input, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def default_run_name(command: str, label: str, settings: Mapping[str, Any]) -> str:
    """`COMMAND-LABEL-HASH`: the same command line gives the same name, so running it again resumes."""
    digest = hashlib.sha256(orjson.dumps(dict(settings), option=orjson.OPT_SORT_KEYS)).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.")[:40] or "run"
    return f"{command}-{slug}-{digest}"


def check_run_name(name: str) -> None:
    if not RUN_NAME.fullmatch(name):
        raise RunError(f"bad run name {name!r}: use letters, digits, '.', '_' and '-' (at most 128)")


def process_id() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/run"


@dataclass
class RunRecord:
    name: str
    command: str
    tasks: list[list[str]]  # [task id, input digest], in file order
    settings: dict[str, Any] = field(default_factory=dict)
    starts: int = 1
    owner: str = field(default_factory=process_id)

    @property
    def resumed(self) -> bool:
        return self.starts > 1

    @classmethod
    def of(cls, value: Any) -> RunRecord:
        return cls(**{key: value[key] for key in cls.__dataclass_fields__ if key in value})


def resource_name(run: str) -> str:
    return f"run:{run}"


def load_run(store: Store, name: str) -> RunRecord | None:
    try:
        return RunRecord.of(store.get_resource(resource_name(name)).value)
    except NotFound:
        return None


def start_run(
    store: Store,
    name: str,
    command: str,
    tasks: Sequence[Task],
    settings: Mapping[str, Any] | None = None,
    *,
    fresh: bool = False,
) -> RunRecord:
    """Begin run `name`, or resume it. Raises RunError when the existing run does not match."""
    check_run_name(name)
    wanted = RunRecord(name, command, [[t.id, task_digest(t)] for t in tasks], dict(settings or {}))
    existing = load_run(store, name)
    if existing is not None and fresh:
        archive_run(store, existing)
        existing = None
    if existing is not None:
        _check_same(existing, wanted)
        wanted.starts = existing.starts + 1
    store.put_resource(resource_name(name), RUN_RESOURCE_KIND, asdict(wanted))
    return wanted


def _check_same(existing: RunRecord, wanted: RunRecord) -> None:
    hint = f"run again with --fresh to start run {existing.name!r} over, or pick another --run NAME"
    if existing.owner != wanted.owner and not local_process_gone(existing.owner):
        host, _, rest = existing.owner.partition("/")
        if host == socket.gethostname():
            raise RunError(f"run {existing.name!r} is being run right now by process {rest.split('/')[0]}")
    if existing.command != wanted.command:
        raise RunError(f"run {existing.name!r} is a {existing.command} run, not {wanted.command}; {hint}")
    for index, (old, new) in enumerate(zip(existing.tasks, wanted.tasks, strict=False)):
        if old != new:
            what = "has another id" if old[0] != new[0] else "has changed"
            raise RunError(
                f"the task file changed since run {existing.name!r} started: task {index + 1} "
                f"({new[0]!r}) {what}; {hint}"
            )
    if len(existing.tasks) != len(wanted.tasks):
        raise RunError(
            f"the task file changed since run {existing.name!r} started: it had {len(existing.tasks)} "
            f"tasks, now {len(wanted.tasks)}; {hint}"
        )
    for key in sorted(set(existing.settings) | set(wanted.settings)):
        if existing.settings.get(key) != wanted.settings.get(key):
            raise RunError(
                f"run {existing.name!r} was started with {key}={existing.settings.get(key)!r}, "
                f"not {wanted.settings.get(key)!r}; {hint}"
            )


def archive_run(store: Store, record: RunRecord) -> None:
    """Move a run out of the way under `NAME~N`: its queued rollouts are cancelled (nothing runs them
    any more), every rollout and record is kept."""
    number = 1
    while load_run(store, f"{record.name}~{number}") is not None:
        number += 1
    archived = f"{record.name}~{number}"
    cancel_queued(store, record.name, "the run was started over (--fresh)")
    store.rename_run(record.name, archived)
    store.put_resource(resource_name(archived), RUN_RESOURCE_KIND, {**asdict(record), "name": archived})


def cancel_queued(store: Store, run: str, reason: str) -> int:
    cancelled = 0
    for rollout in store.list_rollouts(run=run, status=RolloutStatus.queued, limit=1_000_000):
        try:
            store.update_status(rollout.id, RolloutStatus.cancelled, error=reason)
            cancelled += 1
        except InvalidTransition:  # claimed meanwhile: it runs to its end under the archived name
            continue
    return cancelled
