"""Reproducible arithmetic word problems, small enough that a 135M model sometimes gets them right.

python tasks.py --out-dir data --train 200 --val 48 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NAMES = ["Tom", "Ana", "Li", "Sara", "Omar", "Maya", "Ben", "Zoe"]
THINGS = ["apples", "books", "coins", "cards", "pens", "shells", "stamps", "marbles"]


def problem(rng: random.Random) -> dict:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    kind = rng.choice(["add", "add", "sub"])
    if kind == "sub":
        a, b = max(a, b) + rng.randint(1, 5), min(a, b)
        question = f"{name} has {a} {thing} and gives away {b}. How many {thing} does {name} have now?"
        return {"question": question, "answer": a - b}
    question = f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?"
    return {"question": question, "answer": a + b}


def make(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"id": f"s{seed}-{i}", **problem(rng)} for i in range(count)]


def write(path: Path, tasks: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out-dir", type=Path, default=Path("data"))
    parser.add_argument("--train", type=int, default=200)
    parser.add_argument("--val", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write(args.out_dir / "train.jsonl", make(args.train, args.seed))
    write(args.out_dir / "val.jsonl", make(args.val, args.seed + 1000))
    print(f"wrote {args.train} train and {args.val} val tasks to {args.out_dir}")


if __name__ == "__main__":
    main()
