"""Train and val task files for the RAG agent, split from questions.jsonl, reproducibly by seed. Each task
is {"id", "question", "reference": {"answer", "passage"}}: the reference is the evaluator's only.

python examples/rag_agent/tasks.py --out-dir rag-project/data --val 52 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
QUESTIONS = HERE / "questions.jsonl"


def load_questions(path: Path = QUESTIONS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def split(questions: list[dict[str, Any]], val: int, seed: int) -> tuple[list[dict], list[dict]]:
    if not 0 < val < len(questions):
        raise SystemExit(f"--val must be between 1 and {len(questions) - 1}")
    order = questions[:]
    random.Random(seed).shuffle(order)
    return order[val:], order[:val]


def write(path: Path, tasks: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out-dir", type=Path, default=Path("data"))
    parser.add_argument("--val", type=int, default=52, help="held-out questions")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train, val = split(load_questions(), args.val, args.seed)
    write(args.out_dir / "train.jsonl", train)
    write(args.out_dir / "val.jsonl", val)
    print(f"wrote {len(train)} train and {len(val)} val tasks to {args.out_dir}")


if __name__ == "__main__":
    main()
