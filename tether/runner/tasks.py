"""Task files: JSON lines (or a JSON array), one task per line, checked whole before anything runs.

Each task is a JSON object: an optional `id`, the fields its agent gets, and optionally `reference`, an
object of fields for the evaluator only (the answer, gold SQL, passages):

    {"id": "q1", "question": "What is 2 + 3?", "reference": {"answer": 5}}

The evaluator is called with the whole task (`task["reference"]["answer"]`); the agent never sees the
reference: not in TETHER_TASK, its `{placeholders}`, its Job, nor through its rollout token
(`tether.contracts.agent_task`, docs/security.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tether.contracts import TASK_REFERENCE
from tether.store.records import Task


class TaskFileError(ValueError):
    """A task file that cannot be used; the message names the file, the line and the problem."""


def _task(item: Any, where: str, dataset: str, index: int) -> Task:
    if not isinstance(item, dict):
        raise TaskFileError(f"{where}: a task must be a JSON object, got {type(item).__name__}")
    task_id = item.get("id")
    if task_id is not None and not isinstance(task_id, str | int):
        raise TaskFileError(f"{where}: 'id' must be a string or an integer")
    if TASK_REFERENCE in item and not isinstance(item[TASK_REFERENCE], dict):
        raise TaskFileError(
            f"{where}: {TASK_REFERENCE!r} must be a JSON object of the fields only the evaluator sees, "
            f'e.g. {{"{TASK_REFERENCE}": {{"answer": 5}}}}'
        )
    fields = {key: value for key, value in item.items() if key != "id"}
    return Task(
        id=str(task_id) if task_id is not None else f"{dataset}-{index}", input=fields, dataset=dataset
    )


def load_tasks(path: str | Path) -> list[Task]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TaskFileError(f"{path}: cannot read the task file: {exc.strerror or exc}") from None
    dataset = path.stem
    if text.lstrip().startswith("["):
        try:
            items = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise TaskFileError(f"{path}: not valid JSON: {exc}") from None
        if not isinstance(items, list):
            raise TaskFileError(f"{path}: expected a JSON array of tasks")
        tasks = [_task(item, f"{path}: item {i}", dataset, i) for i, item in enumerate(items)]
    else:
        tasks = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise TaskFileError(f"{path}:{number}: not valid JSON ({exc})") from None
            tasks.append(_task(item, f"{path}:{number}", dataset, len(tasks)))
    if not tasks:
        raise TaskFileError(f"{path}: the task file holds no tasks")
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise TaskFileError(f"{path}: task id {task.id!r} appears twice")
        seen.add(task.id)
    return tasks
