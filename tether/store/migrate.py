"""Copy one store into another, row for row: `tether store migrate --from URL --to URL`.

Backend-neutral: it reads and writes through `tether.store.tables`, which every backend that can be
copied provides. The target is written in one transaction, so a copy that fails leaves it as it was. An
empty target gets exact copies, sequence numbers included; a target that has data (`force`) keeps its
rows, skips copied rows whose key it has, and numbers the copied spans and rewards after its own.
Afterwards every table's count is checked.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from tether.store.base import StoreError
from tether.store.tables import TABLES, Tables, open_tables

Progress = Callable[[str, int, int], None]  # table, rows copied so far, rows in the source's table


class MigrateError(StoreError):
    pass


@dataclass
class CopyReport:
    copied: dict[str, int] = field(default_factory=dict)  # rows written, per table
    skipped: dict[str, int] = field(default_factory=dict)  # rows the target had already (force only)


def migrate_store(
    source_url: str,
    target_url: str,
    *,
    project_dir: Path = Path("."),
    force: bool = False,
    progress: Progress | None = None,
) -> CopyReport:
    with ExitStack() as closing:
        source = open_tables(source_url, project_dir)
        closing.callback(source.close)
        target = open_tables(target_url, project_dir)
        closing.callback(target.close)
        if source.where == target.where:
            raise MigrateError(f"the source and the target are the same store: {source.where}")
        before = {table: target.count(table) for table in TABLES}
        if any(before.values()) and not force:
            held = ", ".join(f"{count} {table}" for table, count in before.items() if count)
            raise MigrateError(
                f"the target store {target.where} is not empty ({held}): copy into an empty database, "
                "or pass --force to add to it"
            )
        report = _copy(source, target, keep_seq=not any(before.values()), progress=progress)
        target.commit()
        _verify(source, target, before, report)
        return report


def _copy(source: Tables, target: Tables, keep_seq: bool, progress: Progress | None) -> CopyReport:
    report = CopyReport()
    for table in TABLES:
        total, done, written = source.count(table), 0, 0
        for rows in source.read(table):
            written += target.write(table, rows, keep_seq)
            done += len(rows)
            if progress is not None:
                progress(table, done, total)
        if progress is not None and total == 0:
            progress(table, 0, 0)
        report.copied[table] = written
        report.skipped[table] = done - written
    return report


def _verify(source: Tables, target: Tables, before: dict[str, int], report: CopyReport) -> None:
    into_empty = not any(before.values())
    for table in TABLES:
        if into_empty and report.skipped[table]:
            raise MigrateError(
                f"{table}: {report.skipped[table]} rows of the source were not copied into the empty target "
                "(duplicate keys?); nothing was lost from the source, but the copy is incomplete"
            )
        expected = before[table] + report.copied[table]
        found = target.count(table)
        if found != expected or source.count(table) != report.copied[table] + report.skipped[table]:
            raise MigrateError(
                f"{table}: the target holds {found} rows after the copy, expected {expected}; "
                "the source changed during the copy? Stop every writer and copy again into an empty database"
            )
