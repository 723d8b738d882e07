"""Judge tasks from the calc rollouts a store holds: each one is a rollout to grade, shown exactly as
`--reward judge:examples/calc_agent/judge.md` shows it to the judge (the calc task, reference included,
the agent's output and its trace summary), with the evaluator's verdict as the judge task's private
reference (`label`).

    python examples/calc_agent/judge_tasks.py --store calc-project/.tether/store.db --out-dir DIR

train.jsonl: train-mode rollouts of every calc run (train questions only), the scripted teacher's correct
answers, a copy of each with its final number changed (a wrong answer in the same words), and the
students' own answers; val.jsonl: held-out rollouts (held-out questions, never in train), every one the
evaluator passed and a seeded sample of the rest, `--val-size` in all.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reward import correct  # noqa: E402

from tether.rewards.evidence import reported_summary, trace_summary  # noqa: E402
from tether.store import RolloutStatus, open_store  # noqa: E402
from tether.store.base import Store  # noqa: E402
from tether.store.records import Rollout  # noqa: E402

LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)", re.DOTALL)


def judge_task(
    store: Store, rollout: Rollout, output: str | None, change: tuple[str, str] | None = None
) -> dict[str, Any]:
    """A rollout to grade; `change` (old, new) rewrites the last number of its output and of its trace."""
    spans = store.query_spans(rollout_id=rollout.id, attempt=rollout.attempt_count, limit=100_000)
    trace = trace_summary(spans)
    if change is not None:
        output, trace = (_last_number_as(text, *change) for text in (output or "", trace))
    return {
        "id": f"judge-{rollout.id}{'-changed' if change else ''}",
        "graded": {
            "task": rollout.input,
            "output": output,
            "trace": trace,
            "reported": reported_summary(spans),
        },
        "reference": {"label": correct(rollout.input, output)},
    }


def _last_number_as(text: str, old: str, new: str) -> str:
    found = LAST_NUMBER.search(text)
    if found is None or found.group(1) != old:
        return text
    return text[: found.start()] + new + text[found.end() :]


def wrong_answer(output: str) -> tuple[str, str] | None:
    """(the output's last number, a number near it): the same words with a wrong answer."""
    found = LAST_NUMBER.search(output)
    if found is None:
        return None
    old = int(found.group(1))
    new = old + random.choice([-10, -2, -1, 1, 2, 10])
    return found.group(1), str(new if new >= 0 else old + 3)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", required=True, help="the calc project's store (a SQLite file)")
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--teacher-run", default="calc-teacher", help="the scripted teacher's rollouts")
    parser.add_argument("--val-size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    random.seed(args.seed)
    store = open_store(args.store)
    train: list[dict[str, Any]] = []
    val: list[dict[str, Any]] = []
    for run in store.list_runs():
        for rollout in store.list_rollouts(run=run, status=RolloutStatus.succeeded, limit=10**9):
            if rollout.output is None:
                continue
            task = judge_task(store, rollout, rollout.output)
            (val if rollout.mode == "val" else train).append(task)
            change = wrong_answer(rollout.output) if run == args.teacher_run else None
            if change is not None:
                train.append(judge_task(store, rollout, rollout.output, change))
    passed = [t for t in val if t["reference"]["label"] == 1.0]
    failed = [t for t in val if t["reference"]["label"] != 1.0]
    rest = max(0, min(len(failed), args.val_size - len(passed)))
    picked = passed[: args.val_size] + random.sample(failed, rest)
    random.shuffle(train)
    random.shuffle(picked)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, tasks in (("train", train), ("val", picked)):
        with open(args.out_dir / f"{name}.jsonl", "w") as out:
            out.writelines(json.dumps(task) + "\n" for task in tasks)
        labels = sum(t["reference"]["label"] for t in tasks)
        print(f"{name}: {len(tasks)} rollouts to grade, {labels:.0f} passed by the evaluator")


if __name__ == "__main__":
    main()
