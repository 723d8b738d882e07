"""Reproducible arithmetic word problems, small enough that a 135M model sometimes gets them right.

python tasks.py --out-dir data --train 200 --val 48 --seed 0

Held out by construction: every (operation, numbers) a problem can have is assigned to train or to val
once, by `--seed` (a quarter of each operation's to val), and each split is drawn only from its own. So
no val problem repeats a train problem's sum or difference under other names or things; `3 + 5` and
`5 + 3` count as the same problem.

Problems are two additions to one subtraction. `--balanced-train` draws the training problems one to one
instead (the val file stays the same): with two thirds of training rewarded for adding, "always add" is a
policy RL can settle in, and it fails every held-out subtraction.

Each task is {"id", "question", "reference": {"answer"}}: the answer is under `reference`, which only the
evaluator gets (the agent never sees it: README, "Task files").
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NAMES = ["Tom", "Ana", "Li", "Sara", "Omar", "Maya", "Ben", "Zoe"]
THINGS = ["apples", "books", "coins", "cards", "pens", "shells", "stamps", "marbles"]
LOW, HIGH = 2, 9  # the two numbers drawn
MAX_EXTRA = 5  # a subtraction's first number is the larger one plus 1 to this
VAL_SHARE = 0.25  # of each operation's (numbers) combinations
MIX = ("add", "add", "sub")  # the operations a problem is drawn from
BALANCED = ("add", "sub")

Key = tuple[str, int, int]  # (operation, first number, second number), addition's numbers sorted


def problem(rng: random.Random, mix: tuple[str, ...] = MIX) -> dict:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(LOW, HIGH), rng.randint(LOW, HIGH)
    kind = rng.choice(mix)
    if kind == "sub":
        a, b = max(a, b) + rng.randint(1, MAX_EXTRA), min(a, b)
        question = f"{name} has {a} {thing} and gives away {b}. How many {thing} does {name} have now?"
        return {"question": question, "answer": a - b, "key": ("sub", a, b)}
    question = f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?"
    return {"question": question, "answer": a + b, "key": ("add", min(a, b), max(a, b))}


def all_keys() -> dict[str, list[Key]]:
    """Every (operation, numbers) `problem` can produce, per operation."""
    add = [("add", a, b) for a in range(LOW, HIGH + 1) for b in range(a, HIGH + 1)]
    sub = [("sub", a, b) for b in range(LOW, HIGH + 1) for a in range(b + 1, HIGH + MAX_EXTRA + 1)]
    return {"add": add, "sub": sub}


def held_out_keys(seed: int) -> frozenset[Key]:
    """The combinations reserved for val: a seeded quarter of each operation's."""
    rng = random.Random(f"held-out-{seed}")
    held: set[Key] = set()
    for keys in all_keys().values():
        held.update(rng.sample(keys, round(len(keys) * VAL_SHARE)))
    return frozenset(held)


def make(
    count: int, seed: int, held_out: frozenset[Key], val: bool, mix: tuple[str, ...] = MIX
) -> list[dict]:
    """`count` problems whose combination is in `held_out` (val) or not (train), in the order the seeded
    generator draws them from `mix`."""
    rng = random.Random(seed)
    tasks: list[dict] = []
    while len(tasks) < count:
        drawn = problem(rng, mix)
        if (drawn["key"] in held_out) == val:
            reference = {"answer": drawn["answer"]}
            tasks.append(
                {"id": f"s{seed}-{len(tasks)}", "question": drawn["question"], "reference": reference}
            )
    return tasks


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
    parser.add_argument(
        "--balanced-train", action="store_true", help="draw training additions and subtractions one to one"
    )
    args = parser.parse_args()
    held_out = held_out_keys(args.seed)
    train_mix = BALANCED if args.balanced_train else MIX
    write(args.out_dir / "train.jsonl", make(args.train, args.seed, held_out, val=False, mix=train_mix))
    write(args.out_dir / "val.jsonl", make(args.val, args.seed + 1000, held_out, val=True))
    print(f"wrote {args.train} train and {args.val} val tasks to {args.out_dir}")


if __name__ == "__main__":
    main()
